package rayjob

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/podgroup"
	"github.com/manta-dev/manta/internal/podtrouble"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/reconcile"
)

// planConfig is what the plan reads of the controller's Options: durations and switches, no client and no clock.
type planConfig struct {
	clusterDomain            string
	statusCheckTimeout       time.Duration
	transitionGracePeriod    time.Duration
	submitterFinishedTimeout time.Duration
	pollInterval             time.Duration
	missingConfigGrace       time.Duration
	deleteSelf               bool
	batchScheduler           string
}

func (o *Options) planConfig() planConfig {
	return planConfig{
		clusterDomain: o.ClusterDomain, statusCheckTimeout: o.StatusCheckTimeout, transitionGracePeriod: o.TransitionGracePeriod,
		submitterFinishedTimeout: o.SubmitterFinishedTimeout, pollInterval: o.PollInterval, missingConfigGrace: o.MissingConfigGrace,
		deleteSelf: o.DeleteRayJobAfterJobFinishes, batchScheduler: o.BatchScheduler,
	}
}

// actionKind is one write the plan asks of the writer (write.go).
type actionKind int

const (
	// syncPodGroup keeps the Volcano PodGroup at podGroup.
	syncPodGroup actionKind = iota
	createCluster
	createSubmitter
	createHeadService
	updateHeadService
	// submitJob submits the HTTPMode job to the cluster's dashboard.
	submitJob
	// stopJob asks the cluster's dashboard to stop the job the RayJob gives up on; its failure is only reported.
	stopJob
	deleteCluster
	deleteSubmitter
	// suspendWorkers patches obj (the cluster with every worker group suspended) over base.
	suspendWorkers
	// deleteSelf deletes the RayJob.
	deleteSelf
)

// action is one write, in the writer's order.
type action struct {
	kind actionKind
	// obj is the object written: the cluster, Job or Service to create, update or delete.
	obj client.Object
	// base is what suspendWorkers patches obj over.
	base *rayv1.RayCluster
	// cluster is whose dashboard submitJob and stopJob call; jobID the Ray job they are about.
	cluster *rayv1.RayCluster
	jobID   string
	submit  ray.JobSubmitRequest
	// podGroup is the PodGroup syncPodGroup writes; cleanup says it gives back what a job no longer uses (its own
	// events), bestEffort that its failure is only reported.
	podGroup   *volcanov1beta1.PodGroup
	cleanup    bool
	bestEffort bool

	// at is how many of the plan's events were asked before the action: the writer's events about it go there,
	// in the order the old write-as-you-go code recorded them.
	at int
	// before is the plan as it stood when the action was planned. A failed write ends the reconcile there: what
	// the plan decided after it assumed the write succeeded.
	before checkpoint
	// onErr, when set, finishes the reconcile from before once the write failed with err (a refused cluster fails
	// the job, say); it returns the reconcile's error. When nil, err is the reconcile's error.
	onErr func(p *plan, err error) error
}

type checkpoint struct {
	status rayv1.RayJobStatus
	result reconcile.Result
}

// plan is what one reconcile of a RayJob writes, in order, and the status it then records. Its Result gathers the
// status events and the requeue (see internal/reconcile); the writer adds the events of its writes.
type plan struct {
	reconcile.Result
	o   *observation
	cfg planConfig
	now time.Time
	// j is the observed RayJob with the status being planned (the spec is the observed one, read only).
	j       *rayv1.RayJob
	actions []action
	// err ends the reconcile once the actions are written: what the plan could not get past (a read that failed,
	// a batch scheduler that refuses the job).
	err error
	// written are the writer's events, each placed among the plan's at its action's at.
	written []placedEvent
}

type placedEvent struct {
	at int
	ev reconcile.Event
}

// computePlan decides one step of the RayJob's state machine from what observe read, and the writes it takes.
// It is pure: everything it reads is in o and cfg.
func computePlan(o *observation, cfg planConfig) *plan {
	p := newPlan(o, cfg)
	p.err = p.reconcile()
	return p
}

