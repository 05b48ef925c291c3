package rayjob

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/idle"
	"github.com/manta-dev/manta/internal/controller/shared/podtrouble"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// The plan's clock and the names it draws.
var (
	planNow   = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	planStart = metav1.NewTime(planNow.Add(-10 * time.Minute))
)

const (
	planCluster = "j-rc"
	planJobID   = "j-id"
)

func planCfg() planConfig {
	return planConfig{
		statusCheckTimeout: DefaultStatusCheckTimeout, transitionGracePeriod: DefaultTransitionGracePeriod,
		submitterFinishedTimeout: DefaultSubmitterFinishedTimeout, pollInterval: DefaultPollInterval,
		missingConfigGrace: DefaultMissingConfigGrace,
	}
}

// planJob is a valid RayJob in mode, with the UID its children's owner references name.
func planJob(mode rayv1.JobSubmissionMode, status rayv1.RayJobStatus, mutate ...func(*rayv1.RayJob)) *rayv1.RayJob {
	j := testutil.MakeRayJob("ns", "j").Mode(mode).Obj()
	j.UID = "uid-j"
	j.Status = status
	for _, m := range mutate {
		m(j)
	}
	return j
}

// startedStatus is the status of a job past New in the deployment state d, on cluster j-rc with Ray job j-id.
func startedStatus(d rayv1.JobDeploymentStatus, js rayv1.JobStatus) rayv1.RayJobStatus {
	return rayv1.RayJobStatus{
		JobDeploymentStatus: d, JobStatus: js, JobId: planJobID, RayClusterName: planCluster,
		StartTime: ptr.To(planStart), Failed: ptr.To[int32](0), Succeeded: ptr.To[int32](0),
	}
}

// ownedCluster is the job's cluster in state st, as the RayCluster controller reports it.
func ownedCluster(j *rayv1.RayJob, st rayv1.ClusterState) *rayv1.RayCluster {
	c := ClusterFor(j, planCluster)
	c.UID = "uid-rc"
	c.Status.State = st
	c.Status.ReadyWorkerReplicas = 1
	return c
}

// submitter is the job's K8sJobMode submitter Job, with conditions (type, when).
func submitter(j *rayv1.RayJob, conds ...batchv1.JobCondition) *batchv1.Job {
	s := SubmitterJob(j, ClusterFor(j, planCluster), "http://dash")
	s.UID = "uid-sub"
	s.Status.Conditions = conds
	return s
}

func jobCond(t batchv1.JobConditionType, at time.Time) batchv1.JobCondition {
	return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at), Reason: "BackoffLimitExceeded", Message: "too many"}
}

// headSvc is <job>-head-svc as an earlier reconcile made it for cluster c.
func headSvc(j *rayv1.RayJob, c *rayv1.RayCluster) *corev1.Service {
	s := clusterbuild.OwnerHeadService(c, clusterbuild.KindRayJob, j.Name)
	s.Spec.ClusterIP = "10.0.0.7"
	return s
}

func rayJob(status rayv1.JobStatus, msg string) *ray.JobInfo {
	return &ray.JobInfo{Status: ray.JobStatus(status), Message: msg, StartTime: planStart.UnixMilli()}
}

// observed is what observe would read of j's world: obs fills in the rest.
func observed(j *rayv1.RayJob, obs ...func(o *observation)) *observation {
	o := &observation{j: j, now: planNow, newName: func() string { return "j-new" }}
	for _, f := range obs {
		f(o)
	}
	return o
}

// actionNames reads the plan's actions as "<what> <object>".
func actionNames(p *plan) []string {
	var out []string
	for _, a := range p.actions {
		var s string
		switch a.kind {
		case syncPodGroup:
			s = "sync PodGroup " + a.podGroup.Name
			if a.cleanup {
				s += fmt.Sprintf(" (cleanup, best effort %v)", a.bestEffort)
			}
		case createCluster:
			s = "create RayCluster " + a.obj.GetName()
		case createSubmitter:
			s = "create Job " + a.obj.GetName()
		case createHeadService:
			s = "create Service " + a.obj.GetName()
		case updateHeadService:
			s = "update Service " + a.obj.GetName()
		case submitJob:
			s = "submit " + a.jobID + " to " + a.cluster.Name
		case stopJob:
			s = "stop " + a.jobID + " on " + a.cluster.Name
		case deleteCluster:
			s = "delete RayCluster " + a.obj.GetName()
		case deleteSubmitter:
			s = "delete Job " + a.obj.GetName()
		case suspendWorkers:
			s = "suspend workers of " + a.obj.GetName()
		case deleteSelf:
			s = "delete RayJob " + a.obj.GetName()
		case resumeIdleCluster:
			s = "resume RayCluster " + a.obj.GetName()
		}
		out = append(out, s)
	}
	return out
}

func eventReasons(evs []reconcile.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

type planCase struct {
	name string
	job  *rayv1.RayJob
	obs  func(o *observation)
	cfg  func(c *planConfig)
	// want changes the job's status into the status the plan must leave.
	want    func(s *rayv1.RayJobStatus)
	actions []string
	requeue time.Duration
	events  []string
	err     string
}

func runPlan(t *testing.T, tc planCase) *plan {
	t.Helper()
	cfg := planCfg()
	if tc.cfg != nil {
		tc.cfg(&cfg)
	}
	obs := []func(*observation){}
	if tc.obs != nil {
		obs = append(obs, tc.obs)
	}
	in := tc.job.DeepCopy()
	p := computePlan(observed(tc.job, obs...), cfg)
	if diff := cmp.Diff(in, tc.job); diff != "" {
		t.Errorf("the plan changed the observed RayJob (-before +after):\n%s", diff)
	}
	want := tc.job.Status.DeepCopy()
	if tc.want != nil {
		tc.want(want)
	}
	if diff := cmp.Diff(*want, p.j.Status); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tc.actions, actionNames(p)); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	if got := p.RequeueAfter(); got != tc.requeue {
		t.Errorf("requeue after %v, want %v", got, tc.requeue)
	}
	if diff := cmp.Diff(tc.events, eventReasons(p.Events)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if got := fmt.Sprint(p.err); (tc.err == "" && p.err != nil) || (tc.err != "" && !strings.Contains(got, tc.err)) {
		t.Errorf("error %v, want %q", p.err, tc.err)
	}
	return p
}

func testPlan(t *testing.T, cases []planCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runPlan(t, tc) })
	}
}

func failedAt(s *rayv1.RayJobStatus, reason rayv1.JobFailedReason, msg string) {
	s.JobDeploymentStatus = rayv1.JobDeploymentStatusFailed
	s.Reason, s.Message = reason, msg
	s.Failed = ptr.To(ptr.Deref(s.Failed, 0) + 1)
	s.EndTime = ptr.To(metav1.NewTime(planNow))
}

