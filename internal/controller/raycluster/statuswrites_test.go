package raycluster

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/testutil"
)

// A worker fails and its replacement turns Ready (the oracle's worker-failed scenario): the controller writes the
// status with one ready worker, then reconciles again, before its cache shows that write, with both workers Ready.
// The status it computes equals the one its stale copy holds (two ready) but not the stored one (one): the change
// must not be dropped, as nothing else brings the cluster back (its own status updates are not watched) until the
// resync, minutes later. With the status coalescing on and off.
func TestStatusNotDroppedForStaleCache(t *testing.T) {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	head, worker := pod(rayv1.NodeTypeHead, "Running", true), pod(rayv1.NodeTypeWorker, "Running", true)
	bothReady := observed{reconcileOK: true, pods: []corev1.Pod{head, worker, worker}}
	oneReady := observed{reconcileOK: true, pods: []corev1.Pod{head, worker, pod(rayv1.NodeTypeWorker, "Running", false)}}

	for _, tc := range []struct {
		name string
		sw   *optimize.Switches
	}{
		{"coalescing", nil},
		{"plain", optimize.Off(optimize.StatusCoalescing)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := testutil.MakeRayCluster("ns", "rc").Workers("small", 2).Obj()
			cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rc).WithStatusSubresource(rc).Build()
			// No coalescing window: every change is due at once, so only the stale cache can keep one back.
			r := newReconciler(cl, cl, nil, Options{StatusCoalesceWindow: -1, Optimizations: tc.sw})
			key := client.ObjectKeyFromObject(rc)
			read := func() *rayv1.RayCluster {
				c := &rayv1.RayCluster{}
				if err := cl.Get(ctx, key, c); err != nil {
					t.Fatal(err)
				}
				return c
			}
			// write runs the status step of a reconcile that read the cluster as c and observed obs, and returns what
			// the reconcile returns.
			write := func(c *rayv1.RayCluster, obs observed) ctrl.Result {
				t.Helper()
				rn := newRun(c, key)
				rn.obs = obs
				read := c.Status.DeepCopy()
				var out reconcile.Result
				res, err := out.Finish(events.NewFakeRecorder(10), c, nil, r.life.WriteStatus(ctx, c, read, r.statusStep(rn, read, &out), &out))
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			write(read(), bothReady)
			stale := read() // what the cache holds until it shows the next write
			write(stale.DeepCopy(), oneReady)
			if got := read().Status.ReadyWorkerReplicas; got != 1 {
				t.Fatalf("stored readyWorkerReplicas %d after the worker failed, want 1", got)
			}

			res := write(stale.DeepCopy(), bothReady)
			stored := read().Status.ReadyWorkerReplicas
			if stored != 2 && (res.RequeueAfter == 0 || res.RequeueAfter > reconcile.CacheLagRequeue) {
				t.Fatalf("a reconcile that read the cluster before its last status write left readyWorkerReplicas %d "+
					"and asked to look again after %s: the replacement's readiness is dropped", stored, res.RequeueAfter)
			}
			// Looked at again once the cache shows the write.
			write(read(), bothReady)
			if got := read().Status.ReadyWorkerReplicas; got != 2 {
				t.Errorf("stored readyWorkerReplicas %d once the cache caught up, want 2", got)
			}
		})
	}
}
