package rayjob

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/clusterpods"
	"github.com/manta-dev/manta/internal/ray"
)

// reconcile moves the RayJob through its deployment states, one step per call when a step writes, and leaves the
// new status in run.j.Status for Reconcile to write.
func (r *Reconciler) reconcile(ctx context.Context, run *run) error {
	j := run.j
	s := &j.Status
	if errs := Validate(j); len(errs) > 0 {
		if rayv1.IsJobDeploymentTerminal(s.JobDeploymentStatus) {
			return r.finished(ctx, run)
		}
		msg := errs.ToAggregate().Error()
		if s.JobDeploymentStatus != rayv1.JobDeploymentStatusValidationFailed || s.Message != msg {
			run.StatusEventf(corev1.EventTypeWarning, ReasonInvalidSpec, "Validate", "%s", msg)
		}
		s.JobDeploymentStatus = rayv1.JobDeploymentStatusValidationFailed
		s.Reason = rayv1.ValidationFailed
		s.Message = msg
		return nil
	}
	if s.JobDeploymentStatus == rayv1.JobDeploymentStatusValidationFailed {
		// The spec was fixed: start over, once what the run had made is gone. A RayJob made invalid mid-run (such
		// as one suspended without shutdownAfterJobFinishes) keeps its cluster and submitter while invalid; a new
		// run beside them would hold two clusters and submit the job twice.
		return r.tearDown(ctx, run, func() {
			failed, succeeded, start := s.Failed, s.Succeeded, s.StartTime
			*s = rayv1.RayJobStatus{Failed: failed, Succeeded: succeeded, StartTime: start, JobDeploymentStatus: rayv1.JobDeploymentStatusNew}
		})
	}
	switch s.JobDeploymentStatus {
	case rayv1.JobDeploymentStatusNew:
		r.initialize(run)
		return nil
	case rayv1.JobDeploymentStatusInitializing:
		return r.initializing(ctx, run)
	case rayv1.JobDeploymentStatusWaiting:
		return r.waiting(ctx, run)
	case rayv1.JobDeploymentStatusRunning:
		return r.running(ctx, run)
	case rayv1.JobDeploymentStatusRetrying:
		return r.tearDown(ctx, run, func() {
			failed, succeeded, start := s.Failed, s.Succeeded, s.StartTime
			*s = rayv1.RayJobStatus{Failed: failed, Succeeded: succeeded, StartTime: start}
		})
	case rayv1.JobDeploymentStatusSuspending:
		return r.tearDown(ctx, run, func() {
			failed, succeeded, start := s.Failed, s.Succeeded, s.StartTime
			*s = rayv1.RayJobStatus{Failed: failed, Succeeded: succeeded, StartTime: start, JobDeploymentStatus: rayv1.JobDeploymentStatusSuspended}
		})
	case rayv1.JobDeploymentStatusSuspended:
		if !j.Spec.Suspend {
			s.JobDeploymentStatus = rayv1.JobDeploymentStatusNew
			run.Requeue(0)
		}
		return nil
	case rayv1.JobDeploymentStatusComplete, rayv1.JobDeploymentStatusFailed:
		return r.finished(ctx, run)
	}
	return fmt.Errorf("unknown jobDeploymentStatus %q", s.JobDeploymentStatus)
}

