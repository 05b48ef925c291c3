// Package podgroup writes the batch schedulers' PodGroups (built by internal/clusterbuild) for the RayCluster and RayJob
// controllers, as KubeRay v1.7's scheduler plugins write them.
package podgroup

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/manta-dev/manta/internal/clusterbuild"
)

// +kubebuilder:rbac:groups=scheduling.volcano.sh,resources=podgroups,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=scheduling.x-k8s.io,resources=podgroups,verbs=get;list;watch;create

// Event reasons of PodGroup failures (KubeRay only logs them).
const (
	EventFailedToCreate = "FailedToCreatePodGroup"
	EventFailedToUpdate = "FailedToUpdatePodGroup"
)

// Error is a failed PodGroup write; Update says it was an update.
type Error struct {
	Update bool
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Reason is the event reason of err.
func Reason(err error) string {
	if pe, ok := err.(*Error); ok && pe.Update {
		return EventFailedToUpdate
	}
	return EventFailedToCreate
}

// notInstalled names the CRD a NoMatch error says the API server does not serve.
func notInstalled(err error, crd string) error {
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("the CRD %s is not installed", crd)
	}
	return err
}

// SyncVolcano creates want, or brings an existing PodGroup of its name to want's gang (minMember, minResources),
// the only fields KubeRay keeps in line. updated says it wrote.
func SyncVolcano(ctx context.Context, cl client.Client, want *volcanov1beta1.PodGroup) (updated bool, err error) {
	const crd = "podgroups.scheduling.volcano.sh"
	got := &volcanov1beta1.PodGroup{}
	err = cl.Get(ctx, client.ObjectKeyFromObject(want), got)
	switch {
	case apierrors.IsNotFound(err):
		want.Status.Phase = volcanov1beta1.PodGroupPending
		if err := cl.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, &Error{Err: fmt.Errorf("create PodGroup %s: %w", want.Name, notInstalled(err, crd))}
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read PodGroup %s: %w", want.Name, notInstalled(err, crd))
	}
	got = got.DeepCopy()
	if !clusterbuild.VolcanoPodGroupChanged(got, want) {
		return false, nil
	}
	if err := cl.Update(ctx, got); err != nil {
		return false, &Error{Update: true, Err: fmt.Errorf("update PodGroup %s: %w", want.Name, err)}
	}
	return true, nil
}

// CreateSchedulerPlugins creates want unless a PodGroup of its name exists: KubeRay never updates it.
func CreateSchedulerPlugins(ctx context.Context, cl client.Client, want *spv1alpha1.PodGroup) error {
	const crd = "podgroups.scheduling.x-k8s.io"
	err := cl.Get(ctx, client.ObjectKeyFromObject(want), &spv1alpha1.PodGroup{})
	switch {
	case err == nil:
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("read PodGroup %s: %w", want.Name, notInstalled(err, crd))
	}
	if err := cl.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
		return &Error{Err: fmt.Errorf("create PodGroup %s: %w", want.Name, notInstalled(err, crd))}
	}
	return nil
}
