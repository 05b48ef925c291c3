package rayjob

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/podgroup"
)

// Event reasons of the batch schedulers: KubeRay's for the cleanup; a refusal KubeRay only logs (and retries).
const (
	ReasonBatchSchedulingRefused      = "BatchSchedulingRefused"
	ReasonBatchSchedulerCleanedUp     = "BatchSchedulerCleanedUp"
	ReasonFailedCleanupBatchScheduler = "FailedToCleanupBatchScheduler"
)

// batchSchedule hands the RayJob to the operator's batch scheduler before its cluster is made, as KubeRay does on
// every reconcile while the job initializes: Volcano gets the PodGroup ray-<job>-pg holding the cluster's gang and
// the submitter's resources (not the submitter itself, which waits for the cluster: it would deadlock the gang).
// What the scheduler cannot gang is refused as KubeRay refuses it, and retried: Volcano a RayJob without
// rayClusterSpec, kai-scheduler a K8sJobMode one.
func (r *Reconciler) batchSchedule(ctx context.Context, run *run) error {
	j := run.j
	var refused string
	switch r.opts.BatchScheduler {
	case clusterbuild.SchedulerVolcano:
		if j.Spec.RayClusterSpec == nil {
			refused = "spec.clusterSelector: volcano cannot gang-schedule a RayJob on an existing RayCluster"
			break
		}
		if _, err := r.syncVolcanoPodGroup(ctx, j, true); err != nil {
			run.Eventf(corev1.EventTypeWarning, podgroup.Reason(err), "Reconcile", "batch scheduler volcano: %v", err)
			return err
		}
	case clusterbuild.SchedulerKai:
		if submissionMode(j) == rayv1.K8sJobMode {
			refused = "spec.submissionMode: kai-scheduler cannot gang-schedule a K8sJobMode RayJob (its submitter pod is made after the cluster is ready); use SidecarMode"
		}
	}
	if refused == "" {
		return nil
	}
	run.Eventf(corev1.EventTypeWarning, ReasonBatchSchedulingRefused, "Reconcile", "batch scheduler %s: %s", r.opts.BatchScheduler, refused)
	return errors.New(refused)
}

// syncVolcanoPodGroup keeps ray-<job>-pg at the gang of the job's cluster: while it initializes, the spec's cluster
// and the submitter; once finished (initial false), what the live cluster still holds (none when it is gone), so
// the queue gets back what the job no longer uses.
func (r *Reconciler) syncVolcanoPodGroup(ctx context.Context, j *rayv1.RayJob, initial bool) (bool, error) {
	var members int32
	res := corev1.ResourceList{}
	if initial {
		spec := j.Spec.RayClusterSpec
		members, res = clusterbuild.GangSize(spec, ptr.Deref(spec.EnableInTreeAutoscaling, false))
		clusterbuild.AddResources(res, submitterResources(j))
	} else if cluster, err := r.getCluster(ctx, j); err != nil {
		return false, err
	} else if cluster != nil && cluster.DeletionTimestamp == nil {
		members, res = clusterbuild.GangSize(&cluster.Spec, clusterbuild.AutoscalingEnabled(cluster))
	}
	want, err := clusterbuild.VolcanoPodGroup(j, rayv1.GroupVersion.WithKind(clusterbuild.KindRayJob), members, res)
	if err != nil {
		return false, err
	}
	return podgroup.SyncVolcano(ctx, r.client, want)
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
// to the operator's batch scheduler.
func (r *Reconciler) addSchedulerMetadata(j *rayv1.RayJob, child metav1.Object, group string) {
	if r.opts.BatchScheduler == "" || j.Spec.RayClusterSpec == nil {
		return
	}
	clusterbuild.AddSchedulerMetadata(r.opts.BatchScheduler, j, child, group, func() []clusterbuild.YuniKornTaskGroup {
		return append(clusterbuild.ClusterTaskGroups(j.Spec.RayClusterSpec), clusterbuild.SubmitterTaskGroup(&submitterTemplate(j).Spec))
	})
}

// batchSchedulerCleanup gives back the queue resources the job's Volcano PodGroup holds and its cluster no longer
// uses: once the job has finished, and when it is suspended or retried (its cluster deleted).
func (r *Reconciler) batchSchedulerCleanup(ctx context.Context, run *run) error {
	j := run.j
	if r.opts.BatchScheduler != clusterbuild.SchedulerVolcano || j.Spec.RayClusterSpec == nil || j.Status.RayClusterName == "" {
		return nil
	}
	updated, err := r.syncVolcanoPodGroup(ctx, j, false)
	switch {
	case err != nil:
		run.Eventf(corev1.EventTypeWarning, ReasonFailedCleanupBatchScheduler, "Cleanup", "Failed to cleanup batch scheduler resources for RayJob %s/%s: %v", j.Namespace, j.Name, err)
	case updated:
		run.Eventf(corev1.EventTypeNormal, ReasonBatchSchedulerCleanedUp, "Cleanup", "Cleaned up batch scheduler resources for RayJob %s/%s", j.Namespace, j.Name)
	}
	return err
}