// New: the names are drawn and recorded before anything is made; a suspended job waits.
func TestPlanNew(t *testing.T) {
	testPlan(t, []planCase{{
		name: "new records the names and the start time",
		job:  planJob(rayv1.HTTPMode, rayv1.RayJobStatus{}),
		want: func(s *rayv1.RayJobStatus) {
			*s = rayv1.RayJobStatus{JobDeploymentStatus: rayv1.JobDeploymentStatusInitializing, JobStatus: rayv1.JobStatusNew,
				JobId: "j-new", RayClusterName: "j-new", StartTime: ptr.To(metav1.NewTime(planNow)), Failed: ptr.To[int32](0), Succeeded: ptr.To[int32](0)}
		},
		requeue: reconcile.MinRequeue,
	}, {
		name: "spec.jobId and a selected cluster are used as they are",
		job: planJob(rayv1.HTTPMode, rayv1.RayJobStatus{}, func(j *rayv1.RayJob) {
			j.Spec.JobId, j.Spec.RayClusterSpec, j.Spec.ClusterSelector = "mine", nil, map[string]string{rayv1.LabelCluster: "shared"}
		}),
		want: func(s *rayv1.RayJobStatus) {
			*s = rayv1.RayJobStatus{JobDeploymentStatus: rayv1.JobDeploymentStatusInitializing, JobStatus: rayv1.JobStatusNew,
				JobId: "mine", RayClusterName: "shared", StartTime: ptr.To(metav1.NewTime(planNow)), Failed: ptr.To[int32](0), Succeeded: ptr.To[int32](0)}
		},
		requeue: reconcile.MinRequeue,
	}, {
		name: "suspended at creation",
		job:  planJob(rayv1.HTTPMode, rayv1.RayJobStatus{}, func(j *rayv1.RayJob) { j.Spec.Suspend, j.Spec.ShutdownAfterJobFinishes = true, true }),
		want: func(s *rayv1.RayJobStatus) { s.JobDeploymentStatus = rayv1.JobDeploymentStatusSuspended },
	}, {
		name:    "unsuspended",
		job:     planJob(rayv1.HTTPMode, rayv1.RayJobStatus{JobDeploymentStatus: rayv1.JobDeploymentStatusSuspended}),
		want:    func(s *rayv1.RayJobStatus) { s.JobDeploymentStatus = rayv1.JobDeploymentStatusNew },
		requeue: reconcile.MinRequeue,
	}, {
		name: "an invalid spec",
		job:  planJob(rayv1.HTTPMode, rayv1.RayJobStatus{}, func(j *rayv1.RayJob) { j.Spec.Entrypoint = "" }),
		want: func(s *rayv1.RayJobStatus) {
			invalid(s, "spec.entrypoint: Required value: HTTPMode needs an entrypoint")
		},
		events: []string{ReasonInvalidSpec},
	}})
}

func invalid(s *rayv1.RayJobStatus, msg string) {
	s.JobDeploymentStatus, s.Reason, s.Message = rayv1.JobDeploymentStatusValidationFailed, rayv1.ValidationFailed, msg
}

