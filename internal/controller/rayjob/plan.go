package rayjob

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/ray"
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
	// resumeIdleCluster clears spec.suspend of obj, a selected cluster suspended for idleness (idle.Resume).
	resumeIdleCluster
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
	// unread says createHeadService creates a Service that was not read first (observation.headServiceUnread).
	unread bool

	// at is how many of the plan's events were asked before the action: the writer's events about it go there, so
	// the events keep the order of the step that asked for them.
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
// status events and the requeue (see internal/controller/shared/reconcile); the writer adds the events of its writes.
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
