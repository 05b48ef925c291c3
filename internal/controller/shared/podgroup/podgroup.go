// Package podgroup writes the batch schedulers' PodGroups (built by internal/clusterbuild) for the RayCluster and RayJob
// controllers, as KubeRay v1.7's scheduler plugins write them.
package podgroup

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
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

// volcano and schedulerPlugins write PodGroups as KubeRay does: whoever controls an existing one (KubeRay never
// checks), and one made meanwhile is as good as created.
var (
	volcano = reconcile.Owned[*volcanov1beta1.PodGroup]{
		Kind: "PodGroup", New: func() *volcanov1beta1.PodGroup { return &volcanov1beta1.PodGroup{} }, AnyController: true,
		Sync: func(got, want *volcanov1beta1.PodGroup) (*volcanov1beta1.PodGroup, bool, bool) {
			u := got.DeepCopy()
			return u, clusterbuild.VolcanoPodGroupChanged(u, want), false
		},
	}
	// KubeRay never updates a scheduler-plugins PodGroup.
	schedulerPlugins = reconcile.Owned[*spv1alpha1.PodGroup]{
		Kind: "PodGroup", New: func() *spv1alpha1.PodGroup { return &spv1alpha1.PodGroup{} }, AnyController: true,
	}
)

// SyncVolcano creates want, or brings an existing PodGroup of its name to want's gang (minMember, minResources),
// the only fields KubeRay keeps in line. updated says it wrote.
func SyncVolcano(ctx context.Context, cl client.Client, want *volcanov1beta1.PodGroup) (updated bool, err error) {
	want.Status.Phase = volcanov1beta1.PodGroupPending
	op, err := ensure(ctx, cl, &volcano, want, "podgroups.scheduling.volcano.sh")
	return err == nil && op != reconcile.Unchanged, err
}

// CreateSchedulerPlugins creates want unless a PodGroup of its name exists: KubeRay never updates it.
func CreateSchedulerPlugins(ctx context.Context, cl client.Client, want *spv1alpha1.PodGroup) error {
	_, err := ensure(ctx, cl, &schedulerPlugins, want, "podgroups.scheduling.x-k8s.io")
	return err
}

// ensure writes want with k; a failed write is an *Error, and a CRD the API server does not serve is named.
func ensure[T client.Object](ctx context.Context, cl client.Client, k *reconcile.Owned[T], want T, crd string) (reconcile.Op, error) {
	var writeErr error
	w := reconcile.Writer{Client: cl, Reader: cl}
	_, op, err := reconcile.EnsureOwned(ctx, w, k, want, func(_ reconcile.Op, _ T, err error) { writeErr = err })
	switch {
	case err == nil:
		return op, nil
	case writeErr == nil:
		return op, fmt.Errorf("read PodGroup %s: %w", want.GetName(), notInstalled(errors.Unwrap(err), crd))
	case op == reconcile.Updated:
		return op, &Error{Update: true, Err: fmt.Errorf("update PodGroup %s: %w", want.GetName(), writeErr)}
	}
	return op, &Error{Err: fmt.Errorf("create PodGroup %s: %w", want.GetName(), notInstalled(writeErr, crd))}
}
