package envtest

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/testutil"
)

// Against a real API server: registered by several controllers of one manager (once takes), the index finds
// exactly the pods of the named cluster in the namespace asked, with other selectors still applied.
func TestClusterPodsIndex(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	mgr := testutil.NewManager(t, cfg)
	for range 3 {
		if err := clusterpods.Register(context.Background(), mgr.GetFieldIndexer()); err != nil {
			t.Fatal(err)
		}
	}
	ctx := testutil.RunManager(t, mgr)
	for _, ns := range []string{"one", "two"} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(ns, name, cluster, nodeType string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"ray.io/node-type": nodeType}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray", Image: "ray"}}}}
		if cluster != "" {
			p.Labels["ray.io/cluster"] = cluster
		}
		if err := cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	pod("one", "a-head", "a", "head")
	pod("one", "a-worker", "a", "worker")
	pod("one", "b-head", "b", "head")
	pod("two", "a-head", "a", "head")
	pod("one", "loose", "", "head")
	names := func(opts ...client.ListOption) (out []string) {
		var l corev1.PodList
		if err := mgr.GetClient().List(ctx, &l, opts...); err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			out = append(out, p.Namespace+"/"+p.Name)
		}
		slices.Sort(out)
		return out
	}
	testutil.Eventually(t, 30*time.Second, "the cache has every pod", func() (bool, string) {
		n := names()
		return len(n) == 5, ""
	})
	for _, tc := range []struct {
		opts []client.ListOption
		want []string
	}{
		{[]client.ListOption{client.InNamespace("one"), clusterpods.Of("a")}, []string{"one/a-head", "one/a-worker"}},
		{[]client.ListOption{client.InNamespace("two"), clusterpods.Of("a")}, []string{"two/a-head"}},
		{[]client.ListOption{client.InNamespace("one"), clusterpods.Of("b")}, []string{"one/b-head"}},
		{[]client.ListOption{client.InNamespace("one"), clusterpods.Of("c")}, nil},
		{[]client.ListOption{client.InNamespace("one"), clusterpods.Of("a"), client.MatchingLabels{"ray.io/node-type": "worker"}}, []string{"one/a-worker"}},
	} {
		if got := names(tc.opts...); !slices.Equal(got, tc.want) {
			t.Errorf("%v: %v, want %v", tc.opts, got, tc.want)
		}
	}
}
