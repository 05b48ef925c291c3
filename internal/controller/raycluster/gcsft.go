package raycluster

import (
	"context"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// GCS fault tolerance keeps a cluster's GCS state in Redis under a storage namespace; when the cluster is deleted
// that namespace must go too, or Redis fills with the state of clusters long gone. As KubeRay does, a cluster with a
// Redis-backed GCS carries ray.io/gcs-ft-redis-cleanup-finalizer; on deletion its pods are deleted, and once the head
// is gone (its GCS could still write) a Job deletes the namespace; when the Job has finished, succeeded or not, the
// finalizer is released. A cleanup that has not finished within the deletion timeout (ray.io/gcs-ft-deletion-timeout,
// 300 s by default, counted from the deletion) is given up, as KubeRay does from v1.6.2, so a Job that cannot run
// does not hold the cluster, and the quota of what it used, forever.

// Event reasons of the Redis cleanup: KubeRay's, and Manta's for what KubeRay only logs.
const (
	EventCreatedRedisCleanupJob        = "CreatedRedisCleanupJob"
	EventFailedToCreateRedisCleanupJob = "FailedToCreateRedisCleanupJob"
	// EventRedisCleanupFailed: the Job failed, the finalizer was released, the keys are left in Redis.
	EventRedisCleanupFailed = "RedisCleanupFailed"
	// EventForceDeletedStuckCluster: the cleanup outlasted the deletion timeout, the finalizer was released anyway.
	EventForceDeletedStuckCluster = "ForceDeletedStuckCluster"
)

// AnnotationGCSFTDeletionTimeout bounds, in whole seconds, how long a deleted cluster waits for its Redis cleanup
// once its head is gone; absent, unparsable or not positive means DefaultGCSFTDeletionTimeout.
const AnnotationGCSFTDeletionTimeout = "ray.io/gcs-ft-deletion-timeout"

// DefaultGCSFTDeletionTimeout is KubeRay's default deletion timeout.
const DefaultGCSFTDeletionTimeout = 300 * time.Second

// gcsFTDeletionTimeout is the cluster's deletion timeout.
func gcsFTDeletionTimeout(c *rayv1.RayCluster) time.Duration {
	if n, err := strconv.Atoi(c.Annotations[AnnotationGCSFTDeletionTimeout]); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return DefaultGCSFTDeletionTimeout
}

// cleanupWait is how often a deleted cluster is looked at while its head terminates or its cleanup Job runs; the
// pod and Job watches usually bring it back sooner.
const cleanupWait = 10 * time.Second

// cleanupStep is what a deleted cluster's Redis cleanup needs next.
type cleanupStep int

const (
	cleanupNone       cleanupStep = iota // no finalizer of ours
	cleanupSkip                          // the finalizer, but no Redis to clean: release it
	cleanupDeletePods                    // Ray pods still run
	cleanupWaitHead                      // the head terminates
	cleanupCreateJob                     // the head is gone and no cleanup Job exists
	cleanupWaitJob                       // the Job runs
	cleanupRelease                       // the Job finished
	cleanupTimedOut                      // the head is gone, the Job has not finished, the deletion timeout passed
)

// cleanupPlan is the next step of a deleted cluster's Redis cleanup.
type cleanupPlan struct {
	step cleanupStep
	// pods are the Ray pods to delete (cleanupDeletePods).
	pods []corev1.Pod
	// job is the cluster's cleanup Job (cleanupWaitJob, cleanupRelease); failed says it failed.
	job    *batchv1.Job
	failed bool
	// left is how long the deletion timeout still runs (cleanupCreateJob, cleanupWaitJob).
	left time.Duration
}

// planCleanup decides the next step of the Redis cleanup of deleted cluster c from its pods and its cleanup Jobs at
// time now. As in KubeRay, the deletion timeout applies once the head is gone: until then nothing could clean up.
func planCleanup(c *rayv1.RayCluster, pods []corev1.Pod, jobs []batchv1.Job, now time.Time) cleanupPlan {
	if !controllerutil.ContainsFinalizer(c, clusterbuild.FinalizerGCSFTRedisCleanup) {
		return cleanupPlan{step: cleanupNone}
	}
	if !clusterbuild.GCSFaultTolerance(c) {
		return cleanupPlan{step: cleanupSkip}
	}
	var running []corev1.Pod
	head := false
	for _, p := range pods {
		t := p.Labels[rayv1.LabelNodeType]
		if (t != rayv1.NodeTypeHead && t != rayv1.NodeTypeWorker) || !metaOwnedBy(&p, c) {
			continue
		}
		head = head || t == rayv1.NodeTypeHead
		if p.DeletionTimestamp == nil {
			running = append(running, p)
		}
	}
	switch {
	case len(running) > 0:
		return cleanupPlan{step: cleanupDeletePods, pods: running}
	case head:
		return cleanupPlan{step: cleanupWaitHead}
	}
	var job *batchv1.Job
	for i := range jobs {
		if metav1.IsControlledBy(&jobs[i], c) {
			job = &jobs[i]
			break
		}
	}
	if job != nil {
		switch jobFinished(job) {
		case batchv1.JobComplete:
			return cleanupPlan{step: cleanupRelease, job: job}
		case batchv1.JobFailed:
			return cleanupPlan{step: cleanupRelease, job: job, failed: true}
		}
	}
	var left time.Duration
	if c.DeletionTimestamp != nil {
		left = c.DeletionTimestamp.Add(gcsFTDeletionTimeout(c)).Sub(now)
		if left <= 0 {
			return cleanupPlan{step: cleanupTimedOut, job: job}
		}
	}
	if job != nil {
		return cleanupPlan{step: cleanupWaitJob, job: job, left: left}
	}
	return cleanupPlan{step: cleanupCreateJob, left: left}
}

// waitAtMost is how long to wait before looking again: cleanupWait, or less when the deletion timeout ends sooner.
func waitAtMost(left time.Duration) time.Duration {
	if left > 0 && left < cleanupWait {
		return left
	}
	return cleanupWait
}

// jobFinished is Complete or Failed when the Job has that condition, "" while it runs.
func jobFinished(j *batchv1.Job) batchv1.JobConditionType {
	for _, cond := range j.Status.Conditions {
		if (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed) && cond.Status == corev1.ConditionTrue {
			return cond.Type
		}
	}
	return ""
}

// finalize takes a deleted cluster that carries the Redis cleanup finalizer through the next step of its cleanup;
// done says the finalizer may go. The events that report its release are StatusEventf: recorded once it is gone.
func (r *Reconciler) finalize(ctx context.Context, c *rayv1.RayCluster, res *reconcile.Result) (done bool, err error) {
	if r.opts.NoRedisCleanup {
		res.StatusEventf(corev1.EventTypeWarning, ReasonRedisCleanupSkipped, "Delete",
			"removed finalizer %s without cleaning Redis: the operator's Redis cleanup is off (--gcs-ft-redis-cleanup=false); delete the keys of storage namespace %q from Redis by hand",
			clusterbuild.FinalizerGCSFTRedisCleanup, clusterbuild.ExternalStorageNamespace(c))
		return true, nil
	}
	pods := &corev1.PodList{}
	if err := r.client.List(ctx, pods, client.InNamespace(c.Namespace), clusterpods.Of(c.Name)); err != nil {
		return false, fmt.Errorf("list pods: %w", err)
	}
	// Read past the cache: it holds only the Jobs labelled as KubeRay's, which a head template can relabel.
	jobs := &batchv1.JobList{}
	if err := r.reader.List(ctx, jobs, client.InNamespace(c.Namespace), client.MatchingLabels(clusterbuild.RedisCleanupSelector(c))); err != nil {
		return false, fmt.Errorf("list Redis cleanup jobs: %w", err)
	}
	p := planCleanup(c, pods.Items, jobs.Items, r.opts.Clock.Now())
	logger := log.FromContext(ctx).WithValues("storageNamespace", clusterbuild.ExternalStorageNamespace(c))
	switch p.step {
	case cleanupSkip:
		res.StatusEventf(corev1.EventTypeWarning, ReasonRedisCleanupSkipped, "Delete",
			"removed finalizer %s without cleaning Redis: the cluster has no Redis-backed GCS fault tolerance", clusterbuild.FinalizerGCSFTRedisCleanup)
		return true, nil
	case cleanupDeletePods:
		// Deleted without events, as KubeRay does: the cluster itself is going.
		for i := range p.pods {
			pod := &p.pods[i]
			if err := r.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("delete pod %s: %w", pod.Name, err)
			}
		}
		res.Requeue(cleanupWait)
		return false, nil
	case cleanupWaitHead:
		logger.V(1).Info("waiting for the head pod to terminate before cleaning Redis")
		res.Requeue(cleanupWait)
		return false, nil
	case cleanupCreateJob:
		done, err := r.createCleanupJob(ctx, c, res)
		if res.RequeueAfter() > 0 {
			res.Requeue(waitAtMost(p.left))
		}
		return done, err
	case cleanupWaitJob:
		res.Requeue(waitAtMost(p.left))
		return false, nil
	case cleanupTimedOut:
		age := r.opts.Clock.Now().Sub(c.DeletionTimestamp.Time).Round(time.Second)
		res.StatusEventf(corev1.EventTypeWarning, EventForceDeletedStuckCluster, "Delete",
			"removed finalizer %s %s after the deletion: the Redis cleanup did not finish within %s (annotation %s); delete the keys of storage namespace %q from Redis by hand",
			clusterbuild.FinalizerGCSFTRedisCleanup, age, gcsFTDeletionTimeout(c), AnnotationGCSFTDeletionTimeout, clusterbuild.ExternalStorageNamespace(c))
		logger.Info("giving up the Redis cleanup: deletion timeout passed", "age", age)
		return true, nil
	case cleanupRelease:
		if p.failed {
			res.StatusEventf(corev1.EventTypeWarning, EventRedisCleanupFailed, "Delete",
				"Redis cleanup Job %s failed; removed finalizer %s: delete the keys of storage namespace %q from Redis by hand",
				p.job.Name, clusterbuild.FinalizerGCSFTRedisCleanup, p.job.Annotations[clusterbuild.AnnotationExternalStorageNamespace])
		}
		logger.Info("releasing the Redis cleanup finalizer", "job", p.job.Name, "failed", p.failed)
		return true, nil
	}
	return false, nil
}

