package envtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

func (e *env) pvc(t *testing.T, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	t.Helper()
	got := &corev1.PersistentVolumeClaim{}
	return got, e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, got)
}

// waitPVCOwner waits until the claim's owners are exactly want (none when want is nil) and returns the claim.
func (e *env) waitPVCOwner(t *testing.T, ns, name string, want *rayv1.RayCluster) *corev1.PersistentVolumeClaim {
	t.Helper()
	var got *corev1.PersistentVolumeClaim
	var wantRefs []metav1.OwnerReference
	if want != nil {
		// What the garbage collector reads: the cluster, by UID, as the controller that blocks its deletion.
		wantRefs = []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: want.Name, UID: want.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	}
	e.Eventually(t, fmt.Sprintf("PVC %s owned by %v", name, wantRefs), func() (bool, string) {
		var err error
		if got, err = e.pvc(t, ns, name); err != nil {
			return false, err.Error()
		}
		return cmp.Equal(wantRefs, got.OwnerReferences), cmp.Diff(wantRefs, got.OwnerReferences)
	})
	return got
}

// The embedded GCS backend's claim, against a real API server: created as KubeRay v1.7 creates it and owned by the
// cluster (DeleteWithCluster); not owned under Retain, so it outlives a deleted cluster and a new cluster of the
// same name takes it over; a policy changed later applied to the live claim; a changed size only reported; a
// user's claim never created, its absence reported.
func testGCSStorage(t *testing.T, e *env) {
	ns := e.Namespace(t)
	ctx := context.Background()
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	rc.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{Backend: rayv1.GcsFaultToleranceBackendRocksDB}
	e.Create(t, rc)
	pods := e.waitPods(t, rc, 2)
	rc = testutil.Get(t, e.Env, rc)
	pvc := e.waitPVCOwner(t, ns, "rc-gcs-pvc", rc)
	want := clusterbuild.GCSStoragePVC(rc)
	if pvc.Labels[rayv1.LabelCluster] != "rc" || !cmp.Equal(want.Spec.AccessModes, pvc.Spec.AccessModes) ||
		!pvc.Spec.Resources.Requests.Storage().Equal(resource.MustParse("1Gi")) || pvc.Spec.StorageClassName != nil {
		t.Errorf("PVC labels %v spec %+v", pvc.Labels, pvc.Spec)
	}
	waitEvent(t, e, ns, raycluster.EventCreatedPVC)
	for _, p := range pods {
		if p.Labels[rayv1.LabelNodeType] != rayv1.NodeTypeHead {
			continue
		}
		var claim string
		for _, v := range p.Spec.Volumes {
			if v.Name == clusterbuild.GCSStorageVolumeName && v.PersistentVolumeClaim != nil {
				claim = v.PersistentVolumeClaim.ClaimName
			}
		}
		if claim != "rc-gcs-pvc" || p.Annotations[clusterbuild.AnnotationFTEnabled] != "true" {
			t.Errorf("head mounts claim %q, ft-enabled %q", claim, p.Annotations[clusterbuild.AnnotationFTEnabled])
		}
	}

	// Settled: a reconcile of an unrelated change writes nothing to the claim.
	rv := pvc.ResourceVersion
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].MaxReplicas = ptr.To[int32](9) })
	e.waitObserved(t, rc)
	if got, _ := e.pvc(t, ns, "rc-gcs-pvc"); got.ResourceVersion != rv {
		t.Errorf("settled PVC rewritten: %s -> %s", rv, got.ResourceVersion)
	}

	// Retain: the cluster lets go of the claim; DeleteWithCluster again: it takes it back.
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) {
		c.Spec.GcsFaultToleranceOptions.Storage = &rayv1.GcsEmbeddedStorage{DeletionPolicy: rayv1.GcsStorageRetain}
	})
	e.waitPVCOwner(t, ns, "rc-gcs-pvc", nil)
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) {
		c.Spec.GcsFaultToleranceOptions.Storage.DeletionPolicy = rayv1.GcsStorageDeleteWithCluster
	})
	e.waitPVCOwner(t, ns, "rc-gcs-pvc", rc)

	// A larger size cannot be applied to the live claim: reported, the claim left as it is.
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) {
		c.Spec.GcsFaultToleranceOptions.Storage.Size = ptr.To(resource.MustParse("5Gi"))
	})
	waitEventNaming(t, e, ns, raycluster.EventFailedToCreatePVC, "size 5Gi (live 1Gi)")
	if got, _ := e.pvc(t, ns, "rc-gcs-pvc"); !got.Spec.Resources.Requests.Storage().Equal(resource.MustParse("1Gi")) {
		t.Errorf("claim resized to %s", got.Spec.Resources.Requests.Storage())
	}

	// Retain from the start: never owned, so it outlives the cluster; a new cluster of the same name takes it over
	// (with DeleteWithCluster, as its owner).
	keep := testutil.MakeRayCluster(ns, "keep").Obj()
	keep.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{Backend: rayv1.GcsFaultToleranceBackendRocksDB,
		Storage: &rayv1.GcsEmbeddedStorage{DeletionPolicy: rayv1.GcsStorageRetain, StorageClassName: ptr.To("fast")}}
	e.Create(t, keep)
	e.waitPods(t, keep, 1)
	kept := e.waitPVCOwner(t, ns, "keep-gcs-pvc", nil)
	if ptr.Deref(kept.Spec.StorageClassName, "") != "fast" {
		t.Errorf("storageClassName %v", kept.Spec.StorageClassName)
	}
	if err := e.cl.Delete(ctx, testutil.Get(t, e.Env, keep)); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, keep)
	if got, err := e.pvc(t, ns, "keep-gcs-pvc"); err != nil || got.DeletionTimestamp != nil || got.UID != kept.UID {
		t.Fatalf("retained PVC after its cluster went: %v %+v", err, got.ObjectMeta)
	}
	again := testutil.MakeRayCluster(ns, "keep").Obj()
	again.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{Backend: rayv1.GcsFaultToleranceBackendRocksDB,
		Storage: &rayv1.GcsEmbeddedStorage{StorageClassName: ptr.To("fast")}}
	e.Create(t, again)
	if got := e.waitPVCOwner(t, ns, "keep-gcs-pvc", testutil.Get(t, e.Env, again)); got.UID != kept.UID {
		t.Errorf("a new claim (%s) instead of the retained one (%s)", got.UID, kept.UID)
	}

	// The user's claim: never created by the operator; while it is missing, the cluster says so.
	byo := testutil.MakeRayCluster(ns, "byo").Obj()
	byo.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{Backend: rayv1.GcsFaultToleranceBackendRocksDB,
		Storage: &rayv1.GcsEmbeddedStorage{ClaimName: "mine"}}
	e.Create(t, byo)
	e.waitPods(t, byo, 1)
	waitEventNaming(t, e, ns, raycluster.EventFailedToCreatePVC, `claimName "mine" not found`)
	for _, name := range []string{"mine", "byo-gcs-pvc"} {
		if _, err := e.pvc(t, ns, name); !apierrors.IsNotFound(err) {
			t.Errorf("PVC %s: %v, want none", name, err)
		}
	}
}
