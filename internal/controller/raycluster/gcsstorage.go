package raycluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// Event reasons of the embedded GCS backend's claim, KubeRay's.
const (
	EventCreatedPVC        = "CreatedPVC"
	EventFailedToCreatePVC = "FailedToCreatePVC"
)

// reconcileGCSStorage gives the embedded (rocksdb) GCS backend its claim, as KubeRay does. A claim the user names
// (storage.claimName) is theirs: only its absence is reported, since the head cannot start without it. Otherwise the
// operator creates <cluster>-gcs-pvc once and never resizes or deletes it; the deletion policy decides whether the
// cluster is its controller (DeleteWithCluster: garbage-collected with the cluster) or not (Retain: it outlives the
// cluster, and a cluster of the same name takes it over with its GCS state). A policy changed later is applied to
// the existing claim; a changed size, class or access mode is only reported, Kubernetes cannot apply it in place.
func (r *Reconciler) reconcileGCSStorage(ctx context.Context, run *run) error {
	c := run.c
	if !clusterbuild.EmbeddedGCS(c) {
		return nil
	}
	key := types.NamespacedName{Namespace: c.Namespace, Name: clusterbuild.GCSStoragePVCName(c)}
	if !clusterbuild.GCSStorageManaged(c) {
		// The user's claim need not carry the cluster label the cache selects on: read past it, as metadata only.
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"))
		err := r.reader.Get(ctx, key, meta)
		if apierrors.IsNotFound(err) {
			run.Eventf(corev1.EventTypeWarning, EventFailedToCreatePVC, "Validate",
				"gcsFaultToleranceOptions.storage.claimName %q not found in namespace %s; the head pod will not start until it exists", key.Name, key.Namespace)
			return nil
		}
		return err
	}
	desired := clusterbuild.GCSStoragePVC(c)
	if !clusterbuild.GCSStorageRetained(c) {
		desired.OwnerReferences = []metav1.OwnerReference{*clusterbuild.OwnerReference(c)}
	}
	k := &reconcile.Owned[*corev1.PersistentVolumeClaim]{
		Kind: "PVC", New: func() *corev1.PersistentVolumeClaim { return &corev1.PersistentVolumeClaim{} },
		// Only its owner and label follow the cluster: Kubernetes cannot apply a new size, class or access mode.
		Sync: func(live, _ *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, bool, bool) {
			u, changed := adoptGCSStorage(c, live)
			return u, changed, false
		},
		Patch: true, OptimisticLock: true, Adopt: true,
		// Not in the cache: created a moment ago, or left without the cluster label (the cache selects on it).
		OnExists: reconcile.ExistsSync,
	}
	w := reconcile.Writer{Client: r.client, Reader: r.client, Live: r.reader, Owner: c}
	live, op, err := reconcile.EnsureOwned(ctx, w, k, desired, func(op reconcile.Op, _ *corev1.PersistentVolumeClaim, err error) {
		switch {
		case op == reconcile.Created && err != nil:
			run.Eventf(corev1.EventTypeWarning, EventFailedToCreatePVC, "Create", "failed to create GCS storage PVC %s/%s: %v", key.Namespace, key.Name, err)
		case op == reconcile.Created:
			run.Eventf(corev1.EventTypeNormal, EventCreatedPVC, "Create", "created GCS storage PVC %s/%s", key.Namespace, key.Name)
		}
	})
	if op == reconcile.Created || live == nil {
		return err
	}
	if drift := clusterbuild.GCSStoragePVCDrift(desired, live); drift != "" {
		run.Eventf(corev1.EventTypeWarning, EventFailedToCreatePVC, "Update",
			"GCS storage PVC %s/%s already exists and cannot be reconfigured in place (%s); delete the PVC to recreate it with the new settings", key.Namespace, key.Name, drift)
	}
	if op == reconcile.Foreign || op == reconcile.Taken {
		// The head would share someone else's GCS state.
		owner := metav1.GetControllerOfNoCopy(live)
		return fmt.Errorf("PVC %s/%s is controlled by %s %s, not by this RayCluster: it is left as it is", live.Namespace, live.Name, owner.Kind, owner.Name)
	}
	return err
}

// adoptGCSStorage returns a copy of an existing claim that follows the deletion policy (the cluster its controller,
// or not) and carries the cluster label, and whether that differs from live.
func adoptGCSStorage(c *rayv1.RayCluster, live *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, bool) {
	retain := clusterbuild.GCSStorageRetained(c)
	if metav1.IsControlledBy(live, c) != retain && live.Labels[rayv1.LabelCluster] == c.Name {
		return live, false
	}
	u := live.DeepCopy()
	if u.Labels == nil {
		u.Labels = map[string]string{}
	}
	u.Labels[rayv1.LabelCluster] = c.Name
	refs := u.OwnerReferences[:0:0]
	for _, o := range u.OwnerReferences {
		if o.UID != c.UID {
			refs = append(refs, o)
		}
	}
	if !retain {
		refs = append(refs, *clusterbuild.OwnerReference(c))
	}
	u.OwnerReferences = refs
	return u, true
}
