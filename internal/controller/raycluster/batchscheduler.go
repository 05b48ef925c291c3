package raycluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/podgroup"
)

// reconcilePodGroup gives the cluster the PodGroup its batch scheduler gangs its pods by, before any pod is made,
// as KubeRay does on every reconcile: Volcano's ray-<cluster>-pg (not for a RayJob's cluster: the RayJob's holds
// its pods), kept at the cluster's gang size; scheduler-plugins' <cluster>, made once, when the cluster asks for
// gang scheduling. A failure holds back the pods, as in KubeRay, and is reported in ReplicaFailure and an event.
func (r *Reconciler) reconcilePodGroup(ctx context.Context, run *run) error {
	c := run.c
	var err error
	switch r.opts.BatchScheduler {
	case clusterbuild.SchedulerVolcano:
		if clusterbuild.VolcanoPodGroupWanted(c) {
			members, res := clusterbuild.GangSize(&c.Spec, clusterbuild.AutoscalingEnabled(c))
			var want *volcanov1beta1.PodGroup
			if want, err = clusterbuild.VolcanoPodGroup(c, rayv1.GroupVersion.WithKind(clusterbuild.KindRayCluster), members, res); err == nil {
				_, err = podgroup.SyncVolcano(ctx, r.client, want)
			}
		}
	case clusterbuild.SchedulerPlugins:
		if clusterbuild.GangScheduling(c) {
			err = podgroup.CreateSchedulerPlugins(ctx, r.client, clusterbuild.SchedulerPluginsPodGroup(c))
		}
	}
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf("batch scheduler %s: %v", r.opts.BatchScheduler, err)
	run.obs.failure = &failure{rayv1.FailedCreateHeadPod, msg}
	if !conditionMessageIs(c, string(rayv1.RayClusterReplicaFailure), msg) {
		run.Eventf(corev1.EventTypeWarning, podgroup.Reason(err), "Reconcile", "%s", msg)
	}
	return err
}