// initialize records the names the job will use before anything is created: the submission ID and the cluster
// name. A reconcile that runs again (conflict, restart) finds them in the status and reuses them, which is what
// makes creation and submission happen once.
func (r *Reconciler) initialize(run *run) {
	j := run.j
	s := &j.Status
	if j.Spec.Suspend {
		s.JobDeploymentStatus = rayv1.JobDeploymentStatusSuspended
		return
	}
	switch {
	case submissionMode(j) == rayv1.InteractiveMode:
		s.JobId = j.Spec.JobId
	case j.Spec.JobId != "":
		s.JobId = j.Spec.JobId
	default:
		s.JobId = clusterbuild.ChildClusterName(j.Name, r.opts.Rand)
	}
	if sel := j.Spec.ClusterSelector[rayv1.LabelCluster]; sel != "" {
		s.RayClusterName = sel
	} else {
		s.RayClusterName = clusterbuild.ChildClusterName(j.Name, r.opts.Rand)
	}
	if s.StartTime == nil {
		s.StartTime = ptr.To(metav1.NewTime(run.now))
	}
	s.JobStatus, s.Reason, s.Message, s.EndTime, s.DashboardURL = rayv1.JobStatusNew, "", "", nil, ""
	s.RayJobStatusInfo = rayv1.RayJobStatusInfo{}
	s.JobStatusCheckFailureStartTime = nil
	s.Succeeded = ptr.To(ptr.Deref(s.Succeeded, 0))
	s.Failed = ptr.To(ptr.Deref(s.Failed, 0))
	s.JobDeploymentStatus = rayv1.JobDeploymentStatusInitializing
	run.Requeue(0)
}

// deadlines fails the job when activeDeadlineSeconds or preRunningDeadlineSeconds has passed; it reports whether
// it did.
func (r *Reconciler) deadlines(ctx context.Context, run *run, cluster *rayv1.RayCluster) bool {
	j := run.j
	s := &j.Status
	if s.StartTime == nil {
		return false
	}
	elapsed := run.now.Sub(s.StartTime.Time)
	check := func(seconds *int32, reason rayv1.JobFailedReason, message func(int32) string) bool {
		if seconds == nil {
			return false
		}
		limit := time.Duration(*seconds) * time.Second
		if elapsed < limit {
			run.Requeue(limit - elapsed)
			return false
		}
		r.stopQuietly(ctx, run, cluster)
		r.fail(run, reason, message(*seconds))
		return true
	}
	// KubeRay's message, which names when the job started (in the local zone, to the second, as the API holds it).
	if check(j.Spec.ActiveDeadlineSeconds, rayv1.DeadlineExceeded, func(n int32) string {
		return fmt.Sprintf("The RayJob has passed the activeDeadlineSeconds. StartTime: %s. ActiveDeadlineSeconds: %d", s.StartTime.Local().Truncate(time.Second), n)
	}) {
		return true
	}
	if s.JobStatus == rayv1.JobStatusRunning || rayv1.IsJobTerminal(s.JobStatus) {
		return false
	}
	// With why the cluster's pods cannot start, if they cannot (starttrouble.go).
	return check(j.Spec.PreRunningDeadlineSeconds, rayv1.PreRunningDeadlineExceeded, func(n int32) string {
		return r.withStartTrouble(ctx, cluster, fmt.Sprintf("the Ray job did not start running within preRunningDeadlineSeconds (%ds)", n))
	})
}

// stopQuietly asks Ray to stop the job the RayJob gives up on, so it does not keep running unseen.
func (r *Reconciler) stopQuietly(ctx context.Context, run *run, cluster *rayv1.RayCluster) {
	j := run.j
	if cluster == nil || j.Status.JobId == "" || rayv1.IsJobTerminal(j.Status.JobStatus) {
		return
	}
	dash, err := r.dashboard(ctx, cluster)
	if err != nil {
		return
	}
	if stopped, err := dash.StopJob(ctx, j.Status.JobId); err == nil && stopped {
		run.Eventf(corev1.EventTypeNormal, ReasonStoppedJob, "Stop", "stopped Ray job %s", j.Status.JobId)
	} else if err != nil && !errors.Is(err, ray.ErrNotFound) {
		run.Eventf(corev1.EventTypeWarning, ReasonFailedStopJob, "Stop", "failed to stop Ray job %s: %v", j.Status.JobId, err)
	}
}