// Initializing: the cluster is made (or selected), then the job waits for it to be ready and starts the submission
// its mode asks for.
func TestPlanInitializing(t *testing.T) {
	initializing := startedStatus(rayv1.JobDeploymentStatusInitializing, rayv1.JobStatusNew)
	k8s := planJob(rayv1.K8sJobMode, initializing)
	mirror := func(c *rayv1.RayCluster) func(s *rayv1.RayJobStatus) {
		return func(s *rayv1.RayJobStatus) { s.RayClusterStatus = c.Status }
	}
	notReady := ownedCluster(k8s, "")
	ready := ownedCluster(k8s, rayv1.Ready)
	running := func(c *rayv1.RayCluster) func(s *rayv1.RayJobStatus) {
		return func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = c.Status
			s.JobDeploymentStatus = rayv1.JobDeploymentStatusRunning
			s.DashboardURL = DashboardURL(c, "")
		}
	}
	pulling := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: planCluster + "-head",
		Labels: map[string]string{rayv1.LabelCluster: planCluster, rayv1.LabelNodeType: rayv1.NodeTypeHead}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head", Image: "ray:nope"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "ray-head", Image: "ray:nope",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not found"}}}}}}
	testPlan(t, []planCase{{
		name:    "no cluster yet: create it",
		job:     k8s,
		actions: []string{"create RayCluster " + planCluster},
	}, {
		name:    "volcano: the PodGroup first, then the cluster",
		job:     k8s,
		cfg:     func(c *planConfig) { c.batchScheduler = clusterbuild.SchedulerVolcano },
		actions: []string{"sync PodGroup ray-j-pg", "create RayCluster " + planCluster},
	}, {
		name:   "kai-scheduler refuses a K8sJobMode job",
		job:    k8s,
		cfg:    func(c *planConfig) { c.batchScheduler = clusterbuild.SchedulerKai },
		events: []string{ReasonBatchSchedulingRefused},
		err:    "spec.submissionMode",
	}, {
		name: "a cluster of that name the job does not own",
		job:  k8s,
		obs: func(o *observation) {
			o.cluster = ownedCluster(k8s, rayv1.Ready)
			o.cluster.OwnerReferences = nil
		},
		err: "does not belong to this RayJob",
	}, {
		name: "a selected cluster that does not exist",
		job: planJob(rayv1.HTTPMode, initializing, func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec, j.Spec.ClusterSelector = nil, map[string]string{rayv1.LabelCluster: planCluster}
		}),
		events:  []string{ReasonClusterNotFound},
		requeue: DefaultPollInterval,
	}, {
		name: "a selected cluster not ready: poll it, no watch event comes for a cluster the job does not own",
		job: planJob(rayv1.HTTPMode, initializing, func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec, j.Spec.ClusterSelector = nil, map[string]string{rayv1.LabelCluster: planCluster}
		}),
		obs: func(o *observation) {
			o.cluster = notReady.DeepCopy()
			o.cluster.OwnerReferences = nil
		},
		want:    mirror(notReady),
		requeue: DefaultPollInterval,
	}, {
		name: "a selected cluster suspended for idleness: resume it, and poll it",
		job: planJob(rayv1.HTTPMode, initializing, func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec, j.Spec.ClusterSelector = nil, map[string]string{rayv1.LabelCluster: planCluster}
		}),
		obs: func(o *observation) {
			o.cluster = notReady.DeepCopy()
			o.cluster.OwnerReferences = nil
			o.cluster.Spec.Suspend = ptr.To(true)
			o.cluster.Annotations = map[string]string{idle.AnnotationIdleSuspendedAt: "2026-01-01T00:00:00Z"}
		},
		want:    mirror(notReady),
		actions: []string{"resume RayCluster " + planCluster},
		requeue: DefaultPollInterval,
	}, {
		name: "a selected cluster suspended by hand is not resumed",
		job: planJob(rayv1.HTTPMode, initializing, func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec, j.Spec.ClusterSelector = nil, map[string]string{rayv1.LabelCluster: planCluster}
		}),
		obs: func(o *observation) {
			o.cluster = notReady.DeepCopy()
			o.cluster.OwnerReferences = nil
			o.cluster.Spec.Suspend = ptr.To(true)
		},
		want:    mirror(notReady),
		requeue: DefaultPollInterval,
	}, {
		name: "the cluster is not ready: its status mirrored, no write",
		job:  k8s,
		obs:  func(o *observation) { o.cluster = notReady },
		want: mirror(notReady),
	}, {
		name: "its head cannot pull its image: the message and an event say so",
		job:  k8s,
		obs:  func(o *observation) { o.cluster, o.pods = notReady, []corev1.Pod{pulling} },
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = notReady.Status
			s.Message = `pod j-rc-head: ErrImagePull: container ray-head cannot pull image "ray:nope": not found`
		},
		events: []string{podtrouble.ReasonImagePull},
	}, {
		name: "opted in, a permanent start error fails the job",
		job: planJob(rayv1.K8sJobMode, initializing, func(j *rayv1.RayJob) {
			j.Annotations = map[string]string{AnnotationFailOnPermanentStartError: "true"}
		}),
		obs: func(o *observation) {
			o.cluster, o.pods = notReady, []corev1.Pod{*pulling.DeepCopy()}
			o.pods[0].Status.ContainerStatuses[0].State.Waiting.Message = "manifest unknown"
		},
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = notReady.Status
			failedAt(s, PermanentStartError, `pod j-rc-head: ErrImagePull: container ray-head cannot pull image "ray:nope": manifest unknown`+
				` (manta.dev/fail-on-permanent-start-error is "true": a permanent start error fails the job)`)
		},
		events:  []string{podtrouble.ReasonImagePull},
		requeue: reconcile.MinRequeue,
	}, {
		name:    "ready, K8sJobMode: the submitter Job, and Running",
		job:     k8s,
		obs:     func(o *observation) { o.cluster, o.inClusterDashboard = ready, "http://dash" },
		want:    running(ready),
		actions: []string{"create Job j"},
		requeue: reconcile.MinRequeue,
	}, {
		name:    "ready, K8sJobMode, the submitter already there: Running",
		job:     k8s,
		obs:     func(o *observation) { o.cluster, o.submitter = ready, submitter(k8s) },
		want:    running(ready),
		requeue: reconcile.MinRequeue,
	}, {
		name: "ready, a Job of the submitter's name the job does not own",
		job:  k8s,
		obs: func(o *observation) {
			o.cluster, o.submitter = ready, submitter(k8s)
			o.submitter.OwnerReferences = nil
		},
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus, s.DashboardURL = ready.Status, DashboardURL(ready, "")
		},
		err: "that this RayJob does not own",
	}, {
		name:    "ready, HTTPMode: Running, the submission is the next step's",
		job:     planJob(rayv1.HTTPMode, initializing),
		obs:     func(o *observation) { o.cluster = ready },
		want:    running(ready),
		requeue: reconcile.MinRequeue,
	}, {
		name:    "ready, SidecarMode: Running",
		job:     planJob(rayv1.SidecarMode, initializing),
		obs:     func(o *observation) { o.cluster = ready },
		want:    running(ready),
		requeue: reconcile.MinRequeue,
	}, {
		name: "ready, InteractiveMode without spec.jobId: Waiting",
		job:  planJob(rayv1.InteractiveMode, initializing),
		obs:  func(o *observation) { o.cluster = ready },
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus, s.DashboardURL = ready.Status, DashboardURL(ready, "")
			s.JobDeploymentStatus = rayv1.JobDeploymentStatusWaiting
		},
	}, {
		name:    "suspend requested",
		job:     planJob(rayv1.K8sJobMode, initializing, func(j *rayv1.RayJob) { j.Spec.Suspend, j.Spec.ShutdownAfterJobFinishes = true, true }),
		want:    func(s *rayv1.RayJobStatus) { s.JobDeploymentStatus = rayv1.JobDeploymentStatusSuspending },
		requeue: reconcile.MinRequeue,
	}, {
		name: "activeDeadlineSeconds passed: the Ray job is stopped and the RayJob fails",
		job:  planJob(rayv1.K8sJobMode, initializing, func(j *rayv1.RayJob) { j.Spec.ActiveDeadlineSeconds = ptr.To[int32](60) }),
		obs:  func(o *observation) { o.cluster = notReady },
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = notReady.Status
			failedAt(s, rayv1.DeadlineExceeded, fmt.Sprintf("The RayJob has passed the activeDeadlineSeconds. StartTime: %s. ActiveDeadlineSeconds: 60", planStart.Local().Truncate(time.Second)))
		},
		actions: []string{"stop j-id on j-rc"},
		requeue: reconcile.MinRequeue,
	}, {
		name: "activeDeadlineSeconds ahead: look again when it passes",
		job:  planJob(rayv1.K8sJobMode, initializing, func(j *rayv1.RayJob) { j.Spec.ActiveDeadlineSeconds = ptr.To[int32](15 * 60) }),
		obs:  func(o *observation) { o.cluster = notReady },
		want: mirror(notReady),
		// 15 minutes from a start 10 minutes ago.
		requeue: 5 * time.Minute,
	}, {
		name: "preRunningDeadlineSeconds passed, backoffLimit left: Retrying, with the pods' trouble in the message",
		job: planJob(rayv1.K8sJobMode, initializing, func(j *rayv1.RayJob) {
			j.Spec.PreRunningDeadlineSeconds, j.Spec.BackoffLimit = ptr.To[int32](60), ptr.To[int32](1)
		}),
		obs: func(o *observation) { o.cluster, o.pods = notReady, []corev1.Pod{pulling} },
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = notReady.Status
			s.JobDeploymentStatus, s.Reason, s.Failed = rayv1.JobDeploymentStatusRetrying, rayv1.PreRunningDeadlineExceeded, ptr.To[int32](1)
			s.Message = `the Ray job did not start running within preRunningDeadlineSeconds (60s); the cluster's pods cannot start: ` +
				`pod j-rc-head: ErrImagePull: container ray-head cannot pull image "ray:nope": not found`
		},
		actions: []string{"stop j-id on j-rc"},
		requeue: reconcile.MinRequeue,
	}, {
		name: "a failed read of the cluster",
		job:  k8s,
		obs:  func(o *observation) { o.clusterErr = errors.New("cache down") },
		err:  "cache down",
	}})
}

