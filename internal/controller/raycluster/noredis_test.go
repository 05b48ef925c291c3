package raycluster

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/testutil"
)

// With the Redis cleanup off (--gcs-ft-redis-cleanup=false): a cluster with a Redis-backed GCS gets no finalizer,
// and a deleted one that carries it from before is released at once, with no cleanup Job, saying what is left in
// Redis.
func TestRedisCleanupOff(t *testing.T) {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ft := func(name string) *rayv1.RayCluster {
		c := testutil.MakeRayCluster("ns", name).Obj()
		c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{RedisAddress: "redis:6379", ExternalStorageNamespace: "ns-" + name}
		return c
	}
	live := ft("live")
	deleted := ft("deleted")
	deleted.Finalizers = []string{clusterbuild.FinalizerGCSFTRedisCleanup}
	deleted.DeletionTimestamp = &metav1.Time{Time: metav1.Now().Time}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&corev1.Pod{}, clusterpods.Index, clusterpods.IndexValue).WithObjects(live, deleted).Build()
	rec := events.NewFakeRecorder(10)
	r := newReconciler(cl, cl, rec, Options{NoRedisCleanup: true})

	if err := cl.Get(ctx, client.ObjectKeyFromObject(live), live); err != nil {
		t.Fatal(err)
	}
	if r.wantsCleanupFinalizer(live) {
		t.Errorf("a live Redis-backed cluster is to carry the Redis cleanup finalizer with the cleanup off")
	}

	if err := cl.Get(ctx, client.ObjectKeyFromObject(deleted), deleted); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(deleted)}); err != nil {
		t.Fatal(err)
	}
	// The fake client deletes an object whose last finalizer goes.
	if err := cl.Get(ctx, client.ObjectKeyFromObject(deleted), deleted); err == nil {
		t.Errorf("the deleted cluster is still there, finalizers %v", deleted.Finalizers)
	}
	jobs := &batchv1.JobList{}
	if err := cl.List(ctx, jobs); err != nil || len(jobs.Items) != 0 {
		t.Errorf("%d Jobs (%v); want no cleanup Job", len(jobs.Items), err)
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, ReasonRedisCleanupSkipped) || !strings.Contains(e, `"ns-deleted"`) || !strings.Contains(e, "--gcs-ft-redis-cleanup=false") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no event for the Redis keys left behind")
	}
}