// fail ends the attempt as Failed, or Retrying when backoffLimit allows another attempt.
func (r *Reconciler) fail(run *run, reason rayv1.JobFailedReason, msg string) {
	s := &run.j.Status
	s.Failed = ptr.To(ptr.Deref(s.Failed, 0) + 1)
	s.Reason, s.Message = reason, msg
	if ptr.Deref(s.Failed, 0) <= ptr.Deref(run.j.Spec.BackoffLimit, 0) {
		s.JobDeploymentStatus = rayv1.JobDeploymentStatusRetrying
		run.Requeue(0)
		return
	}
	s.JobDeploymentStatus = rayv1.JobDeploymentStatusFailed
	s.EndTime = ptr.To(metav1.NewTime(run.now))
	run.Requeue(0)
}

func (r *Reconciler) complete(run *run) {
	s := &run.j.Status
	s.Succeeded = ptr.To(ptr.Deref(s.Succeeded, 0) + 1)
	s.JobDeploymentStatus = rayv1.JobDeploymentStatusComplete
	s.EndTime = ptr.To(metav1.NewTime(run.now))
	run.Requeue(0)
}

// suspendRequested moves a started RayJob to Suspending; from there it goes on to Suspended even if suspend is
// set back to false meanwhile (suspension is atomic, as in KubeRay).
func suspendRequested(run *run) bool {
	if !run.j.Spec.Suspend {
		return false
	}
	run.j.Status.JobDeploymentStatus = rayv1.JobDeploymentStatusSuspending
	run.Requeue(0)
	return true
}

// ensureCluster finds the job's cluster, creating it from rayClusterSpec when the RayJob makes its own.
func (r *Reconciler) ensureCluster(ctx context.Context, run *run) (*rayv1.RayCluster, error) {
	j := run.j
	cluster, err := r.getCluster(ctx, j)
	if err != nil || cluster != nil {
		if cluster != nil && len(j.Spec.ClusterSelector) == 0 && !metav1.IsControlledBy(cluster, j) {
			return nil, fmt.Errorf("RayCluster %s exists and does not belong to this RayJob", cluster.Name)
		}
		return cluster, err
	}
	if len(j.Spec.ClusterSelector) > 0 {
		run.Eventf(corev1.EventTypeWarning, ReasonClusterNotFound, "Get", "RayCluster %s/%s set in the clusterSelector is not found. It must be created manually", j.Namespace, j.Status.RayClusterName)
		run.Requeue(r.opts.PollInterval)
		return nil, nil
	}
	c := ClusterFor(j, j.Status.RayClusterName)
	if submissionMode(j) == rayv1.K8sJobMode {
		// As KubeRay: the cluster itself carries the job's gang only when the submitter is a pod of its own.
		r.addSchedulerMetadata(j, c, "")
	}
	if err := r.client.Create(ctx, c); err != nil {
		if apierrors.IsAlreadyExists(err) {
			run.Requeue(time.Second)
			return nil, nil
		}
		run.Eventf(corev1.EventTypeWarning, ReasonFailedCreateCluster, "Create", "Failed to create RayCluster %s/%s: %v", c.Namespace, c.Name, err)
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			// The API server refuses the cluster as written: retrying will not help.
			r.fail(run, rayv1.SubmissionFailed, fmt.Sprintf("spec.rayClusterSpec: the API server refused RayCluster %s: %v", c.Name, err))
			return nil, nil
		}
		return nil, err
	}
	run.Eventf(corev1.EventTypeNormal, ReasonCreatedCluster, "Create", "Created RayCluster %s/%s", c.Namespace, c.Name)
	return nil, nil
}