// Running: the Ray job's status from the dashboard decides; HTTPMode submits; the submitter's fate and the
// deadlines can end the attempt.
func TestPlanRunning(t *testing.T) {
	runningSt := startedStatus(rayv1.JobDeploymentStatusRunning, rayv1.JobStatusRunning)
	k8s := planJob(rayv1.K8sJobMode, runningSt)
	c := ownedCluster(k8s, rayv1.Ready)
	// seen is what observe reads of a running job whose head Service exists.
	seen := func(j *rayv1.RayJob, info *ray.JobInfo, more ...func(o *observation)) func(o *observation) {
		return func(o *observation) {
			o.cluster, o.headService, o.jobInfo = c, headSvc(j, c), info
			if info == nil {
				o.jobErr = fmt.Errorf("job %s: %w", planJobID, ray.ErrNotFound)
			}
			for _, m := range more {
				m(o)
			}
		}
	}
	withSub := func(j *rayv1.RayJob, conds ...batchv1.JobCondition) func(o *observation) {
		return func(o *observation) { o.submitter = submitter(j, conds...) }
	}
	polled := func(js rayv1.JobStatus, msg string) func(s *rayv1.RayJobStatus) {
		return func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = c.Status
			s.JobStatus, s.Message = js, msg
			s.RayJobStatusInfo = rayv1.RayJobStatusInfo{StartTime: ptr.To(metav1.NewTime(time.UnixMilli(planStart.UnixMilli())))}
		}
	}
	then := func(fs ...func(s *rayv1.RayJobStatus)) func(s *rayv1.RayJobStatus) {
		return func(s *rayv1.RayJobStatus) {
			for _, f := range fs {
				f(s)
			}
		}
	}
	httpNew := planJob(rayv1.HTTPMode, startedStatus(rayv1.JobDeploymentStatusRunning, rayv1.JobStatusNew))
	sidecar := planJob(rayv1.SidecarMode, runningSt)
	head := func(exit int32, finished time.Time) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: planCluster + "-head",
			Labels: map[string]string{rayv1.LabelCluster: planCluster, rayv1.LabelNodeType: rayv1.NodeTypeHead}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: SubmitterContainerName,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: "Error", FinishedAt: metav1.NewTime(finished)}}}}}}
	}
	testPlan(t, []planCase{{
		name:    "still running: poll again",
		job:     k8s,
		obs:     seen(k8s, rayJob(rayv1.JobStatusRunning, "working"), withSub(k8s)),
		want:    polled(rayv1.JobStatusRunning, "working"),
		requeue: DefaultPollInterval,
	}, {
		name:    "no head Service yet: create it",
		job:     k8s,
		obs:     seen(k8s, rayJob(rayv1.JobStatusRunning, ""), withSub(k8s), func(o *observation) { o.headService = nil }),
		want:    polled(rayv1.JobStatusRunning, ""),
		actions: []string{"create Service j-head-svc"},
		requeue: DefaultPollInterval,
	}, {
		name: "on a selected cluster no head Service of the job's own is made",
		job: planJob(rayv1.HTTPMode, runningSt, func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec, j.Spec.ClusterSelector = nil, map[string]string{rayv1.LabelCluster: planCluster}
		}),
		obs:     seen(k8s, rayJob(rayv1.JobStatusRunning, ""), func(o *observation) { o.headService = nil }),
		want:    polled(rayv1.JobStatusRunning, ""),
		requeue: DefaultPollInterval,
	}, {
		name: "the head Service points at an earlier cluster: point it at this one",
		job:  k8s,
		obs: seen(k8s, rayJob(rayv1.JobStatusRunning, ""), withSub(k8s), func(o *observation) {
			o.headService.Spec.Selector = map[string]string{rayv1.LabelCluster: "j-old"}
		}),
		want:    polled(rayv1.JobStatusRunning, ""),
		actions: []string{"update Service j-head-svc"},
		requeue: DefaultPollInterval,
	}, {
		name:    "succeeded, the submitter done: Complete",
		job:     k8s,
		obs:     seen(k8s, rayJob(rayv1.JobStatusSucceeded, "done"), withSub(k8s, jobCond(batchv1.JobComplete, planNow))),
		want:    then(polled(rayv1.JobStatusSucceeded, "done"), completeAt),
		requeue: reconcile.MinRequeue,
	}, {
		name: "succeeded, the submitter still printing logs: wait for it, within the grace period",
		job:  k8s,
		obs: seen(k8s, &ray.JobInfo{Status: ray.JobStatus(rayv1.JobStatusSucceeded), StartTime: planStart.UnixMilli(), EndTime: planNow.Add(-time.Second).UnixMilli()},
			withSub(k8s)),
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus, s.JobStatus = c.Status, rayv1.JobStatusSucceeded
			s.RayJobStatusInfo = rayv1.RayJobStatusInfo{StartTime: ptr.To(metav1.NewTime(time.UnixMilli(planStart.UnixMilli()))),
				EndTime: ptr.To(metav1.NewTime(time.UnixMilli(planNow.Add(-time.Second).UnixMilli())))}
		},
		requeue: DefaultPollInterval,
	}, {
		name: "failed, backoffLimit left: Retrying",
		job:  planJob(rayv1.HTTPMode, runningSt, func(j *rayv1.RayJob) { j.Spec.BackoffLimit = ptr.To[int32](2) }),
		obs:  seen(k8s, rayJob(rayv1.JobStatusFailed, "")),
		want: then(polled(rayv1.JobStatusFailed, ""), func(s *rayv1.RayJobStatus) {
			s.JobDeploymentStatus, s.Reason, s.Message, s.Failed = rayv1.JobDeploymentStatusRetrying, rayv1.AppFailed, "Ray job j-id is FAILED", ptr.To[int32](1)
		}),
		requeue: reconcile.MinRequeue,
	}, {
		name: "failed, no retry left: Failed",
		job:  planJob(rayv1.HTTPMode, runningSt),
		obs:  seen(k8s, rayJob(rayv1.JobStatusFailed, "boom")),
		want: then(polled(rayv1.JobStatusFailed, "boom"), func(s *rayv1.RayJobStatus) {
			failedAt(s, rayv1.AppFailed, "boom")
		}),
		requeue: reconcile.MinRequeue,
	}, {
		name:    "HTTPMode, Ray does not know the job: submit it",
		job:     httpNew,
		obs:     seen(httpNew, nil),
		want:    func(s *rayv1.RayJobStatus) { s.RayClusterStatus = c.Status },
		actions: []string{"submit j-id to j-rc"},
		requeue: time.Second,
	}, {
		name: "Ray lost a job it knew: a status check failure, never a second submission",
		job:  planJob(rayv1.HTTPMode, runningSt),
		obs:  seen(k8s, nil),
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = c.Status
			s.JobStatusCheckFailureStartTime = ptr.To(metav1.NewTime(planNow))
		},
		events:  []string{ReasonStatusCheckFailed},
		requeue: DefaultPollInterval,
	}, {
		name: "InteractiveMode, Ray does not know the job yet: say how to submit it",
		job:  planJob(rayv1.InteractiveMode, startedStatus(rayv1.JobDeploymentStatusRunning, rayv1.JobStatusNew)),
		obs:  seen(k8s, nil),
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = c.Status
			s.Message = "Ray does not know job j-id yet; submit it with that submission ID"
		},
		requeue: DefaultPollInterval,
	}, {
		name: "the dashboard does not answer: the first failure is recorded",
		job:  k8s,
		obs:  seen(k8s, nil, withSub(k8s), func(o *observation) { o.jobErr = ray.ErrUnavailable }),
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = c.Status
			s.JobStatusCheckFailureStartTime = ptr.To(metav1.NewTime(planNow))
		},
		events:  []string{ReasonStatusCheckFailed},
		requeue: DefaultPollInterval,
	}, {
		name: "the dashboard has not answered for longer than the status check timeout: Failed",
		job: planJob(rayv1.K8sJobMode, runningSt, func(j *rayv1.RayJob) {
			j.Status.JobStatusCheckFailureStartTime = ptr.To(metav1.NewTime(planNow.Add(-DefaultStatusCheckTimeout)))
		}),
		obs: seen(k8s, nil, withSub(k8s), func(o *observation) { o.jobErr = ray.ErrUnavailable }),
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = c.Status
			failedAt(s, rayv1.JobStatusCheckTimeoutExceeded, "could not read the status of Ray job j-id for 5m0s: "+ray.ErrUnavailable.Error())
		},
		requeue: reconcile.MinRequeue,
	}, {
		name: "the cluster is gone",
		job:  k8s,
		want: func(s *rayv1.RayJobStatus) { s.JobStatusCheckFailureStartTime = ptr.To(metav1.NewTime(planNow)) },
		// A status check failure: no cluster, no head, no dashboard to ask.
		events:  []string{ReasonStatusCheckFailed},
		requeue: DefaultPollInterval,
	}, {
		name:    "K8sJobMode, the submitter Job was deleted: make it again",
		job:     k8s,
		obs:     seen(k8s, rayJob(rayv1.JobStatusRunning, ""), func(o *observation) { o.inClusterDashboard = "http://dash" }),
		want:    polled(rayv1.JobStatusRunning, ""),
		actions: []string{"create Job j"},
		requeue: DefaultPollInterval,
	}, {
		name: "K8sJobMode, the submitter failed before Ray knew the job: Failed",
		job:  planJob(rayv1.K8sJobMode, startedStatus(rayv1.JobDeploymentStatusRunning, rayv1.JobStatusNew)),
		obs:  seen(k8s, nil, withSub(k8s, jobCond(batchv1.JobFailed, planNow))),
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = c.Status
			failedAt(s, rayv1.SubmissionFailed, "Job submission has failed. Reason: BackoffLimitExceeded. Message: too many")
		},
		requeue: reconcile.MinRequeue,
	}, {
		name: "K8sJobMode, the submitter failed, Ray's job outlived the grace period: stop it, Failed",
		job:  k8s,
		// The submitter finished timeout, which would fail the job first, is longer here.
		cfg: func(c *planConfig) { c.submitterFinishedTimeout = time.Hour },
		obs: seen(k8s, rayJob(rayv1.JobStatusRunning, ""), withSub(k8s, jobCond(batchv1.JobFailed, planNow.Add(-DefaultTransitionGracePeriod)))),
		want: then(polled(rayv1.JobStatusRunning, ""), func(s *rayv1.RayJobStatus) {
			failedAt(s, rayv1.JobDeploymentStatusTransitionGracePeriodExceeded,
				"Job submission has failed. Reason: BackoffLimitExceeded. Message: too many and the Ray job did not finish within 5m0s")
		}),
		actions: []string{"stop j-id on j-rc"},
		requeue: reconcile.MinRequeue,
	}, {
		name: "K8sJobMode, the submitter finished 30 s ago and Ray never said the job ended: Failed",
		job:  k8s,
		obs:  seen(k8s, rayJob(rayv1.JobStatusRunning, ""), withSub(k8s, jobCond(batchv1.JobComplete, planNow.Add(-DefaultSubmitterFinishedTimeout)))),
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus, s.JobStatus = c.Status, rayv1.JobStatusFailed
			failedAt(s, rayv1.JobDeploymentStatusTransitionGracePeriodExceeded, fmt.Sprintf(
				"The RayJob submitter finished at %s but the ray job did not reach terminal state within 30s", planNow.Add(-DefaultSubmitterFinishedTimeout).Format(time.DateTime)))
		},
		requeue: reconcile.MinRequeue,
	}, {
		name:    "K8sJobMode, a late reconcile: the submitter finished a minute ago, Ray says succeeded: Complete",
		job:     k8s,
		obs:     seen(k8s, rayJob(rayv1.JobStatusSucceeded, "done"), withSub(k8s, jobCond(batchv1.JobComplete, planNow.Add(-time.Minute)))),
		want:    then(polled(rayv1.JobStatusSucceeded, "done"), completeAt),
		requeue: reconcile.MinRequeue,
	}, {
		name: "SidecarMode, the sidecar exited with an error, the grace period not over: look again",
		job:  sidecar,
		obs: seen(sidecar, rayJob(rayv1.JobStatusRunning, ""), func(o *observation) {
			o.pods = []corev1.Pod{head(1, planNow.Add(-time.Second))}
		}),
		want: polled(rayv1.JobStatusRunning, ""),
		// The poll comes first (the grace period ends in 299 s, the finished timeout in 29 s).
		requeue: DefaultPollInterval,
	}, {
		name: "SidecarMode, the sidecar exited 30 s ago while Ray says running: Failed",
		job:  sidecar,
		obs: seen(sidecar, rayJob(rayv1.JobStatusRunning, ""), func(o *observation) {
			o.pods = []corev1.Pod{head(0, planNow.Add(-DefaultSubmitterFinishedTimeout))}
		}),
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus, s.JobStatus = c.Status, rayv1.JobStatusFailed
			failedAt(s, rayv1.JobDeploymentStatusTransitionGracePeriodExceeded, fmt.Sprintf(
				"The RayJob submitter finished at %s but the ray job did not reach terminal state within 30s", planNow.Add(-DefaultSubmitterFinishedTimeout).Format(time.DateTime)))
		},
		requeue: reconcile.MinRequeue,
	}, {
		name: "activeDeadlineSeconds passed while running: stop the Ray job, Failed",
		job:  planJob(rayv1.K8sJobMode, runningSt, func(j *rayv1.RayJob) { j.Spec.ActiveDeadlineSeconds = ptr.To[int32](60) }),
		obs:  seen(k8s, rayJob(rayv1.JobStatusRunning, ""), withSub(k8s)),
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = c.Status
			failedAt(s, rayv1.DeadlineExceeded, fmt.Sprintf("The RayJob has passed the activeDeadlineSeconds. StartTime: %s. ActiveDeadlineSeconds: 60", planStart.Local().Truncate(time.Second)))
		},
		actions: []string{"stop j-id on j-rc"},
		requeue: reconcile.MinRequeue,
	}, {
		name: "preRunningDeadlineSeconds does not apply once Ray runs the job",
		job:  planJob(rayv1.K8sJobMode, runningSt, func(j *rayv1.RayJob) { j.Spec.PreRunningDeadlineSeconds = ptr.To[int32](60) }),
		obs:  seen(k8s, rayJob(rayv1.JobStatusRunning, ""), withSub(k8s)),
		want: polled(rayv1.JobStatusRunning, ""),
		// The poll; no deadline wake-up.
		requeue: DefaultPollInterval,
	}, {
		name:    "suspend requested: Suspending, Ray not asked",
		job:     planJob(rayv1.K8sJobMode, runningSt, func(j *rayv1.RayJob) { j.Spec.Suspend, j.Spec.ShutdownAfterJobFinishes = true, true }),
		obs:     seen(k8s, rayJob(rayv1.JobStatusRunning, "")),
		want:    func(s *rayv1.RayJobStatus) { s.JobDeploymentStatus = rayv1.JobDeploymentStatusSuspending },
		requeue: reconcile.MinRequeue,
	}, {
		name: "Waiting (InteractiveMode), spec.jobId set: Running",
		job: planJob(rayv1.InteractiveMode, startedStatus(rayv1.JobDeploymentStatusWaiting, rayv1.JobStatusNew), func(j *rayv1.RayJob) {
			j.Spec.JobId, j.Status.JobId = "theirs", ""
		}),
		obs: func(o *observation) { o.cluster = c },
		want: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus, s.JobId, s.JobDeploymentStatus = c.Status, "theirs", rayv1.JobDeploymentStatusRunning
		},
		requeue: reconcile.MinRequeue,
	}, {
		name: "Waiting, no spec.jobId yet: nothing",
		job:  planJob(rayv1.InteractiveMode, startedStatus(rayv1.JobDeploymentStatusWaiting, rayv1.JobStatusNew)),
		obs:  func(o *observation) { o.cluster = c },
		want: func(s *rayv1.RayJobStatus) { s.RayClusterStatus = c.Status },
	}})
}

