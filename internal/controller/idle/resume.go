package idle

import (
	"context"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// SuspendedForIdleness reports whether c is suspended because this controller found it idle (not because a user
// or Kueue suspended it).
func SuspendedForIdleness(c *rayv1.RayCluster) bool {
	_, marked := c.Annotations[AnnotationIdleSuspendedAt]
	return marked && ptr.Deref(c.Spec.Suspend, false)
}

// Resume clears spec.suspend of a cluster suspended for idleness, in a write that fails if the cluster changed
// since it was read. The idle controller then drops the marker and records the resumption. It reports whether it
// wrote.
func Resume(ctx context.Context, w client.Writer, c *rayv1.RayCluster) (bool, error) {
	if !SuspendedForIdleness(c) {
		return false, nil
	}
	base := c.DeepCopy()
	c.Spec.Suspend = ptr.To(false)
	if err := w.Patch(ctx, c, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, err
	}
	return true, nil
}