func newPlan(o *observation, cfg planConfig) *plan {
	j := *o.j
	j.Status = *o.j.Status.DeepCopy()
	return &plan{o: o, cfg: cfg, now: o.now, j: &j}
}

// act appends a write to the plan.
func (p *plan) act(a action) {
	a.at = len(p.Events)
	a.before = checkpoint{status: *p.j.Status.DeepCopy(), result: p.Result}
	a.before.result.Events = slices.Clip(a.before.result.Events)
	p.actions = append(p.actions, a)
}

// failed ends the plan at a, whose write failed with err: the plan goes back to where a was planned, and a's onErr,
// when it has one, finishes the step from there. It returns the reconcile's error.
func (p *plan) failed(a *action, err error) error {
	p.j.Status = *a.before.status.DeepCopy()
	p.Result = a.before.result
	if a.onErr != nil {
		return a.onErr(p, err)
	}
	return err
}

// reconcile moves the RayJob through its deployment states, one step per call when a step writes.
func (p *plan) reconcile() error {
	j := p.j
	s := &j.Status
	if errs := Validate(j); len(errs) > 0 {
		if rayv1.IsJobDeploymentTerminal(s.JobDeploymentStatus) {
			return p.finished()
		}
		msg := errs.ToAggregate().Error()
		if s.JobDeploymentStatus != rayv1.JobDeploymentStatusValidationFailed || s.Message != msg {
			p.StatusEventf(corev1.EventTypeWarning, ReasonInvalidSpec, "Validate", "%s", msg)
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
		return p.tearDown(func() {
			failed, succeeded, start := s.Failed, s.Succeeded, s.StartTime
			*s = rayv1.RayJobStatus{Failed: failed, Succeeded: succeeded, StartTime: start, JobDeploymentStatus: rayv1.JobDeploymentStatusNew}
		})
	}
	switch s.JobDeploymentStatus {
	case rayv1.JobDeploymentStatusNew:
		p.initialize()
		return nil
	case rayv1.JobDeploymentStatusInitializing:
		return p.initializing()
	case rayv1.JobDeploymentStatusWaiting:
		return p.waiting()
	case rayv1.JobDeploymentStatusRunning:
		return p.running()
	case rayv1.JobDeploymentStatusRetrying:
		return p.tearDown(func() {
			failed, succeeded, start := s.Failed, s.Succeeded, s.StartTime
			*s = rayv1.RayJobStatus{Failed: failed, Succeeded: succeeded, StartTime: start}
		})
	case rayv1.JobDeploymentStatusSuspending:
		return p.tearDown(func() {
			failed, succeeded, start := s.Failed, s.Succeeded, s.StartTime
			*s = rayv1.RayJobStatus{Failed: failed, Succeeded: succeeded, StartTime: start, JobDeploymentStatus: rayv1.JobDeploymentStatusSuspended}
		})
	case rayv1.JobDeploymentStatusSuspended:
		if !j.Spec.Suspend {
			s.JobDeploymentStatus = rayv1.JobDeploymentStatusNew
			p.Requeue(0)
		}
		return nil
	case rayv1.JobDeploymentStatusComplete, rayv1.JobDeploymentStatusFailed:
		return p.finished()
	}
	return fmt.Errorf("unknown jobDeploymentStatus %q", s.JobDeploymentStatus)
}

// initialize records the names the job will use before anything is created: the submission ID and the cluster
// name. A reconcile that runs again (conflict, restart) finds them in the status and reuses them, which is what
// makes creation and submission happen once.
func (p *plan) initialize() {
	j := p.j
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
		s.JobId = p.o.newName()
	}
	if sel := j.Spec.ClusterSelector[rayv1.LabelCluster]; sel != "" {
		s.RayClusterName = sel
	} else {
		s.RayClusterName = p.o.newName()
	}
	if s.StartTime == nil {
		s.StartTime = ptr.To(metav1.NewTime(p.now))
	}
	s.JobStatus, s.Reason, s.Message, s.EndTime, s.DashboardURL = rayv1.JobStatusNew, "", "", nil, ""
	s.RayJobStatusInfo = rayv1.RayJobStatusInfo{}
	s.JobStatusCheckFailureStartTime = nil
	s.Succeeded = ptr.To(ptr.Deref(s.Succeeded, 0))
	s.Failed = ptr.To(ptr.Deref(s.Failed, 0))
	s.JobDeploymentStatus = rayv1.JobDeploymentStatusInitializing
	p.Requeue(0)
}

