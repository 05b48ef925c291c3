package raycluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/builder"
)

// Event reasons of the batch schedulers' PodGroups (KubeRay only logs these failures).
const (
	EventFailedToCreatePodGroup = "FailedToCreatePodGroup"
	EventFailedToUpdatePodGroup = "FailedToUpdatePodGroup"
)

// +kubebuilder:rbac:groups=scheduling.volcano.sh,resources=podgroups,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=scheduling.x-k8s.io,resources=podgroups,verbs=get;list;watch;create

// reconcilePodGroup gives the cluster the PodGroup its batch scheduler gangs its pods by, before any pod is made,
// as KubeRay does on every reconcile: Volcano's ray-<cluster>-pg (not for a RayJob's cluster: the RayJob's holds
// its pods), kept at the cluster's gang size; scheduler-plugins' <cluster>, made once, when the cluster asks for
// gang scheduling. A failure holds back the pods, as in KubeRay, and is reported in ReplicaFailure and an event.
func (r *Reconciler) reconcilePodGroup(ctx context.Context, run *run) error {
	c := run.c
	var err error
	switch r.opts.BatchScheduler {
	case builder.SchedulerVolcano:
		if builder.VolcanoPodGroupWanted(c) {
			err = r.syncVolcanoPodGroup(ctx, c)
		}
	case builder.SchedulerPlugins:
		if builder.GangScheduling(c) {
			err = r.createSchedulerPluginsPodGroup(ctx, c)
		}
	}
	if err == nil {
		return nil
	}
	reason := EventFailedToCreatePodGroup
	if pe, ok := err.(*podGroupError); ok && pe.update {
		reason = EventFailedToUpdatePodGroup
	}
	msg := fmt.Sprintf("batch scheduler %s: %v", r.opts.BatchScheduler, err)
	run.obs.failure = &failure{rayv1.FailedCreateHeadPod, msg}
	if !conditionMessageIs(c, string(rayv1.RayClusterReplicaFailure), msg) {
		run.Eventf(corev1.EventTypeWarning, reason, "Reconcile", "%s", msg)
	}
	return err
}

// podGroupError is a failed PodGroup write; update says it was an update.
type podGroupError struct {
	update bool
	err    error
}

func (e *podGroupError) Error() string { return e.err.Error() }
func (e *podGroupError) Unwrap() error { return e.err }

// notInstalled names the CRD a NoMatch error says the API server does not serve.
func notInstalled(err error, crd string) error {
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("%s is not installed (the CRD %s is not served)", crd, crd)
	}
	return err
}

func (r *Reconciler) syncVolcanoPodGroup(ctx context.Context, c *rayv1.RayCluster) error {
	members, res := builder.GangSize(&c.Spec, builder.AutoscalingEnabled(c))
	want, err := builder.VolcanoPodGroup(c, rayv1.GroupVersion.WithKind(builder.KindRayCluster), members, res)
	if err != nil {
		return err
	}
	const crd = "podgroups.scheduling.volcano.sh"
	got := &volcanov1beta1.PodGroup{}
	err = r.client.Get(ctx, client.ObjectKeyFromObject(want), got)
	switch {
	case apierrors.IsNotFound(err):
		want.Status.Phase = volcanov1beta1.PodGroupPending
		if err := r.client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return &podGroupError{err: fmt.Errorf("create PodGroup %s: %w", want.Name, notInstalled(err, crd))}
		}
		return nil
	case err != nil:
		return fmt.Errorf("read PodGroup %s: %w", want.Name, notInstalled(err, crd))
	}
	// KubeRay keeps the gang of whatever PodGroup holds the name in line, and nothing else of it.
	got = got.DeepCopy()
	if !builder.VolcanoPodGroupChanged(got, want) {
		return nil
	}
	if err := r.client.Update(ctx, got); err != nil {
		return &podGroupError{update: true, err: fmt.Errorf("update PodGroup %s: %w", want.Name, err)}
	}
	return nil
}

func (r *Reconciler) createSchedulerPluginsPodGroup(ctx context.Context, c *rayv1.RayCluster) error {
	want := builder.SchedulerPluginsPodGroup(c)
	const crd = "podgroups.scheduling.x-k8s.io"
	err := r.client.Get(ctx, client.ObjectKeyFromObject(want), &spv1alpha1.PodGroup{})
	switch {
	case err == nil:
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("read PodGroup %s: %w", want.Name, notInstalled(err, crd))
	}
	if err := r.client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
		return &podGroupError{err: fmt.Errorf("create PodGroup %s: %w", want.Name, notInstalled(err, crd))}
	}
	return nil
}
