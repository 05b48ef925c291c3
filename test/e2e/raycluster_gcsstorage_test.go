package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestGCSStorageDeletionPolicyOnDevCluster deletes two clusters on the embedded (rocksdb) GCS backend where
// Kubernetes' garbage collector runs: the claim of the DeleteWithCluster one goes with it, the claim of the Retain
// one stays once the collector has dealt with that cluster (its pods are gone).
func TestGCSStorageDeletionPolicyOnDevCluster(t *testing.T) {
	_, cl := devCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := "gcs-storage"
	if err := testutil.CreateNamespace(ctx, cl, ns); err != nil {
		t.Fatal(err)
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	clusters := map[rayv1.GcsStorageDeletionPolicy]*rayv1.RayCluster{}
	for name, policy := range map[string]rayv1.GcsStorageDeletionPolicy{"gone": rayv1.GcsStorageDeleteWithCluster, "kept": rayv1.GcsStorageRetain} {
		rc := testutil.MakeRayCluster(ns, name).Workers("small", 1).Obj()
		rc.Spec.WorkerGroupSpecs[0].Template = testutil.RayPodTemplate("ray-worker", "100m", "128Mi")
		rc.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{Backend: rayv1.GcsFaultToleranceBackendRocksDB,
			Storage: &rayv1.GcsEmbeddedStorage{DeletionPolicy: policy}}
		if err := cl.Create(ctx, rc); err != nil {
			t.Fatal(err)
		}
		clusters[policy] = rc
	}
	pvc := func(rc *rayv1.RayCluster) (*corev1.PersistentVolumeClaim, error) {
		got := &corev1.PersistentVolumeClaim{}
		return got, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: rc.Name + "-gcs-pvc"}, got)
	}
	pods := func(rc *rayv1.RayCluster) int {
		list := &corev1.PodList{}
		if err := cl.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelCluster: rc.Name}); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	for _, rc := range clusters {
		poll(fmt.Sprintf("%s's claim and head pod", rc.Name), func() bool {
			_, err := pvc(rc)
			return err == nil && pods(rc) > 0
		})
	}
	kept, _ := pvc(clusters[rayv1.GcsStorageRetain])
	for _, rc := range clusters {
		if err := cl.Delete(ctx, rc); err != nil {
			t.Fatal(err)
		}
	}
	poll("the DeleteWithCluster claim to be garbage-collected", func() bool {
		_, err := pvc(clusters[rayv1.GcsStorageDeleteWithCluster])
		return apierrors.IsNotFound(err)
	})
	retained := clusters[rayv1.GcsStorageRetain]
	poll("the Retain cluster's pods to be garbage-collected", func() bool {
		return apierrors.IsNotFound(cl.Get(ctx, client.ObjectKeyFromObject(retained), &rayv1.RayCluster{})) && pods(retained) == 0
	})
	got, err := pvc(retained)
	if err != nil || got.UID != kept.UID || got.DeletionTimestamp != nil {
		t.Errorf("the retained claim after its cluster went: %v %+v", err, got.ObjectMeta)
	}
}