// deadlines fails the job when activeDeadlineSeconds or preRunningDeadlineSeconds has passed; it reports whether
// it did.
func (p *plan) deadlines(cluster *rayv1.RayCluster) bool {
	j := p.j
	s := &j.Status
	if s.StartTime == nil {
		return false
	}
	elapsed := p.now.Sub(s.StartTime.Time)
	check := func(seconds *int32, reason rayv1.JobFailedReason, message func(int32) string) bool {
		if seconds == nil {
			return false
		}
		limit := time.Duration(*seconds) * time.Second
		if elapsed < limit {
			p.Requeue(limit - elapsed)
			return false
		}
		p.stopQuietly(cluster)
		p.fail(reason, message(*seconds))
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
		return p.withStartTrouble(cluster, fmt.Sprintf("the Ray job did not start running within preRunningDeadlineSeconds (%ds)", n))
	})
}

// stopQuietly asks Ray to stop the job the RayJob gives up on, so it does not keep running unseen.
func (p *plan) stopQuietly(cluster *rayv1.RayCluster) {
	s := &p.j.Status
	if cluster == nil || s.JobId == "" || rayv1.IsJobTerminal(s.JobStatus) {
		return
	}
	p.act(action{kind: stopJob, cluster: cluster, jobID: s.JobId})
}

// fail ends the attempt as Failed, or Retrying when backoffLimit allows another attempt.
func (p *plan) fail(reason rayv1.JobFailedReason, msg string) {
	s := &p.j.Status
	s.Failed = ptr.To(ptr.Deref(s.Failed, 0) + 1)
	s.Reason, s.Message = reason, msg
	if ptr.Deref(s.Failed, 0) <= ptr.Deref(p.j.Spec.BackoffLimit, 0) {
		s.JobDeploymentStatus = rayv1.JobDeploymentStatusRetrying
		p.Requeue(0)
		return
	}
	s.JobDeploymentStatus = rayv1.JobDeploymentStatusFailed
	s.EndTime = ptr.To(metav1.NewTime(p.now))
	p.Requeue(0)
}

func (p *plan) complete() {
	s := &p.j.Status
	s.Succeeded = ptr.To(ptr.Deref(s.Succeeded, 0) + 1)
	s.JobDeploymentStatus = rayv1.JobDeploymentStatusComplete
	s.EndTime = ptr.To(metav1.NewTime(p.now))
	p.Requeue(0)
}

// suspendRequested moves a started RayJob to Suspending; from there it goes on to Suspended even if suspend is
// set back to false meanwhile (suspension is atomic, as in KubeRay).
func (p *plan) suspendRequested() bool {
	if !p.j.Spec.Suspend {
		return false
	}
	p.j.Status.JobDeploymentStatus = rayv1.JobDeploymentStatusSuspending
	p.Requeue(0)
	return true
}

// ensureCluster finds the job's cluster, creating it from rayClusterSpec when the RayJob makes its own. then is
// what follows a create the API server refused or already had (the rest of the step, which the plan takes as
// if the create went through).
func (p *plan) ensureCluster(then func(p *plan) bool) (*rayv1.RayCluster, error) {
	j := p.j
	cluster, err := p.o.cluster, p.o.clusterErr
	if err != nil || cluster != nil {
		if cluster != nil && len(j.Spec.ClusterSelector) == 0 && !metav1.IsControlledBy(cluster, j) {
			return nil, fmt.Errorf("RayCluster %s exists and does not belong to this RayJob", cluster.Name)
		}
		return cluster, err
	}
	if len(j.Spec.ClusterSelector) > 0 {
		p.Eventf(corev1.EventTypeWarning, ReasonClusterNotFound, "Get", "RayCluster %s/%s set in the clusterSelector is not found. It must be created manually", j.Namespace, j.Status.RayClusterName)
		p.Requeue(p.cfg.pollInterval)
		return nil, nil
	}
	c := ClusterFor(j, j.Status.RayClusterName)
	if submissionMode(j) == rayv1.K8sJobMode {
		// As KubeRay: the cluster itself carries the job's gang only when the submitter is a pod of its own.
		addSchedulerMetadata(p.cfg.batchScheduler, j, c, "")
	}
	p.act(action{kind: createCluster, obj: c, onErr: func(p *plan, err error) error {
		switch {
		case apierrors.IsAlreadyExists(err):
			p.Requeue(time.Second)
			err = nil
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			// The API server refuses the cluster as written: retrying will not help.
			p.fail(rayv1.SubmissionFailed, fmt.Sprintf("spec.rayClusterSpec: the API server refused RayCluster %s: %v", c.Name, err))
			err = nil
		}
		if then(p) {
			return nil
		}
		return err
	}})
	return nil, nil
}