// initializing waits for the cluster to be ready, then starts the submission.
func (r *Reconciler) initializing(ctx context.Context, run *run) error {
	j := run.j
	s := &j.Status
	if suspendRequested(run) {
		return nil
	}
	if err := r.batchSchedule(ctx, run); err != nil {
		return err
	}
	cluster, err := r.ensureCluster(ctx, run)
	if err != nil || cluster == nil || s.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing {
		if r.deadlines(ctx, run, nil) {
			return nil
		}
		return err
	}
	s.RayClusterStatus = *cluster.Status.DeepCopy()
	if r.deadlines(ctx, run, cluster) {
		return nil
	}
	if cluster.Status.State != rayv1.Ready {
		if failed, err := r.reportStartTrouble(ctx, run, cluster); failed || err != nil {
			return err
		}
		if len(j.Spec.ClusterSelector) > 0 {
			run.Requeue(r.opts.PollInterval) // not owned: no watch event will come
		}
		return nil
	}
	s.Message = "" // what reportStartTrouble said is over
	s.DashboardURL = DashboardURL(cluster, r.opts.ClusterDomain)
	switch submissionMode(j) {
	case rayv1.K8sJobMode:
		if err := r.ensureSubmitter(ctx, run, cluster); err != nil {
			return err
		}
	case rayv1.InteractiveMode:
		if j.Spec.JobId == "" {
			s.JobDeploymentStatus = rayv1.JobDeploymentStatusWaiting
			return nil
		}
		s.JobId = j.Spec.JobId
	}
	s.JobDeploymentStatus = rayv1.JobDeploymentStatusRunning
	run.Requeue(0)
	return nil
}

// ensureSubmitter creates the K8sJobMode submitter Job (named after the RayJob, so it exists at most once).
func (r *Reconciler) ensureSubmitter(ctx context.Context, run *run, cluster *rayv1.RayCluster) error {
	existing, err := r.getSubmitter(ctx, run.j)
	if err != nil || existing != nil {
		return err
	}
	job := SubmitterJob(run.j, cluster, r.rays.InClusterDashboardURL(HeadTarget(cluster)))
	r.addSchedulerMetadata(run.j, &job.Spec.Template, clusterbuild.SubmitterGroupName)
	if err := r.client.Create(ctx, job); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		run.Eventf(corev1.EventTypeWarning, ReasonFailedSubmitter, "Create", "Failed to create new Kubernetes Job %s/%s: %v", job.Namespace, job.Name, err)
		if apierrors.IsInvalid(err) {
			r.fail(run, rayv1.SubmissionFailed, fmt.Sprintf("spec.submitterPodTemplate: the API server refused submitter Job %s: %v", job.Name, err))
			return nil
		}
		return err
	}
	run.Eventf(corev1.EventTypeNormal, ReasonCreatedSubmitter, "Create", "Created Kubernetes Job %s/%s", job.Namespace, job.Name)
	return nil
}

// observe is the start of every step of a started job: a suspend request, the cluster's status mirrored, the
// deadlines. stop says the step is over (the job is suspending or failed).
func (r *Reconciler) observe(ctx context.Context, run *run) (*rayv1.RayCluster, bool, error) {
	if suspendRequested(run) {
		return nil, true, nil
	}
	cluster, err := r.getCluster(ctx, run.j)
	if err != nil {
		return nil, true, err
	}
	if cluster != nil {
		run.j.Status.RayClusterStatus = *cluster.Status.DeepCopy()
	}
	return cluster, r.deadlines(ctx, run, cluster), nil
}

// waiting is InteractiveMode before the user names the job.
func (r *Reconciler) waiting(ctx context.Context, run *run) error {
	j := run.j
	_, stop, err := r.observe(ctx, run)
	if stop || err != nil {
		return err
	}
	if j.Spec.JobId == "" {
		return nil
	}
	j.Status.JobId = j.Spec.JobId
	j.Status.Message = ""
	j.Status.JobDeploymentStatus = rayv1.JobDeploymentStatusRunning
	run.Requeue(0)
	return nil
}