// createCleanupJob creates the cluster's Redis cleanup Job; done says there is nothing to clean up with (the
// finalizer may go).
func (r *Reconciler) createCleanupJob(ctx context.Context, c *rayv1.RayCluster, res *reconcile.Result) (done bool, err error) {
	// The default PodTemplate shapes the head, so it shapes the Job built from it; its failures were reported
	// while the cluster lived.
	scratch := newRun(c, client.ObjectKeyFromObject(c))
	job := clusterbuild.RedisCleanupJob(c, clusterbuild.PodOptions{ClusterDomain: r.opts.ClusterDomain, DefaultTemplate: r.defaultTemplate(ctx, scratch)})
	if job == nil {
		// No head container to run it in (a spec that was never valid): nothing ever wrote to Redis.
		res.StatusEventf(corev1.EventTypeWarning, ReasonRedisCleanupSkipped, "Delete",
			"removed finalizer %s without cleaning Redis: the head template has no container to run the cleanup in", clusterbuild.FinalizerGCSFTRedisCleanup)
		return true, nil
	}
	// The Job is created once: one of that name is this cluster's, made by an earlier reconcile the cache does not
	// show yet, and is looked at again shortly.
	w := reconcile.Writer{Client: r.client, Owner: c}
	_, _, err = reconcile.WriteOwned(ctx, w, &cleanupJobKind, reconcile.PlanOwned(c, &cleanupJobKind, job, nil), func(op reconcile.Op, _ *batchv1.Job, err error) {
		switch {
		case op == reconcile.Exists:
			res.Requeue(time.Second)
		case op == reconcile.Created && err != nil:
			res.Eventf(corev1.EventTypeWarning, EventFailedToCreateRedisCleanupJob, "Create",
				"Failed to create Redis cleanup Job %s/%s, %v", job.Namespace, job.Name, err)
		case op == reconcile.Created:
			res.Eventf(corev1.EventTypeNormal, EventCreatedRedisCleanupJob, "Create", "Created Redis cleanup Job %s/%s", job.Namespace, job.Name)
			res.Requeue(cleanupWait)
		}
	})
	return false, err
}

var cleanupJobKind = reconcile.Owned[*batchv1.Job]{Kind: "Redis cleanup job", New: func() *batchv1.Job { return &batchv1.Job{} }}

// wantsCleanupFinalizer says a live cluster is to carry the Redis cleanup finalizer: its spec is valid and its GCS
// is Redis-backed (unless the cleanup is off).
func (r *Reconciler) wantsCleanupFinalizer(c *rayv1.RayCluster) bool {
	return !r.opts.NoRedisCleanup && clusterbuild.GCSFaultTolerance(c) && validate(c) == nil
}