// initializing waits for the cluster to be ready, then starts the submission.
func (p *plan) initializing() error {
	j := p.j
	s := &j.Status
	if p.suspendRequested() {
		return nil
	}
	if err := p.batchSchedule(); err != nil {
		return err
	}
	// Without a cluster to follow the step ends here, unless a deadline fails the job.
	noCluster := func(p *plan) bool { return p.deadlines(nil) }
	cluster, err := p.ensureCluster(noCluster)
	if err != nil || cluster == nil || s.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing {
		if noCluster(p) {
			return nil
		}
		return err
	}
	s.RayClusterStatus = *cluster.Status.DeepCopy()
	if p.deadlines(cluster) {
		return nil
	}
	if cluster.Status.State != rayv1.Ready {
		if failed, err := p.reportStartTrouble(cluster); failed || err != nil {
			return err
		}
		if len(j.Spec.ClusterSelector) > 0 {
			p.Requeue(p.cfg.pollInterval) // not owned: no watch event will come
		}
		return nil
	}
	s.Message = "" // what reportStartTrouble said is over
	s.DashboardURL = DashboardURL(cluster, p.cfg.clusterDomain)
	started := func(p *plan) {
		p.j.Status.JobDeploymentStatus = rayv1.JobDeploymentStatusRunning
		p.Requeue(0)
	}
	switch submissionMode(j) {
	case rayv1.K8sJobMode:
		if err := p.ensureSubmitter(cluster, started); err != nil {
			return err
		}
	case rayv1.InteractiveMode:
		if j.Spec.JobId == "" {
			s.JobDeploymentStatus = rayv1.JobDeploymentStatusWaiting
			return nil
		}
		s.JobId = j.Spec.JobId
	}
	started(p)
	return nil
}

// ensureSubmitter creates the K8sJobMode submitter Job (named after the RayJob, so it exists at most once). then is
// the rest of the step once the API server refused it.
func (p *plan) ensureSubmitter(cluster *rayv1.RayCluster, then func(p *plan)) error {
	existing, err := p.ownedSubmitter()
	if err != nil || existing != nil {
		return err
	}
	job := SubmitterJob(p.j, cluster, p.o.inClusterDashboard)
	addSchedulerMetadata(p.cfg.batchScheduler, p.j, &job.Spec.Template, clusterbuild.SubmitterGroupName)
	p.act(action{kind: createSubmitter, obj: job, onErr: func(p *plan, err error) error {
		if !apierrors.IsInvalid(err) {
			return err
		}
		p.fail(rayv1.SubmissionFailed, fmt.Sprintf("spec.submitterPodTemplate: the API server refused submitter Job %s: %v", job.Name, err))
		then(p)
		return nil
	}})
	return nil
}

