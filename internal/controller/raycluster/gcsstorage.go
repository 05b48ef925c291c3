package raycluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
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
	live := &corev1.PersistentVolumeClaim{}
	err := r.client.Get(ctx, key, live)
	if apierrors.IsNotFound(err) {
		if !clusterbuild.GCSStorageRetained(c) {
			desired.OwnerReferences = []metav1.OwnerReference{*clusterbuild.OwnerReference(c)}
		}
		err = r.client.Create(ctx, desired)
		if err == nil {
			run.Eventf(corev1.EventTypeNormal, EventCreatedPVC, "Create", "created GCS storage PVC %s/%s", key.Namespace, key.Name)
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			run.Eventf(corev1.EventTypeWarning, EventFailedToCreatePVC, "Create", "failed to create GCS storage PVC %s/%s: %v", key.Namespace, key.Name, err)
			return fmt.Errorf("create PVC %s: %w", key.Name, err)
		}
		// Not in the cache: created a moment ago, or left without the cluster label (the cache selects on it).
		err = r.reader.Get(ctx, key, live)
	}
	if err != nil {
		return fmt.Errorf("read PVC %s: %w", key.Name, err)
	}
	if drift := clusterbuild.GCSStoragePVCDrift(desired, live); drift != "" {
		run.Eventf(corev1.EventTypeWarning, EventFailedToCreatePVC, "Update",
			"GCS storage PVC %s/%s already exists and cannot be reconfigured in place (%s); delete the PVC to recreate it with the new settings", key.Namespace, key.Name, drift)
	}
	return r.adoptGCSStorage(ctx, c, live)
}

// adoptGCSStorage makes an existing claim follow the deletion policy: the cluster its controller, or not. A claim
// another controller holds is left alone and fails the reconcile: the head would share someone else's GCS state.
func (r *Reconciler) adoptGCSStorage(ctx context.Context, c *rayv1.RayCluster, live *corev1.PersistentVolumeClaim) error {
	retain := clusterbuild.GCSStorageRetained(c)
	owned := metav1.IsControlledBy(live, c)
	labelled := live.Labels[rayv1.LabelCluster] == c.Name
	if owner := metav1.GetControllerOfNoCopy(live); owner != nil && !owned {
		return fmt.Errorf("PVC %s/%s is controlled by %s %s, not by this RayCluster: it is left as it is", live.Namespace, live.Name, owner.Kind, owner.Name)
	}
	if owned != retain && labelled {
		return nil
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
	if err := r.client.Patch(ctx, u, client.MergeFromWithOptions(live, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("set the owner of PVC %s: %w", live.Name, err)
	}
	return nil
}
