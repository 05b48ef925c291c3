package envtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestOptimizationsOff runs the operator once with every performance mechanism on and once with each one off
// (--disable-optimization), each on a namespace of its own, through the same RayCluster's life: created, its pods
// bound to a node (an update the pod filter drops), then Running and Ready, then deleted before its pods. With
// every mechanism on, each acts at least once in that life (so the runs below exercise it); with one off, that one
// never acts (the plain path is taken) and the cluster reaches the same status: ready, with its head address and
// one ready worker.
func TestOptimizationsOff(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	cases := map[string]*optimize.Switches{"all-on": optimize.Off()}
	for _, m := range optimize.All {
		cases[string(m)+"-off"] = optimize.Off(m)
	}
	for name, sw := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ns := "opt-" + name
			if err := cl.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			mgr, err := operator.NewManager(cfg, operator.Options{WatchNamespaces: []string{ns}, SkipNameValidation: true, Optimizations: sw,
				StatusCoalesceWindow: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := operator.Setup(mgr, operator.Options{WatchNamespaces: []string{ns}, SkipNameValidation: true, Optimizations: sw,
				StatusCoalesceWindow: time.Second}); err != nil {
				t.Fatal(err)
			}
			ctx := testutil.RunManager(t, mgr)
			got := clusterLife(t, ctx, cl, ns)
			// The binary's pages are released beside the controllers, once the caches have synced; wait for that
			// act, which no reconcile waits for. Off, the releaser is never added, so it cannot act.
			testutil.Eventually(t, time.Minute, "the startup pages released", func() (bool, string) {
				return !sw.On(optimize.StartupPagesRelease) || sw.Count(optimize.StartupPagesRelease) > 0, ""
			})
			if got.State != rayv1.Ready || got.Head.PodIP == "" || got.ReadyWorkerReplicas != 1 || got.AvailableWorkerReplicas != 1 {
				t.Errorf("status %+v, want ready with a head address and one ready worker", got)
			}
			clusterGone(t, ctx, cl, mgr.GetCache(), ns)
			testutil.Eventually(t, time.Minute, "the gone cluster's pod events dropped", func() (bool, string) {
				return !sw.On(optimize.GoneClusterFilter) || sw.Count(optimize.GoneClusterFilter) > 0, ""
			})
			for _, m := range optimize.All {
				switch n := sw.Count(m); {
				case !sw.On(m) && n != 0:
					t.Errorf("%s is off but acted %d times", m, n)
				case name == "all-on" && n == 0:
					t.Errorf("%s is on but never acted: the scenario does not exercise it", m)
				}
			}
		})
	}
}

// clusterGone deletes clusterLife's RayCluster and, once the operator's cache no longer has it, its pods (the
// garbage collector's part, which envtest does not run): their events find the cluster gone.
func clusterGone(t *testing.T, ctx context.Context, cl client.Client, c cache.Cache, ns string) {
	t.Helper()
	rc := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rc"}}
	if err := cl.Delete(ctx, rc); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the cluster gone from the operator's cache", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(rc), &rayv1.RayCluster{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if err := cl.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
}

// clusterLife creates a RayCluster with one worker in ns, binds its pods to a node, makes them Running and Ready,
// and returns its status once it is ready.
func clusterLife(t *testing.T, ctx context.Context, cl client.Client, ns string) rayv1.RayClusterStatus {
	t.Helper()
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	if err := cl.Create(ctx, rc); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	testutil.Eventually(t, time.Minute, "a head and a worker", func() (bool, string) {
		if err := cl.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 2, ""
	})
	for i := range pods.Items {
		p := &pods.Items[i]
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		if err := cl.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.1"
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
		if err := cl.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var got rayv1.RayCluster
	testutil.Eventually(t, time.Minute, "the cluster ready", func() (bool, string) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(rc), &got); err != nil {
			return false, err.Error()
		}
		return got.Status.State == rayv1.Ready && got.Status.ReadyWorkerReplicas == 1, string(got.Status.State)
	})
	return got.Status
}
