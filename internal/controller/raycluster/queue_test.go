package raycluster

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	crevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestOwnerHandler(t *testing.T) {
	pod := func(name, apiVersion, kind, owner string, controller bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "1"}}
		if kind != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: owner, Controller: ptr.To(controller)}}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		obj  *corev1.Pod
		want string // "" for none
	}{
		{"controlled by a RayCluster", pod("a", "ray.io/v1", "RayCluster", "rc", true), "rc"},
		{"another version of ray.io", pod("b", "ray.io/v1alpha1", "RayCluster", "rc", true), "rc"},
		{"not the controller", pod("c", "ray.io/v1", "RayCluster", "rc", false), ""},
		{"another group's RayCluster", pod("d", "example.com/v1", "RayCluster", "rc", true), ""},
		{"another kind", pod("e", "ray.io/v1", "RayJob", "rc", true), ""},
		{"no owner", pod("f", "", "", "", false), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r, ok := clusterOf(tc.obj); ok != (tc.want != "") || (ok && r.NamespacedName != (types.NamespacedName{Namespace: "ns", Name: tc.want})) {
				t.Errorf("clusterOf = %v, %v; want %q", r, ok, tc.want)
			}
		})
	}

	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	h := ownerHandler()
	old, changed := pod("p", "ray.io/v1", "RayCluster", "rc", true), pod("p", "ray.io/v1", "RayCluster", "rc", true)
	changed.ResourceVersion = "2"
	h.Update(context.Background(), crevent.UpdateEvent{ObjectOld: old, ObjectNew: changed}, q)
	h.Create(context.Background(), crevent.CreateEvent{Object: pod("q", "ray.io/v1", "RayCluster", "listed", true), IsInInitialList: true}, q)
	got := map[string]int{}
	for q.Len() > 0 {
		item, prio, _ := q.GetWithPriority()
		got[item.Name] = prio
		q.Done(item)
	}
	// A pod change is one request at progressPriority; a pod from the initial list stays low.
	if len(got) != 2 || got["rc"] != progressPriority || got["listed"] != handler.LowPriority {
		t.Errorf("queued %v, want rc at %d and listed at %d", got, progressPriority, handler.LowPriority)
	}
}