func completeAt(s *rayv1.RayJobStatus) {
	s.JobDeploymentStatus = rayv1.JobDeploymentStatusComplete
	s.Succeeded = ptr.To(ptr.Deref(s.Succeeded, 0) + 1)
	s.EndTime = ptr.To(metav1.NewTime(planNow))
}

// Retrying, Suspending and a fixed ValidationFailed tear down what the attempt made, then start over.
func TestPlanTearDown(t *testing.T) {
	retrying := startedStatus(rayv1.JobDeploymentStatusRetrying, rayv1.JobStatusFailed)
	retrying.Failed = ptr.To[int32](1)
	j := planJob(rayv1.K8sJobMode, retrying, func(j *rayv1.RayJob) { j.Spec.BackoffLimit = ptr.To[int32](2) })
	c := ownedCluster(j, rayv1.Ready)
	gonePod := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: planCluster + "-head"}}}
	suspending := planJob(rayv1.K8sJobMode, startedStatus(rayv1.JobDeploymentStatusSuspending, rayv1.JobStatusRunning))
	testPlan(t, []planCase{{
		name:    "Retrying: delete the cluster and the submitter, look again",
		job:     j,
		obs:     func(o *observation) { o.cluster, o.submitter = c, submitter(j) },
		actions: []string{"delete RayCluster " + planCluster, "delete Job j"},
		requeue: time.Second,
	}, {
		name: "Retrying: both already terminating, nothing to send",
		job:  j,
		obs: func(o *observation) {
			o.cluster, o.submitter = c.DeepCopy(), submitter(j)
			o.cluster.DeletionTimestamp, o.submitter.DeletionTimestamp = ptr.To(metav1.NewTime(planNow)), ptr.To(metav1.NewTime(planNow))
		},
		requeue: time.Second,
	}, {
		name:    "Retrying: the cluster gone but its pods not yet",
		job:     j,
		obs:     func(o *observation) { o.pods = gonePod },
		requeue: time.Second,
	}, {
		name: "Retrying: everything gone, start over with the counts kept",
		job:  j,
		want: func(s *rayv1.RayJobStatus) {
			*s = rayv1.RayJobStatus{Failed: ptr.To[int32](1), Succeeded: ptr.To[int32](0), StartTime: ptr.To(planStart)}
		},
		requeue: reconcile.MinRequeue,
	}, {
		name: "Retrying under volcano: the PodGroup gives back what the cluster held, then start over",
		job:  j,
		cfg:  func(c *planConfig) { c.batchScheduler = clusterbuild.SchedulerVolcano },
		want: func(s *rayv1.RayJobStatus) {
			*s = rayv1.RayJobStatus{Failed: ptr.To[int32](1), Succeeded: ptr.To[int32](0), StartTime: ptr.To(planStart)}
		},
		actions: []string{"sync PodGroup ray-j-pg (cleanup, best effort false)"},
		requeue: reconcile.MinRequeue,
	}, {
		name: "Retrying: a Job of the submitter's name the job does not own is left alone",
		job:  j,
		obs: func(o *observation) {
			o.submitter = submitter(j)
			o.submitter.OwnerReferences = nil
		},
		want: func(s *rayv1.RayJobStatus) {
			*s = rayv1.RayJobStatus{Failed: ptr.To[int32](1), Succeeded: ptr.To[int32](0), StartTime: ptr.To(planStart)}
		},
		requeue: reconcile.MinRequeue,
	}, {
		name:    "Suspending: delete the cluster",
		job:     suspending,
		obs:     func(o *observation) { o.cluster = c },
		actions: []string{"delete RayCluster " + planCluster},
		requeue: time.Second,
	}, {
		name: "Suspending: everything gone, Suspended",
		job:  suspending,
		want: func(s *rayv1.RayJobStatus) {
			*s = rayv1.RayJobStatus{JobDeploymentStatus: rayv1.JobDeploymentStatusSuspended, Failed: ptr.To[int32](0), Succeeded: ptr.To[int32](0), StartTime: ptr.To(planStart)}
		},
		requeue: reconcile.MinRequeue,
	}, {
		name: "ValidationFailed, fixed: tear down, then New",
		job: planJob(rayv1.K8sJobMode, startedStatus(rayv1.JobDeploymentStatusValidationFailed, rayv1.JobStatusRunning), func(j *rayv1.RayJob) {
			j.Status.Reason, j.Status.Message = rayv1.ValidationFailed, "was wrong"
		}),
		obs:     func(o *observation) { o.cluster = c },
		actions: []string{"delete RayCluster " + planCluster},
		requeue: time.Second,
	}, {
		name: "a failed read ends the step",
		job:  j,
		obs:  func(o *observation) { o.podsErr = errors.New("cache down") },
		err:  "cache down",
	}})
}