// ownedSubmitter is the observed submitter Job; one the RayJob does not own is an error.
func (p *plan) ownedSubmitter() (*batchv1.Job, error) {
	job, err := p.o.submitter, p.o.submitterErr
	if err != nil || job == nil {
		return nil, err
	}
	if !metav1.IsControlledBy(job, p.j) {
		return nil, fmt.Errorf("a Job named %s exists that this RayJob does not own", job.Name)
	}
	return job, nil
}

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
	if gaveUp, err := p.submitterFinishedTimeout(cluster); gaveUp || err != nil {
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
func (p *plan) submitterFinishedTimeout(cluster *rayv1.RayCluster) (bool, error) {
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
	wait, giveUp := SubmitterGrace(s.JobStatus, finishedAt, p.now, p.cfg.submitterFinishedTimeout)
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
			return p.ensureSubmitter(cluster, func(*plan) {})
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

// statusCheckFailed records that the job's status could not be read, and fails the job once that has lasted
// longer than StatusCheckTimeout.
func (p *plan) statusCheckFailed(err error) {
	s := &p.j.Status
	if s.JobStatusCheckFailureStartTime == nil {
		s.JobStatusCheckFailureStartTime = ptr.To(metav1.NewTime(p.now))
		p.StatusEventf(corev1.EventTypeWarning, ReasonStatusCheckFailed, "GetJob", "cannot read Ray job %s: %v", s.JobId, err)
	}
	since := p.now.Sub(s.JobStatusCheckFailureStartTime.Time)
	if since >= p.cfg.statusCheckTimeout {
		p.fail(rayv1.JobStatusCheckTimeoutExceeded, fmt.Sprintf("could not read the status of Ray job %s for %s: %v", s.JobId, p.cfg.statusCheckTimeout, err))
		return
	}
	p.Requeue(min(p.cfg.statusCheckTimeout-since, p.cfg.pollInterval))
}

// tearDown deletes the job's cluster (when the RayJob made it) and submitter; once both are gone, reset sets the
// status of the next state.
func (p *plan) tearDown(reset func()) error {
	j := p.j
	gone := true
	if name := j.Status.RayClusterName; name != "" && len(j.Spec.ClusterSelector) == 0 {
		if p.o.clusterErr != nil {
			return p.o.clusterErr
		}
		var c client.Object
		if p.o.cluster != nil {
			c = p.o.cluster
		}
		ok := p.deleteOwned(c, deleteCluster)
		if ok {
			if p.o.podsErr != nil {
				return p.o.podsErr
			}
			// "Suspended" means the pods (which Kueue accounts for) are gone, not only the RayCluster object.
			ok = len(p.o.pods) == 0
		}
		gone = gone && ok
	}
	if p.o.submitterErr != nil {
		return p.o.submitterErr
	}
	var sub client.Object
	if p.o.submitter != nil {
		sub = p.o.submitter
	}
	gone = p.deleteOwned(sub, deleteSubmitter) && gone
	if !gone {
		p.Requeue(time.Second)
		return nil
	}
	// As in KubeRay: the batch scheduler's queue gets back what the job held before the status says it let go.
	if err := p.batchSchedulerCleanup(false); err != nil {
		return err
	}
	reset()
	p.Requeue(0)
	return nil
}

// deleteOwned deletes obj (nil: it does not exist) when the RayJob controls it. It reports whether obj is gone.
func (p *plan) deleteOwned(obj client.Object, kind actionKind) bool {
	if obj == nil || !metav1.IsControlledBy(obj, p.j) {
		return true
	}
	if obj.GetDeletionTimestamp() == nil {
		p.act(action{kind: kind, obj: obj})
	}
	return false
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
	have, err := p.o.headService, p.o.headServiceErr
	switch {
	case err != nil:
		return err
	case have == nil:
		p.act(action{kind: createHeadService, obj: want})
		return nil
	case have.Spec.Selector[rayv1.LabelCluster] == cluster.Name:
		return nil
	}
	// A new cluster (a retry): point the Service at it; the cluster IP cannot change.
	want.Spec.ClusterIP, want.Spec.ClusterIPs = have.Spec.ClusterIP, have.Spec.ClusterIPs
	updated := have.DeepCopy()
	updated.Spec = want.Spec
	p.act(action{kind: updateHeadService, obj: updated})
	return nil
}

// reportStartTrouble writes why the cluster's pods cannot start in the message of an Initializing job, asks for an
// event for each cause the message did not name yet, and fails the job when it asked for it and a cause is
// permanent. It reports whether it failed the job.
func (p *plan) reportStartTrouble(cluster *rayv1.RayCluster) (bool, error) {
	s := &p.j.Status
	causes, err := p.startTroubles(cluster)
	if err != nil {
		return false, err
	}
	for _, c := range podtrouble.New(s.Message, causes) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: c.Pod}}
		p.Events = append(p.Events, reconcile.Event{Type: corev1.EventTypeWarning, Reason: c.Reason, Action: "Start",
			Note: fmt.Sprintf("RayCluster %s: %s", cluster.Name, c.Line()), StatusChange: true, Related: pod})
	}
	s.Message = podtrouble.Summary(causes)
	if p.j.Annotations[AnnotationFailOnPermanentStartError] != "true" {
		return false, nil
	}
	for _, c := range causes {
		permanent, wait := c.Permanent(p.now, p.cfg.missingConfigGrace)
		if permanent {
			p.fail(PermanentStartError, fmt.Sprintf("%s (%s is \"true\": a permanent start error fails the job)", c.Line(), AnnotationFailOnPermanentStartError))
			return true, nil
		}
		if wait > 0 {
			p.Requeue(wait) // no pod event comes when the grace ends
		}
	}
	return false, nil
}