// running follows the Ray job (submitting it first in HTTPMode) until it is terminal.
func (r *Reconciler) running(ctx context.Context, run *run) error {
	j := run.j
	s := &j.Status
	cluster, stop, err := r.observe(ctx, run)
	if stop || err != nil {
		return err
	}
	run.Requeue(r.opts.PollInterval)
	if cluster == nil {
		r.statusCheckFailed(run, fmt.Errorf("RayCluster %s is gone", s.RayClusterName))
		return nil
	}
	if err := r.ensureHeadService(ctx, run, cluster); err != nil {
		return err
	}
	dash, err := r.dashboard(ctx, cluster)
	if err != nil {
		if gaveUp, terr := r.submitterFinishedTimeout(ctx, run, cluster, s.JobStatus); gaveUp || terr != nil {
			return terr
		}
		return err
	}
	info, err := dash.GetJob(ctx, s.JobId)
	// Ray is asked before the submitter-finished timeout is applied: a reconcile that comes late (an operator
	// restarted, a long queue) finds a job that ended before its submitter did as Ray reports it, not failed.
	current := s.JobStatus
	if err == nil {
		current = rayv1.JobStatus(info.Status)
	}
	if gaveUp, terr := r.submitterFinishedTimeout(ctx, run, cluster, current); gaveUp || terr != nil {
		return terr
	}
	if errors.Is(err, ray.ErrNotFound) {
		return r.notSubmittedYet(ctx, run, cluster, dash)
	}
	if err != nil {
		r.statusCheckFailed(run, err)
		return nil
	}
	s.JobStatusCheckFailureStartTime = nil
	s.JobStatus = rayv1.JobStatus(info.Status)
	s.RayJobStatusInfo = rayJobInfo(info)
	if !rayv1.IsJobTerminal(s.JobStatus) {
		s.Message = info.Message
		return r.checkSubmitterAlive(ctx, run, cluster)
	}
	s.Message = info.Message
	if submissionMode(j) == rayv1.K8sJobMode {
		sub, err := r.getSubmitter(ctx, j)
		if err != nil {
			return err
		}
		if sub != nil && !jobFinished(sub) {
			// Let the submitter print the last logs; do not wait for it forever.
			end := run.now
			if info.EndTime > 0 {
				end = time.UnixMilli(info.EndTime)
			}
			if wait := r.opts.TransitionGracePeriod - run.now.Sub(end); wait > 0 {
				run.Requeue(min(wait, r.opts.PollInterval))
				return nil
			}
		}
	}
	if s.JobStatus == rayv1.JobStatusSucceeded {
		r.complete(run)
		return nil
	}
	msg := info.Message
	if msg == "" {
		msg = fmt.Sprintf("Ray job %s is %s", s.JobId, s.JobStatus)
	}
	r.fail(run, rayv1.AppFailed, msg)
	return nil
}

// SubmitterGrace decides a K8sJobMode or SidecarMode job whose submitter (the Job, or the head pod's submitter
// container) finished at finishedAt (zero: not finished) while Ray has not reported the job terminal: wait how long
// for Ray to catch up, or give up (the timeout has passed).
// A job Ray reported terminal is settled by the status Ray gives, never here. It is pure.
func SubmitterGrace(jobStatus rayv1.JobStatus, finishedAt, now time.Time, timeout time.Duration) (wait time.Duration, giveUp bool) {
	if finishedAt.IsZero() || rayv1.IsJobTerminal(jobStatus) {
		return 0, false
	}
	if left := finishedAt.Add(timeout).Sub(now); left > 0 {
		return left, false
	}
	return 0, true
}

