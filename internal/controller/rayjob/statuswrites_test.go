package rayjob

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/testutil"
)

// A RayJob mirrors its cluster's status, and in the states that poll nothing (initializing while the cluster is
// not ready, finished with the cluster kept) only the cluster's events bring it back. A worker of the cluster
// fails and its replacement turns Ready: the controller writes the job's status with one ready worker, then
// reconciles again for the replacement before its cache shows that write. The status it computes (two ready)
// equals its stale copy but not the stored one (one): the change must not be dropped, as the controller does not
// watch its own status updates and no other event comes.
func TestStatusNotDroppedForStaleCache(t *testing.T) {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		status rayv1.RayJobStatus
	}{
		{"initializing", rayv1.RayJobStatus{JobDeploymentStatus: rayv1.JobDeploymentStatusInitializing, JobStatus: rayv1.JobStatusNew}},
		{"finished", rayv1.RayJobStatus{JobDeploymentStatus: rayv1.JobDeploymentStatusComplete, JobStatus: rayv1.JobStatusSucceeded,
			EndTime: ptr.To(metav1.NewTime(now.Add(-time.Minute)))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := job(func(j *rayv1.RayJob) {
				controllerutil.AddFinalizer(j, Finalizer)
				j.Status = tc.status
				j.Status.JobId, j.Status.RayClusterName = "j-abc", "j-abc"
				j.Status.StartTime = ptr.To(metav1.NewTime(now.Add(-time.Hour)))
			})
			rc := ClusterFor(j, j.Status.RayClusterName)
			cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(j, rc).
				WithStatusSubresource(&rayv1.RayJob{}, &rayv1.RayCluster{}).
				WithIndex(&corev1.Pod{}, clusterpods.Index, clusterpods.IndexValue). // as SetupWithManager registers it
				Build()
			// stale, when set, is what the cache holds of the RayJob.
			var stale *rayv1.RayJob
			cached := interceptor.NewClient(cl, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if s, ok := obj.(*rayv1.RayJob); ok && stale != nil {
						stale.DeepCopyInto(s)
						return nil
					}
					return c.Get(ctx, key, obj, opts...)
				},
			})
			r := &Reconciler{client: cached, reader: cl, recorder: events.NewFakeRecorder(100),
				opts: Options{Clock: clocktesting.NewFakeClock(now), PollInterval: DefaultPollInterval, StatusWriter: reconcile.ClientStatus(cl)}}
			r.life = r.lifecycle()
			readyWorkers := func(n int32) {
				t.Helper()
				c := &rayv1.RayCluster{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(rc), c); err != nil {
					t.Fatal(err)
				}
				c.Status.ReadyWorkerReplicas = n
				if err := cl.Status().Update(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			reconcileJob := func() ctrl.Result {
				t.Helper()
				res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(j)})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			stored := func() int32 {
				t.Helper()
				got := &rayv1.RayJob{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(j), got); err != nil {
					t.Fatal(err)
				}
				return got.Status.RayClusterStatus.ReadyWorkerReplicas
			}

			readyWorkers(2)
			reconcileJob()
			if got := stored(); got != 2 {
				t.Fatalf("stored readyWorkerReplicas %d, want 2", got)
			}
			stale = &rayv1.RayJob{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(j), stale); err != nil {
				t.Fatal(err)
			}
			if res := reconcileJob(); res.RequeueAfter != 0 {
				t.Fatalf("the test needs a state that polls nothing; requeued after %s", res.RequeueAfter)
			}

			// The worker fails: written over the version the cache will hold a while longer.
			readyWorkers(1)
			live := stale
			stale = nil
			reconcileJob()
			if got := stored(); got != 1 {
				t.Fatalf("stored readyWorkerReplicas %d after the worker failed, want 1", got)
			}

			// Its replacement turns Ready; the cache still shows the RayJob before that write.
			readyWorkers(2)
			stale = live // the RayJob at the version the last status write replaced
			res := reconcileJob()
			if got := stored(); got != 2 && (res.RequeueAfter == 0 || res.RequeueAfter > reconcile.CacheLagRequeue) {
				t.Fatalf("a reconcile that read the RayJob before its last status write left readyWorkerReplicas %d "+
					"and asked to look again after %s: the replacement's readiness is dropped", got, res.RequeueAfter)
			}

			// Looked at again once the cache shows the write.
			stale = nil
			reconcileJob()
			if got := stored(); got != 2 {
				t.Errorf("stored readyWorkerReplicas %d once the cache caught up, want 2", got)
			}
		})
	}
}
