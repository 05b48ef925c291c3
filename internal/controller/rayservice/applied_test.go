package rayservice

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestAppliedRecord: a Serve config this process applied is taken as applied by every later reconcile, whether
// the cluster read from the cache predates the annotation patch or the patch failed (then it is written again,
// without sending the config again), until the cached cluster carries the annotations itself.
func TestAppliedRecord(t *testing.T) {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rc", UID: "c1"}}
	failPatches := 1
	cl := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(c.DeepCopy()).Build(), interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if failPatches > 0 {
				failPatches--
				return apierrors.NewInternalError(errors.New("injected"))
			}
			return cl.Patch(ctx, obj, patch, opts...)
		}})
	r := &Reconciler{client: cl}
	applied := func(c *rayv1.RayCluster) bool {
		return c.Annotations[clusterbuild.AnnotationServeConfigHash] == "h1" && c.Annotations[clusterbuild.AnnotationServeConfigHead] == "head-1"
	}

	r.applied.Store(c.UID, appliedRecord{hash: "h1", headID: "head-1"})
	if err := r.recordApplied(ctx, c); err == nil {
		t.Fatal("the injected patch failure was not returned")
	}
	stale := c.DeepCopy()
	if unwritten := r.withApplied(stale); !unwritten || !applied(stale) {
		t.Errorf("after a failed patch: unwritten %v, annotations %v; want the record put on the cluster, still to write", unwritten, stale.Annotations)
	}
	if c.Annotations != nil {
		t.Errorf("withApplied changed the cached object's annotations: %v", c.Annotations)
	}
	if err := r.recordApplied(ctx, c); err != nil {
		t.Fatal(err)
	}
	stored := &rayv1.RayCluster{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(c), stored); err != nil || !applied(stored) {
		t.Fatalf("stored annotations %v (%v)", stored.Annotations, err)
	}
	stale = c.DeepCopy()
	if unwritten := r.withApplied(stale); unwritten || !applied(stale) {
		t.Errorf("a cache behind the written record: unwritten %v, annotations %v", unwritten, stale.Annotations)
	}
	if unwritten := r.withApplied(stored); unwritten || !applied(stored) {
		t.Errorf("the cache caught up: unwritten %v, annotations %v", unwritten, stored.Annotations)
	}
	if _, ok := r.applied.Load(c.UID); ok {
		t.Error("the record is kept after the cached cluster shows it")
	}
}
