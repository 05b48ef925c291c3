package testutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestNamespaceName(t *testing.T) {
	for _, c := range []struct{ test, want string }{
		{"TestX/simple", "t1-simple"},
		{"TestX/HTTPMode_runs_to_Complete,_submits_once,_reports_Ray's_times", "t1-httpmode-runs-to-complete-submits-once-reports"},
		{"TestX/legacy_onFailure_DeleteNone_keeps_the_cluster;_onSuccess", "t1-legacy-onfailure-deletenone-keeps-the-cluster-o"},
		{"TestX/a.b--c__", "t1-a-b-c"},
	} {
		got := NamespaceName(1, c.test)
		if got != c.want {
			t.Errorf("NamespaceName(%q) = %q, want %q", c.test, got, c.want)
		}
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("%q: %v", got, errs)
		}
	}
}

func TestBuildersLabel(t *testing.T) {
	if got := MakeRayJob("ns", "j").Label("a", "b").Label("c", "d").Obj().Labels; got["a"] != "b" || got["c"] != "d" {
		t.Errorf("RayJob labels %v", got)
	}
	if got := MakeRayService("ns", "s").Label("a", "b").Obj().Labels; got["a"] != "b" {
		t.Errorf("RayService labels %v", got)
	}
	if got := MakeRayCluster("ns", "c").Label("a", "b").Obj().Labels; got["a"] != "b" {
		t.Errorf("RayCluster labels %v", got)
	}
}

func TestCacheOnlyLabelled(t *testing.T) {
	var o ctrl.Options
	CacheOnlyLabelled(&corev1.Pod{}, "ray.io/node-type")(&o)
	CacheOnlyLabelled(&corev1.Service{}, "ray.io/cluster")(&o)
	if len(o.Cache.ByObject) != 2 {
		t.Fatalf("ByObject %v, want a Pod and a Service", o.Cache.ByObject)
	}
	for obj, by := range o.Cache.ByObject {
		key := "ray.io/cluster"
		if _, pod := obj.(*corev1.Pod); pod {
			key = "ray.io/node-type"
		}
		if !by.Label.Matches(labels.Set{key: "x"}) || by.Label.Matches(labels.Set{"other": "x"}) {
			t.Errorf("%T: selector %q, want one that requires %s", obj, by.Label, key)
		}
	}
}
