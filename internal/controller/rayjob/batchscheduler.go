package rayjob

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/podgroup"
)

// Event reasons of the batch schedulers: KubeRay's for the cleanup; a refusal KubeRay only logs (and retries).
const (
	ReasonBatchSchedulingRefused      = "BatchSchedulingRefused"
	ReasonBatchSchedulerCleanedUp     = "BatchSchedulerCleanedUp"
	ReasonFailedCleanupBatchScheduler = "FailedToCleanupBatchScheduler"
)

// volcanoPodGroup is ray-<job>-pg at the gang of the job's cluster: while it initializes (initial), the spec's
// cluster and the submitter; once it let its cluster go, what the live cluster still holds (none when it is gone or
// going), so the queue gets back what the job no longer uses.
func volcanoPodGroup(j *rayv1.RayJob, cluster *rayv1.RayCluster, initial bool) (*volcanov1beta1.PodGroup, error) {
	var members int32
	res := corev1.ResourceList{}
	if initial {
		spec := j.Spec.RayClusterSpec
		members, res = clusterbuild.GangSize(spec, ptr.Deref(spec.EnableInTreeAutoscaling, false))
		clusterbuild.AddResources(res, submitterResources(j))
	} else if cluster != nil && cluster.DeletionTimestamp == nil {
		members, res = clusterbuild.GangSize(&cluster.Spec, clusterbuild.AutoscalingEnabled(cluster))
	}
	return clusterbuild.VolcanoPodGroup(j, rayv1.GroupVersion.WithKind(clusterbuild.KindRayJob), members, res)
}

// submitterResources is what the submitter asks for: the submitter pod's in K8sJobMode, the sidecar container's in
// SidecarMode, nothing otherwise.
func submitterResources(j *rayv1.RayJob) corev1.ResourceList {
	switch submissionMode(j) {
	case rayv1.K8sJobMode:
		return clusterbuild.PodResource(&submitterTemplate(j).Spec)
	case rayv1.SidecarMode:
		return clusterbuild.PodResource(&corev1.PodSpec{Containers: []corev1.Container{{Resources: defaultSubmitterResources()}}})
	}
	return nil
}

// submitterTemplate is the K8sJobMode submitter's pod template (its address does not matter here).
func submitterTemplate(j *rayv1.RayJob) *corev1.PodTemplateSpec {
	return &SubmitterJob(j, ClusterFor(j, j.Name), "").Spec.Template
}

// addSchedulerMetadata hands a child of the RayJob (its K8sJobMode cluster, group ""; its submitter pod template)
// to the operator's batch scheduler (none when empty).
func addSchedulerMetadata(scheduler string, j *rayv1.RayJob, child metav1.Object, group string) {
	if scheduler == "" || j.Spec.RayClusterSpec == nil {
		return
	}
	clusterbuild.AddSchedulerMetadata(scheduler, j, child, group, func() []clusterbuild.YuniKornTaskGroup {
		return append(clusterbuild.ClusterTaskGroups(j.Spec.RayClusterSpec), clusterbuild.SubmitterTaskGroup(&submitterTemplate(j).Spec))
	})
}

// batchSchedule hands the RayJob to the operator's batch scheduler before its cluster is made, as KubeRay does on
// every reconcile while the job initializes: Volcano gets the PodGroup ray-<job>-pg holding the cluster's gang and
// the submitter's resources (not the submitter itself, which waits for the cluster: it would deadlock the gang).
// What the scheduler cannot gang is refused as KubeRay refuses it, and retried: Volcano a RayJob without
// rayClusterSpec, kai-scheduler a K8sJobMode one.
func (p *plan) batchSchedule() error {
	j := p.j
	var refused string
	switch p.cfg.batchScheduler {
	case clusterbuild.SchedulerVolcano:
		if j.Spec.RayClusterSpec == nil {
			refused = "spec.clusterSelector: volcano cannot gang-schedule a RayJob on an existing RayCluster"
			break
		}
		want, err := volcanoPodGroup(j, nil, true)
		if err != nil {
			p.Eventf(corev1.EventTypeWarning, podgroup.Reason(err), "Reconcile", "batch scheduler volcano: %v", err)
			return err
		}
		p.act(action{kind: syncPodGroup, podGroup: want})
	case clusterbuild.SchedulerKai:
		if submissionMode(j) == rayv1.K8sJobMode {
			refused = "spec.submissionMode: kai-scheduler cannot gang-schedule a K8sJobMode RayJob (its submitter pod is made after the cluster is ready); use SidecarMode"
		}
	}
	if refused == "" {
		return nil
	}
	p.Eventf(corev1.EventTypeWarning, ReasonBatchSchedulingRefused, "Reconcile", "batch scheduler %s: %s", p.cfg.batchScheduler, refused)
	return errors.New(refused)
}

// batchSchedulerCleanup gives back the queue resources the job's Volcano PodGroup holds and its cluster no longer
// uses: once the job has finished (bestEffort: a failure is reported and holds nothing else), and when it is
// suspended or retried (its cluster deleted).
func (p *plan) batchSchedulerCleanup(bestEffort bool) error {
	j := p.j
	if p.cfg.batchScheduler != clusterbuild.SchedulerVolcano || j.Spec.RayClusterSpec == nil || j.Status.RayClusterName == "" {
		return nil
	}
	pg, err := (*volcanov1beta1.PodGroup)(nil), p.o.clusterErr
	if err == nil {
		pg, err = volcanoPodGroup(j, p.o.cluster, false)
	}
	if err != nil {
		p.Eventf(corev1.EventTypeWarning, ReasonFailedCleanupBatchScheduler, "Cleanup", "Failed to cleanup batch scheduler resources for RayJob %s/%s: %v", j.Namespace, j.Name, err)
		return err
	}
	p.act(action{kind: syncPodGroup, podGroup: pg, cleanup: true, bestEffort: bestEffort})
	return nil
}