// submitterFinishedTimeout fails a K8sJobMode or SidecarMode job whose submitter (the Job, or the head pod's
// submitter container) finished SubmitterFinishedTimeout ago while Ray never reported the job terminal (an
// unreachable head, a job Ray lost), as KubeRay does; before that it wakes up when the timeout ends. It reports
// whether it failed the job.
func (r *Reconciler) submitterFinishedTimeout(ctx context.Context, run *run, cluster *rayv1.RayCluster, jobStatus rayv1.JobStatus) (bool, error) {
	j := run.j
	s := &j.Status
	var finishedAt time.Time
	switch submissionMode(j) {
	case rayv1.K8sJobMode:
		sub, err := r.getSubmitter(ctx, j)
		if err != nil || sub == nil {
			return false, err
		}
		finishedAt = submitterFinishedAt(sub)
	case rayv1.SidecarMode:
		heads, err := r.headPods(ctx, cluster)
		if err != nil {
			return false, err
		}
		for i := range heads {
			if t := sidecarFinishedAt(&heads[i]); !t.IsZero() {
				finishedAt = t
				break
			}
		}
	default:
		return false, nil
	}
	wait, giveUp := SubmitterGrace(jobStatus, finishedAt, run.now, r.opts.SubmitterFinishedTimeout)
	if !giveUp {
		if wait > 0 {
			run.Requeue(wait)
		}
		return false, nil
	}
	s.JobStatus = rayv1.JobStatusFailed
	r.fail(run, rayv1.JobDeploymentStatusTransitionGracePeriodExceeded, fmt.Sprintf(
		"The RayJob submitter finished at %s but the ray job did not reach terminal state within %v", finishedAt.Format(time.DateTime), r.opts.SubmitterFinishedTimeout))
	return true, nil
}

// sidecarFinishedAt is when the head pod's submitter container exited (with any code); zero while it runs.
func sidecarFinishedAt(pod *corev1.Pod) time.Time {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == SubmitterContainerName && cs.State.Terminated != nil {
			return cs.State.Terminated.FinishedAt.Time
		}
	}
	return time.Time{}
}

