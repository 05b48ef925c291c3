package rayjob

import (
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/ray"
)

// started is the start of every step of a started job: a suspend request, the cluster's status mirrored, the
// deadlines. stop says the step is over (the job is suspending or failed).
func (p *plan) started() (*rayv1.RayCluster, bool, error) {
	if p.suspendRequested() {
		return nil, true, nil
	}
	cluster, err := p.o.cluster, p.o.clusterErr
	if err != nil {
		return nil, true, err
	}
	if cluster != nil {
		p.j.Status.RayClusterStatus = *cluster.Status.DeepCopy()
	}
	return cluster, p.deadlines(cluster), nil
}

// waiting is InteractiveMode before the user names the job.
func (p *plan) waiting() error {
	j := p.j
	_, stop, err := p.started()
	if stop || err != nil {
		return err
	}
	if j.Spec.JobId == "" {
		return nil
	}
	j.Status.JobId = j.Spec.JobId
	j.Status.Message = ""
	j.Status.JobDeploymentStatus = rayv1.JobDeploymentStatusRunning
	p.Requeue(0)
	return nil
}

// running follows the Ray job (submitting it first in HTTPMode) until it is terminal.
func (p *plan) running() error {
	j := p.j
	s := &j.Status
	cluster, stop, err := p.started()
	if stop || err != nil {
		return err
	}
	p.Requeue(p.cfg.pollInterval)
	if cluster == nil {
		p.statusCheckFailed(fmt.Errorf("RayCluster %s is gone", s.RayClusterName))
		return nil
	}
	if err := p.ensureHeadService(cluster); err != nil {
		return err
	}
	// Ray's answer (observed before the plan) counts before the submitter-finished timeout: a reconcile that comes
	// late (an operator restarted, a long queue) finds a job that ended before its submitter did as Ray reports it.
	current := s.JobStatus
	if p.o.dashErr == nil && p.o.jobErr == nil && p.o.jobInfo != nil {
		current = rayv1.JobStatus(p.o.jobInfo.Status)
	}
	if gaveUp, err := p.submitterFinishedTimeout(cluster, current); gaveUp || err != nil {
		return err
	}
	if p.o.dashErr != nil {
		return p.o.dashErr
	}
	info, err := p.o.jobInfo, p.o.jobErr
	if errors.Is(err, ray.ErrNotFound) {
		return p.notSubmittedYet(cluster)
	}
	if err != nil {
		p.statusCheckFailed(err)
		return nil
	}
	s.JobStatusCheckFailureStartTime = nil
	s.JobStatus = rayv1.JobStatus(info.Status)
	s.RayJobStatusInfo = rayJobInfo(info)
	if !rayv1.IsJobTerminal(s.JobStatus) {
		s.Message = info.Message
		return p.checkSubmitterAlive(cluster)
	}
	s.Message = info.Message
	if submissionMode(j) == rayv1.K8sJobMode {
		sub, err := p.ownedSubmitter()
		if err != nil {
			return err
		}
		if sub != nil && !jobFinished(sub) {
			// Let the submitter print the last logs; do not wait for it forever.
			end := p.now
			if info.EndTime > 0 {
				end = time.UnixMilli(info.EndTime)
			}
			if wait := p.cfg.transitionGracePeriod - p.now.Sub(end); wait > 0 {
				p.Requeue(min(wait, p.cfg.pollInterval))
				return nil
			}
		}
	}
	if s.JobStatus == rayv1.JobStatusSucceeded {
		p.complete()
		return nil
	}
	msg := info.Message
	if msg == "" {
		msg = fmt.Sprintf("Ray job %s is %s", s.JobId, s.JobStatus)
	}
	p.fail(rayv1.AppFailed, msg)
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
func (p *plan) submitterFinishedTimeout(cluster *rayv1.RayCluster, jobStatus rayv1.JobStatus) (bool, error) {
	j := p.j
	s := &j.Status
	var finishedAt time.Time
	switch submissionMode(j) {
	case rayv1.K8sJobMode:
		sub, err := p.ownedSubmitter()
		if err != nil || sub == nil {
			return false, err
		}
		finishedAt = submitterFinishedAt(sub)
	case rayv1.SidecarMode:
		heads, err := p.headPods(cluster)
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
	wait, giveUp := SubmitterGrace(jobStatus, finishedAt, p.now, p.cfg.submitterFinishedTimeout)
	if !giveUp {
		if wait > 0 {
			p.Requeue(wait)
		}
		return false, nil
	}
	s.JobStatus = rayv1.JobStatusFailed
	p.fail(rayv1.JobDeploymentStatusTransitionGracePeriodExceeded, fmt.Sprintf(
		"The RayJob submitter finished at %s but the ray job did not reach terminal state within %v", finishedAt.Format(time.DateTime), p.cfg.submitterFinishedTimeout))
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
func (p *plan) notSubmittedYet(cluster *rayv1.RayCluster) error {
	j := p.j
	s := &j.Status
	if s.JobStatus != rayv1.JobStatusNew {
		//lint:ignore ST1005 the message goes to status.message, and starts with a name
		p.statusCheckFailed(fmt.Errorf("Ray no longer knows job %s (was %s); the head may have restarted", s.JobId, s.JobStatus))
		return nil
	}
	s.JobStatusCheckFailureStartTime = nil
	switch submissionMode(j) {
	case rayv1.HTTPMode:
		req, err := SubmitRequest(j)
		if err != nil {
			p.fail(rayv1.ValidationFailed, err.Error())
			return nil
		}
		id := s.JobId
		p.act(action{kind: submitJob, cluster: cluster, jobID: id, submit: req, onErr: func(p *plan, err error) error {
			if !errors.Is(err, ray.ErrUnavailable) {
				p.fail(rayv1.SubmissionFailed, fmt.Sprintf("submitting Ray job %s: %v", id, err))
				return nil
			}
			p.statusCheckFailed(err)
			p.Requeue(time.Second)
			return nil
		}})
		p.Requeue(time.Second)
		return nil
	case rayv1.InteractiveMode:
		s.Message = fmt.Sprintf("Ray does not know job %s yet; submit it with that submission ID", s.JobId)
	}
	return p.checkSubmitterAlive(cluster)
}

// checkSubmitterAlive fails the job when its submitter has given up (K8sJobMode: the Job failed; SidecarMode: the
// sidecar exited with an error) and the Ray job did not finish within the grace period.
func (p *plan) checkSubmitterAlive(cluster *rayv1.RayCluster) error {
	j := p.j
	var failedAt time.Time
	var why string
	switch submissionMode(j) {
	case rayv1.K8sJobMode:
		sub, err := p.ownedSubmitter()
		if err != nil {
			return err
		}
		if sub == nil {
			// Deleted under us (or not yet in the cache): make it again; its script does not resubmit.
			return p.ensureSubmitter(cluster)
		}
		if c := jobCondition(sub, batchv1.JobFailed); c != nil {
			failedAt, why = c.LastTransitionTime.Time, fmt.Sprintf("Job submission has failed. Reason: %s. Message: %s", c.Reason, c.Message)
		} else if c := jobCondition(sub, batchv1.JobComplete); c != nil && j.Status.JobStatus == rayv1.JobStatusNew {
			// It finished and Ray does not know the job: the submission went nowhere.
			p.fail(rayv1.AppFailed, "Submitter completed but Ray job not found in RayCluster.")
			return nil
		} else {
			return nil
		}
	case rayv1.SidecarMode:
		t, msg, err := p.sidecarFailure(cluster)
		if err != nil || msg == "" {
			return err
		}
		failedAt, why = t, msg
	default:
		return nil
	}
	if j.Status.JobStatus == rayv1.JobStatusNew {
		p.fail(rayv1.SubmissionFailed, why)
		return nil
	}
	if wait := p.cfg.transitionGracePeriod - p.now.Sub(failedAt); wait > 0 {
		p.Requeue(min(wait, p.cfg.pollInterval))
		return nil
	}
	p.stopQuietly(cluster)
	p.fail(rayv1.JobDeploymentStatusTransitionGracePeriodExceeded, fmt.Sprintf("%s and the Ray job did not finish within %s", why, p.cfg.transitionGracePeriod))
	return nil
}

// sidecarFailure finds a SidecarMode submitter container that exited with an error, or a head pod that failed.
func (p *plan) sidecarFailure(cluster *rayv1.RayCluster) (time.Time, string, error) {
	heads, err := p.headPods(cluster)
	if err != nil {
		return time.Time{}, "", err
	}
	for _, pod := range heads {
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name != SubmitterContainerName || cs.State.Terminated == nil || cs.State.Terminated.ExitCode == 0 {
				continue
			}
			t := cs.State.Terminated
			return t.FinishedAt.Time, fmt.Sprintf("submitter container in head pod %s exited with code %d: %s", pod.Name, t.ExitCode, t.Reason), nil
		}
		if pod.Status.Phase == corev1.PodFailed {
			return pod.CreationTimestamp.Time, fmt.Sprintf("head pod %s failed: %s", pod.Name, pod.Status.Message), nil
		}
	}
	return time.Time{}, "", nil
}

// headPods are the observed cluster's head pods (one, unless one is being replaced).
func (p *plan) headPods(cluster *rayv1.RayCluster) ([]corev1.Pod, error) {
	if p.o.podsErr != nil {
		return nil, p.o.podsErr
	}
	var heads []corev1.Pod
	for _, pod := range p.o.pods {
		if pod.Labels[rayv1.LabelCluster] == cluster.Name && pod.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead {
			heads = append(heads, pod)
		}
	}
	return heads, nil
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

// ensureHeadService keeps <job>-head-svc pointing at the head of the job's current cluster, as KubeRay does for a
// cluster the RayJob made (not for one it selected): a name for the dashboard that outlives a retried cluster.
func (p *plan) ensureHeadService(cluster *rayv1.RayCluster) error {
	j := p.j
	if len(j.Spec.ClusterSelector) > 0 {
		return nil
	}
	want := clusterbuild.OwnerHeadService(cluster, clusterbuild.KindRayJob, j.Name)
	want.OwnerReferences = []metav1.OwnerReference{ownerRef(j)}
	if err := p.o.headServiceErr; err != nil {
		return err
	}
	if p.o.headServiceCurrent {
		return nil
	}
	switch s := reconcile.PlanOwned(j, &headServiceKind, want, p.o.headService); s.Op {
	case reconcile.Created:
		p.act(action{kind: createHeadService, obj: want, unread: p.o.headServiceUnread})
	case reconcile.Updated:
		p.act(action{kind: updateHeadService, obj: s.Object})
	}
	return nil
}

// headServiceKind writes <job>-head-svc as KubeRay does: whoever controls an existing one, pointed at the job's
// current cluster when it is not (a retry), its cluster IP kept (it cannot change); one created meanwhile is as
// good as created.
var headServiceKind = reconcile.Owned[*corev1.Service]{
	Kind: "Service", New: func() *corev1.Service { return &corev1.Service{} }, AnyController: true,
	Sync: func(have, want *corev1.Service) (*corev1.Service, bool, bool) {
		if have.Spec.Selector[rayv1.LabelCluster] == want.Spec.Selector[rayv1.LabelCluster] {
			return have, false, false
		}
		updated := have.DeepCopy()
		updated.Spec = *want.Spec.DeepCopy()
		updated.Spec.ClusterIP, updated.Spec.ClusterIPs = have.Spec.ClusterIP, have.Spec.ClusterIPs
		return updated, true, false
	},
}