// Complete and Failed carry out the deletion policies when they are due.
func TestPlanFinished(t *testing.T) {
	complete := startedStatus(rayv1.JobDeploymentStatusComplete, rayv1.JobStatusSucceeded)
	complete.EndTime = ptr.To(metav1.NewTime(planNow.Add(-time.Minute)))
	complete.Succeeded = ptr.To[int32](1)
	shutdown := func(ttl int32) func(j *rayv1.RayJob) {
		return func(j *rayv1.RayJob) { j.Spec.ShutdownAfterJobFinishes, j.Spec.TTLSecondsAfterFinished = true, ttl }
	}
	j := planJob(rayv1.K8sJobMode, complete, shutdown(0))
	c := ownedCluster(j, rayv1.Ready)
	mirror := func(s *rayv1.RayJobStatus) { s.RayClusterStatus = c.Status }
	workers := rayv1.DeleteWorkers
	testPlan(t, []planCase{{
		name:    "shutdownAfterJobFinishes, ttl passed: delete the cluster",
		job:     j,
		obs:     func(o *observation) { o.cluster = c },
		want:    mirror,
		actions: []string{"delete RayCluster " + planCluster},
	}, {
		name:    "ttl ahead: wake up when it is due",
		job:     planJob(rayv1.K8sJobMode, complete, shutdown(300)),
		obs:     func(o *observation) { o.cluster = c },
		want:    mirror,
		requeue: 4 * time.Minute,
	}, {
		name:    "DELETE_RAYJOB_CR_AFTER_JOB_FINISHES: delete the RayJob",
		job:     j,
		cfg:     func(c *planConfig) { c.deleteSelf = true },
		obs:     func(o *observation) { o.cluster = c },
		want:    mirror,
		actions: []string{"delete RayJob j"},
	}, {
		name: "deletionStrategy onSuccess DeleteWorkers: suspend the worker groups",
		job: planJob(rayv1.K8sJobMode, complete, func(j *rayv1.RayJob) {
			j.Spec.DeletionStrategy = &rayv1.DeletionStrategy{OnSuccess: &rayv1.DeletionPolicy{Policy: &workers}, OnFailure: &rayv1.DeletionPolicy{Policy: ptr.To(rayv1.DeleteNone)}}
		}),
		obs:     func(o *observation) { o.cluster = c },
		want:    mirror,
		actions: []string{"suspend workers of " + planCluster},
	}, {
		name: "deletionRules: the workers now, the cluster later, the RayJob after that",
		job: planJob(rayv1.K8sJobMode, complete, func(j *rayv1.RayJob) {
			ok := rayv1.JobStatusSucceeded
			j.Spec.DeletionStrategy = &rayv1.DeletionStrategy{DeletionRules: []rayv1.DeletionRule{
				{Policy: rayv1.DeleteWorkers, Condition: rayv1.DeletionCondition{JobStatus: &ok}},
				{Policy: rayv1.DeleteCluster, Condition: rayv1.DeletionCondition{JobStatus: &ok, TTLSeconds: 120}},
				{Policy: rayv1.DeleteSelf, Condition: rayv1.DeletionCondition{JobStatus: &ok, TTLSeconds: 600}},
			}}
		}),
		obs:     func(o *observation) { o.cluster = c },
		want:    mirror,
		actions: []string{"suspend workers of " + planCluster},
		// The cluster's rule is due 2 minutes after the end, a minute from now.
		requeue: time.Minute,
	}, {
		name: "deletionRules: DeleteSelf ends the cleanups",
		job: planJob(rayv1.K8sJobMode, complete, func(j *rayv1.RayJob) {
			ok := rayv1.JobStatusSucceeded
			j.Spec.DeletionStrategy = &rayv1.DeletionStrategy{DeletionRules: []rayv1.DeletionRule{
				{Policy: rayv1.DeleteSelf, Condition: rayv1.DeletionCondition{JobStatus: &ok}},
				{Policy: rayv1.DeleteCluster, Condition: rayv1.DeletionCondition{JobStatus: &ok}},
			}}
		}),
		obs:     func(o *observation) { o.cluster = c },
		want:    mirror,
		actions: []string{"delete RayJob j"},
	}, {
		name: "a cluster the job selected is never deleted",
		job:  planJob(rayv1.K8sJobMode, complete, shutdown(0)),
		obs: func(o *observation) {
			o.cluster = c.DeepCopy()
			o.cluster.OwnerReferences = nil
		},
		want: mirror,
	}, {
		name: "Failed under volcano: the PodGroup shrinks to the cluster kept, best effort",
		job: planJob(rayv1.K8sJobMode, func() rayv1.RayJobStatus {
			s := startedStatus(rayv1.JobDeploymentStatusFailed, rayv1.JobStatusFailed)
			s.EndTime = ptr.To(metav1.NewTime(planNow))
			return s
		}()),
		cfg:     func(c *planConfig) { c.batchScheduler = clusterbuild.SchedulerVolcano },
		obs:     func(o *observation) { o.cluster = c },
		want:    mirror,
		actions: []string{"sync PodGroup ray-j-pg (cleanup, best effort true)"},
	}, {
		name: "finished without an end time (an older operator's): it is set now",
		job:  planJob(rayv1.K8sJobMode, startedStatus(rayv1.JobDeploymentStatusComplete, rayv1.JobStatusSucceeded)),
		want: func(s *rayv1.RayJobStatus) { s.EndTime = ptr.To(metav1.NewTime(planNow)) },
	}, {
		name: "an invalid spec does not hold a finished job's cleanup",
		job:  planJob(rayv1.K8sJobMode, complete, shutdown(0), func(j *rayv1.RayJob) { j.Spec.Entrypoint = "" }),
		obs:  func(o *observation) { o.cluster = c },
		want: mirror,
		// The cleanup goes on; validation does not move a finished job.
		actions: []string{"delete RayCluster " + planCluster},
	}})
}