// submitterFinishedAt is when the submitter Job completed or failed; zero while it runs.
func submitterFinishedAt(job *batchv1.Job) time.Time {
	for _, t := range []batchv1.JobConditionType{batchv1.JobComplete, batchv1.JobFailed} {
		if c := jobCondition(job, t); c != nil {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func rayJobInfo(info *ray.JobInfo) rayv1.RayJobStatusInfo {
	var out rayv1.RayJobStatusInfo
	if info.StartTime > 0 {
		out.StartTime = ptr.To(metav1.NewTime(time.UnixMilli(info.StartTime)))
	}
	if info.EndTime > 0 {
		out.EndTime = ptr.To(metav1.NewTime(time.UnixMilli(info.EndTime)))
	}
	return out
}

// notSubmittedYet handles a job Ray does not know: HTTPMode submits it (once: Ray refuses a second submission of
// the same ID, and the ID was recorded before anything ran); the other modes wait for their submitter. A job Ray
// knew and has lost (a head restarted without GCS fault tolerance) is never submitted again.
func (r *Reconciler) notSubmittedYet(ctx context.Context, run *run, cluster *rayv1.RayCluster, dash ray.Dashboard) error {
	j := run.j
	s := &j.Status
	if s.JobStatus != rayv1.JobStatusNew {
		//lint:ignore ST1005 the message goes to status.message, and starts with a name
		r.statusCheckFailed(run, fmt.Errorf("Ray no longer knows job %s (was %s); the head may have restarted", s.JobId, s.JobStatus))
		return nil
	}
	s.JobStatusCheckFailureStartTime = nil
	switch submissionMode(j) {
	case rayv1.HTTPMode:
		req, err := SubmitRequest(j)
		if err != nil {
			r.fail(run, rayv1.ValidationFailed, err.Error())
			return nil
		}
		_, err = dash.SubmitJob(ctx, req)
		switch {
		case err == nil:
			run.Eventf(corev1.EventTypeNormal, ReasonSubmittedJob, "Submit", "submitted Ray job %s to %s", s.JobId, cluster.Name)
		case errors.Is(err, ray.ErrAlreadySubmitted):
			// An earlier call got through after all (it timed out on our side).
		case errors.Is(err, ray.ErrUnavailable):
			r.statusCheckFailed(run, err)
		default:
			run.Eventf(corev1.EventTypeWarning, ReasonFailedSubmitJob, "Submit", "failed to submit Ray job %s: %v", s.JobId, err)
			r.fail(run, rayv1.SubmissionFailed, fmt.Sprintf("submitting Ray job %s: %v", s.JobId, err))
			return nil
		}
		run.Requeue(time.Second)
		return nil
	case rayv1.InteractiveMode:
		s.Message = fmt.Sprintf("Ray does not know job %s yet; submit it with that submission ID", s.JobId)
	}
	return r.checkSubmitterAlive(ctx, run, cluster)
}

// checkSubmitterAlive fails the job when its submitter has given up (K8sJobMode: the Job failed; SidecarMode: the
// sidecar exited with an error) and the Ray job did not finish within the grace period.
func (r *Reconciler) checkSubmitterAlive(ctx context.Context, run *run, cluster *rayv1.RayCluster) error {
	j := run.j
	var failedAt time.Time
	var why string
	switch submissionMode(j) {
	case rayv1.K8sJobMode:
		sub, err := r.getSubmitter(ctx, j)
		if err != nil {
			return err
		}
		if sub == nil {
			// Deleted under us (or not yet in the cache): make it again; its script does not resubmit.
			return r.ensureSubmitter(ctx, run, cluster)
		}
		if c := jobCondition(sub, batchv1.JobFailed); c != nil {
			failedAt, why = c.LastTransitionTime.Time, fmt.Sprintf("Job submission has failed. Reason: %s. Message: %s", c.Reason, c.Message)
		} else if c := jobCondition(sub, batchv1.JobComplete); c != nil && j.Status.JobStatus == rayv1.JobStatusNew {
			// It finished and Ray does not know the job: the submission went nowhere.
			r.fail(run, rayv1.AppFailed, "Submitter completed but Ray job not found in RayCluster.")
			return nil
		} else {
			return nil
		}
	case rayv1.SidecarMode:
		t, msg, err := r.sidecarFailure(ctx, cluster)
		if err != nil || msg == "" {
			return err
		}
		failedAt, why = t, msg
	default:
		return nil
	}
	if j.Status.JobStatus == rayv1.JobStatusNew {
		r.fail(run, rayv1.SubmissionFailed, why)
		return nil
	}
	if wait := r.opts.TransitionGracePeriod - run.now.Sub(failedAt); wait > 0 {
		run.Requeue(min(wait, r.opts.PollInterval))
		return nil
	}
	r.stopQuietly(ctx, run, cluster)
	r.fail(run, rayv1.JobDeploymentStatusTransitionGracePeriodExceeded, fmt.Sprintf("%s and the Ray job did not finish within %s", why, r.opts.TransitionGracePeriod))
	return nil
}

// sidecarFailure finds a SidecarMode submitter container that exited with an error, or a head pod that failed.
func (r *Reconciler) sidecarFailure(ctx context.Context, cluster *rayv1.RayCluster) (time.Time, string, error) {
	heads, err := r.headPods(ctx, cluster)
	if err != nil {
		return time.Time{}, "", err
	}
	for _, p := range heads {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != SubmitterContainerName || cs.State.Terminated == nil || cs.State.Terminated.ExitCode == 0 {
				continue
			}
			t := cs.State.Terminated
			return t.FinishedAt.Time, fmt.Sprintf("submitter container in head pod %s exited with code %d: %s", p.Name, t.ExitCode, t.Reason), nil
		}
		if p.Status.Phase == corev1.PodFailed {
			return p.CreationTimestamp.Time, fmt.Sprintf("head pod %s failed: %s", p.Name, p.Status.Message), nil
		}
	}
	return time.Time{}, "", nil
}

// headPods lists the cluster's head pods (one, unless one is being replaced).
func (r *Reconciler) headPods(ctx context.Context, cluster *rayv1.RayCluster) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	err := r.client.List(ctx, pods, client.InNamespace(cluster.Namespace), clusterpods.Of(cluster.Name), client.MatchingLabels{rayv1.LabelNodeType: rayv1.NodeTypeHead})
	return pods.Items, err
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		if c := &job.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func jobFinished(job *batchv1.Job) bool {
	return jobCondition(job, batchv1.JobComplete) != nil || jobCondition(job, batchv1.JobFailed) != nil
}

// statusCheckFailed records that the job's status could not be read, and fails the job once that has lasted
// longer than StatusCheckTimeout.
func (r *Reconciler) statusCheckFailed(run *run, err error) {
	s := &run.j.Status
	if s.JobStatusCheckFailureStartTime == nil {
		s.JobStatusCheckFailureStartTime = ptr.To(metav1.NewTime(run.now))
		run.StatusEventf(corev1.EventTypeWarning, ReasonStatusCheckFailed, "GetJob", "cannot read Ray job %s: %v", s.JobId, err)
	}
	since := run.now.Sub(s.JobStatusCheckFailureStartTime.Time)
	if since >= r.opts.StatusCheckTimeout {
		r.fail(run, rayv1.JobStatusCheckTimeoutExceeded, fmt.Sprintf("could not read the status of Ray job %s for %s: %v", s.JobId, r.opts.StatusCheckTimeout, err))
		return
	}
	run.Requeue(min(r.opts.StatusCheckTimeout-since, r.opts.PollInterval))
}

// tearDown deletes the job's cluster (when the RayJob made it) and submitter; once both are gone, reset sets the
// status of the next state.
func (r *Reconciler) tearDown(ctx context.Context, run *run, reset func()) error {
	j := run.j
	gone := true
	if name := j.Status.RayClusterName; name != "" && len(j.Spec.ClusterSelector) == 0 {
		ok, err := r.deleteOwned(ctx, run, &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: name}})
		if err != nil {
			return err
		}
		if ok {
			ok, err = r.clusterPodsGone(ctx, j.Namespace, name)
			if err != nil {
				return err
			}
		}
		gone = gone && ok
	}
	ok, err := r.deleteOwned(ctx, run, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: SubmitterJobName(j)}})
	if err != nil {
		return err
	}
	gone = gone && ok
	if !gone {
		run.Requeue(time.Second)
		return nil
	}
	// As in KubeRay: the batch scheduler's queue gets back what the job held before the status says it let go.
	if err := r.batchSchedulerCleanup(ctx, run); err != nil {
		return err
	}
	reset()
	run.Requeue(0)
	return nil
}