// startTroubles is why the observed cluster's pods cannot start.
func (p *plan) startTroubles(cluster *rayv1.RayCluster) ([]podtrouble.Cause, error) {
	if cluster == nil {
		return nil, nil
	}
	if p.o.podsErr != nil {
		return nil, fmt.Errorf("list the pods of RayCluster %s: %w", cluster.Name, p.o.podsErr)
	}
	return podtrouble.Pods(p.o.pods), nil
}

// withStartTrouble adds why the cluster's pods cannot start to a deadline's message.
func (p *plan) withStartTrouble(cluster *rayv1.RayCluster, msg string) string {
	causes, err := p.startTroubles(cluster)
	if err != nil || len(causes) == 0 {
		return msg
	}
	return strings.TrimSuffix(msg, ".") + "; the cluster's pods cannot start: " + podtrouble.Summary(causes)
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

// finished applies the cleanups that are due and wakes up for the next one.
func (p *plan) finished() error {
	j := p.j
	if j.Status.EndTime == nil {
		j.Status.EndTime = ptr.To(metav1.NewTime(p.now))
	}
	cluster, err := p.o.cluster, p.o.clusterErr
	if err != nil {
		return err
	}
	if cluster != nil {
		j.Status.RayClusterStatus = *cluster.Status.DeepCopy()
	}
	// As in KubeRay, a failed cleanup of the batch scheduler's resources is reported and does not hold the rest.
	_ = p.batchSchedulerCleanup(true)
	for _, c := range cleanups(j, p.cfg.deleteSelf) {
		if wait := c.due.Sub(p.now); wait > 0 {
			p.Requeue(wait)
			continue
		}
		p.apply(c.policy, cluster)
		if c.policy == rayv1.DeleteSelf {
			return nil
		}
	}
	return nil
}

// apply carries out one deletion policy; each is idempotent.
func (p *plan) apply(policy rayv1.DeletionPolicyType, cluster *rayv1.RayCluster) {
	j := p.j
	owned := cluster != nil && metav1.IsControlledBy(cluster, j)
	switch policy {
	case rayv1.DeleteNone:
	case rayv1.DeleteCluster:
		if owned {
			p.deleteOwned(cluster, deleteCluster)
		}
	case rayv1.DeleteWorkers:
		if !owned || cluster.DeletionTimestamp != nil {
			return
		}
		suspended := cluster.DeepCopy()
		changed := false
		for i := range suspended.Spec.WorkerGroupSpecs {
			if g := &suspended.Spec.WorkerGroupSpecs[i]; !ptr.Deref(g.Suspend, false) {
				g.Suspend = ptr.To(true)
				changed = true
			}
		}
		if changed {
			p.act(action{kind: suspendWorkers, obj: suspended, base: cluster})
		}
	case rayv1.DeleteSelf:
		p.act(action{kind: deleteSelf, obj: p.o.j})
	}
}