// A write that fails ends the reconcile where it was planned; an action whose outcome decides the status finishes
// the step from there.
func TestPlanWriteFailures(t *testing.T) {
	gr := schema.GroupResource{Group: "ray.io", Resource: "rayclusters"}
	refused := apierrors.NewInvalid(schema.GroupKind{Group: "ray.io", Kind: "RayCluster"}, planCluster, field.ErrorList{field.Invalid(field.NewPath("spec"), "x", "bad")})
	initializing := startedStatus(rayv1.JobDeploymentStatusInitializing, rayv1.JobStatusNew)
	k8s := planJob(rayv1.K8sJobMode, initializing)
	for _, tc := range []struct {
		name   string
		job    *rayv1.RayJob
		obs    func(o *observation)
		fail   error
		err    string
		status func(s *rayv1.RayJobStatus)
		// requeue is what the reconcile asks for after the failure.
		requeue time.Duration
	}{{
		name: "a cluster the API server refuses fails the job",
		job:  k8s,
		fail: refused,
		status: func(s *rayv1.RayJobStatus) {
			failedAt(s, rayv1.SubmissionFailed, "spec.rayClusterSpec: the API server refused RayCluster j-rc: "+refused.Error())
		},
		requeue: reconcile.MinRequeue,
	}, {
		name: "a refused cluster fails the attempt once, even past a deadline",
		job: planJob(rayv1.K8sJobMode, initializing, func(j *rayv1.RayJob) {
			j.Spec.ActiveDeadlineSeconds, j.Spec.BackoffLimit = ptr.To[int32](60), ptr.To[int32](3)
		}),
		fail: refused,
		status: func(s *rayv1.RayJobStatus) {
			s.JobDeploymentStatus, s.Failed, s.Reason = rayv1.JobDeploymentStatusRetrying, ptr.To[int32](1), rayv1.SubmissionFailed
			s.Message = "spec.rayClusterSpec: the API server refused RayCluster j-rc: " + refused.Error()
		},
		requeue: reconcile.MinRequeue,
	}, {
		name: "a submitter Job the API server refuses fails the job; it does not go on to Running",
		job:  k8s,
		obs:  func(o *observation) { o.cluster, o.inClusterDashboard = ownedCluster(o.j, rayv1.Ready), "http://dash" },
		fail: apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: "Job"}, "j", field.ErrorList{field.Invalid(field.NewPath("spec"), "x", "bad")}),
		status: func(s *rayv1.RayJobStatus) {
			c := ownedCluster(k8s, rayv1.Ready)
			s.RayClusterStatus, s.DashboardURL = c.Status, DashboardURL(c, "")
			failedAt(s, rayv1.SubmissionFailed, `spec.submitterPodTemplate: the API server refused submitter Job j: Job.batch "j" is invalid: spec: Invalid value: "x": bad`)
		},
		requeue: reconcile.MinRequeue,
	}, {
		name:    "a cluster that exists already: look again in a second",
		job:     k8s,
		fail:    apierrors.NewAlreadyExists(gr, planCluster),
		status:  func(*rayv1.RayJobStatus) {},
		requeue: time.Second,
	}, {
		name:   "any other create failure is the reconcile's error",
		job:    k8s,
		fail:   apierrors.NewServiceUnavailable("down"),
		err:    "down",
		status: func(*rayv1.RayJobStatus) {},
	}, {
		name: "a submission Ray refuses fails the job",
		job:  planJob(rayv1.HTTPMode, startedStatus(rayv1.JobDeploymentStatusRunning, rayv1.JobStatusNew)),
		obs: func(o *observation) {
			o.cluster = ownedCluster(o.j, rayv1.Ready)
			o.headService = headSvc(o.j, o.cluster)
			o.jobErr = ray.ErrNotFound
		},
		fail: errors.New("bad runtime env"),
		status: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus.State, s.RayClusterStatus.ReadyWorkerReplicas = rayv1.Ready, 1
			failedAt(s, rayv1.SubmissionFailed, "submitting Ray job j-id: bad runtime env")
		},
		requeue: reconcile.MinRequeue,
	}, {
		name: "a submission Ray cannot take now is a status check failure, retried",
		job:  planJob(rayv1.HTTPMode, startedStatus(rayv1.JobDeploymentStatusRunning, rayv1.JobStatusNew)),
		obs: func(o *observation) {
			o.cluster = ownedCluster(o.j, rayv1.Ready)
			o.headService = headSvc(o.j, o.cluster)
			o.jobErr = ray.ErrNotFound
		},
		fail: ray.ErrUnavailable,
		status: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus.State, s.RayClusterStatus.ReadyWorkerReplicas = rayv1.Ready, 1
			s.JobStatusCheckFailureStartTime = ptr.To(metav1.NewTime(planNow))
		},
		requeue: time.Second,
	}, {
		name: "a head Service that cannot be made ends the reconcile before Ray's answer is recorded",
		job:  planJob(rayv1.HTTPMode, startedStatus(rayv1.JobDeploymentStatusRunning, rayv1.JobStatusRunning)),
		obs: func(o *observation) {
			o.cluster = ownedCluster(o.j, rayv1.Ready)
			o.jobInfo = rayJob(rayv1.JobStatusSucceeded, "done")
		},
		fail: errors.New("forbidden"),
		err:  "forbidden",
		status: func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus.State, s.RayClusterStatus.ReadyWorkerReplicas = rayv1.Ready, 1
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			o := observed(tc.job)
			if tc.obs != nil {
				tc.obs(o)
			}
			p := computePlan(o, planCfg())
			if len(p.actions) == 0 {
				t.Fatal("no action planned")
			}
			err := p.failed(&p.actions[0], tc.fail)
			if (tc.err == "" && err != nil) || (tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err))) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
			want := tc.job.Status.DeepCopy()
			tc.status(want)
			if diff := cmp.Diff(*want, p.j.Status); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if err == nil && p.RequeueAfter() != tc.requeue {
				t.Errorf("requeue after %v, want %v", p.RequeueAfter(), tc.requeue)
			}
		})
	}
}

// The writer's events go where their action was planned among the plan's: the events keep the order of the step.
func TestPlacedEvents(t *testing.T) {
	p := &plan{j: &rayv1.RayJob{}}
	p.Eventf(corev1.EventTypeNormal, "A", "x", "")
	p.act(action{kind: stopJob})
	p.StatusEventf(corev1.EventTypeNormal, "C", "x", "")
	p.act(action{kind: deleteCluster})
	p.eventf(&p.actions[0], corev1.EventTypeNormal, "B", "x", "")
	p.eventf(&p.actions[1], corev1.EventTypeNormal, "D", "x", "")
	p.eventf(&p.actions[1], corev1.EventTypeNormal, "E", "x", "")
	p.placeWritten()
	if got := strings.Join(eventReasons(p.Events), ""); got != "ABCDE" {
		t.Errorf("events in order %s, want ABCDE", got)
	}
}