// ensureHeadService keeps <job>-head-svc pointing at the head of the job's current cluster, as KubeRay does for a
// cluster the RayJob made (not for one it selected): a name for the dashboard that outlives a retried cluster.
func (r *Reconciler) ensureHeadService(ctx context.Context, run *run, cluster *rayv1.RayCluster) error {
	j := run.j
	if len(j.Spec.ClusterSelector) > 0 {
		return nil
	}
	want := clusterbuild.OwnerHeadService(cluster, clusterbuild.KindRayJob, j.Name)
	want.OwnerReferences = []metav1.OwnerReference{ownerRef(j)}
	have := &corev1.Service{}
	err := r.reader.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			run.Eventf(corev1.EventTypeWarning, ReasonFailedCreateService, "Create", "Failed to create the service %s/%s, %v", want.Namespace, want.Name, err)
			return err
		}
		run.Eventf(corev1.EventTypeNormal, ReasonCreatedService, "Create", "Created the service %s/%s", want.Namespace, want.Name)
		return nil
	case err != nil:
		return err
	case have.Spec.Selector[rayv1.LabelCluster] == cluster.Name:
		return nil
	}
	// A new cluster (a retry): point the Service at it; the cluster IP cannot change.
	want.Spec.ClusterIP, want.Spec.ClusterIPs = have.Spec.ClusterIP, have.Spec.ClusterIPs
	have.Spec = want.Spec
	if err := r.client.Update(ctx, have); err != nil {
		run.Eventf(corev1.EventTypeWarning, ReasonFailedUpdateService, "Update", "Failed to update the service %s/%s, %v", have.Namespace, have.Name, err)
		return err
	}
	run.Eventf(corev1.EventTypeNormal, ReasonUpdatedService, "Update", "Updated the service %s/%s", have.Namespace, have.Name)
	return nil
}
