package envtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/controller/shared/podtrouble"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

const pullNotFound = `rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/rayproject/ray:nope": failed to resolve image: docker.io/rayproject/ray:nope: not found`

// TestStartTrouble plays the RayCluster controller and the kubelet (the job's cluster's pods, their status set by
// hand) under a fake clock that the test steps, so deadlines and the missing-Secret grace pass without waiting.
func TestStartTrouble(t *testing.T) {
	e, clk := startEnvOnFakeClock(t, func(o *rayjob.Options) { o.MissingConfigGrace = 2 * time.Minute })

	t.Run("an Initializing job's message and a Warning event name its head's cause; it keeps waiting", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "pull"))
		c := e.waitCluster(t, j)
		head := e.troublePod(t, c, "head", rayv1.NodeTypeHead, waitingStatus("ErrImagePull", pullNotFound))
		want := fmt.Sprintf(`pod %s: ErrImagePull: container ray-head cannot pull image "127.0.0.1:5000/ray:nope": %s`, head.Name, pullNotFound)
		e.poke(t, c)
		got := testutil.WaitFor(t, e.Env, j, "message naming the pull error", func(j *rayv1.RayJob) bool { return j.Status.Message == want })
		if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing {
			t.Errorf("jobDeploymentStatus = %s, want Initializing (no opt-in)", got.Status.JobDeploymentStatus)
		}
		if note := e.WaitEvent(t, j, corev1.EventTypeWarning, podtrouble.ReasonImagePull); note != "RayCluster "+c.Name+": "+want {
			t.Errorf("event note %q", note)
		}
		// The kubelet backs off: the same cause, so the message stays as it is.
		e.setPodStatus(t, head, waitingStatus("ImagePullBackOff", `Back-off pulling image "127.0.0.1:5000/ray:nope": ErrImagePull: `+pullNotFound))
		e.poke(t, c)
		got = testutil.WaitFor(t, e.Env, j, "the poke mirrored", func(j *rayv1.RayJob) bool { return j.Status.RayClusterStatus.Reason == "poke 2" })
		if got.Status.Message != want || got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing {
			t.Errorf("after the back-off: message %q, jobDeploymentStatus %s", got.Status.Message, got.Status.JobDeploymentStatus)
		}
		// Fixed: the cluster is ready, the message is cleared.
		e.readyCluster(t, j)
		testutil.WaitFor(t, e.Env, j, "Running with no message", func(j *rayv1.RayJob) bool {
			return j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusRunning && !strings.Contains(j.Status.Message, "ErrImagePull")
		})
	})

	t.Run("preRunningDeadlineSeconds fails the job with its cluster's causes in the message", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "crash").PreRunningDeadline(60))
		c := e.waitCluster(t, j)
		st := waitingStatus("CrashLoopBackOff", "back-off 10s restarting failed container")
		st.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", Message: "boom\n"}
		e.troublePod(t, c, "head", rayv1.NodeTypeHead, st)
		e.poke(t, c)
		testutil.WaitFor(t, e.Env, j, "message naming the crash loop", func(j *rayv1.RayJob) bool { return strings.Contains(j.Status.Message, "CrashLoopBackOff") })
		clk.Step(61 * time.Second)
		e.poke(t, c)
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		want := "the Ray job did not start running within preRunningDeadlineSeconds (60s); the cluster's pods cannot start: pod " +
			c.Name + "-head: CrashLoopBackOff: container ray-head keeps exiting: last exit code 3 (Error), termination message: boom"
		if got.Status.Reason != rayv1.PreRunningDeadlineExceeded || got.Status.Message != want {
			t.Errorf("reason %q message %q; want %q, %q", got.Status.Reason, got.Status.Message, rayv1.PreRunningDeadlineExceeded, want)
		}
	})

	// On the real clock (a subtest of TestEnvtest until #41) the 3 s counted from status.startTime, which the
	// controller sets when it initializes the job, so they had to cover the test's own steps too: the cluster made
	// and marked ready, the job submitted and seen PENDING, then set RUNNING. A loaded machine took longer, the job
	// failed while still Initializing, never PENDING, and the wait for PENDING ran out.
	t.Run("activeDeadlineSeconds fails the job and stops it in Ray", func(t *testing.T) {
		ns := e.Namespace(t)
		j, c, got := e.submitted(t, testutil.MakeRayJob(ns, "deadline").ActiveDeadline(3))
		e.ray.Cluster(ns, c.Name).SetJob(got.Status.JobId, ray.JobStatusRunning, 1, 0)
		got = e.waitJobStatus(t, j, rayv1.JobStatusRunning)
		if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusRunning {
			t.Fatalf("jobDeploymentStatus %s (reason %q) before the deadline passed on the controller's clock", got.Status.JobDeploymentStatus, got.Status.Reason)
		}
		// A running job is polled: a reconcile after the step finds the deadline passed.
		clk.Step(3 * time.Second)
		got = e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if want := fmt.Sprintf("The RayJob has passed the activeDeadlineSeconds. StartTime: %s. ActiveDeadlineSeconds: %d", got.Status.StartTime.Local(), *j.Spec.ActiveDeadlineSeconds); got.Status.Reason != rayv1.DeadlineExceeded || got.Status.Message != want {
			t.Errorf("reason = %q, message %q, want KubeRay's %q", got.Status.Reason, got.Status.Message, want)
		}
		if _, _, stops := e.requests(ns, c.Name); len(stops) == 0 || stops[0] != got.Status.JobId {
			t.Errorf("stops = %v", stops)
		}
	})

	t.Run("opted in, an image the registry does not have fails the job at once", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "notfound").With(func(j *rayv1.RayJob) {
			j.Annotations = map[string]string{rayjob.AnnotationFailOnPermanentStartError: "true"}
		}))
		c := e.waitCluster(t, j)
		head := e.troublePod(t, c, "head", rayv1.NodeTypeHead, waitingStatus("ErrImagePull", pullNotFound))
		e.poke(t, c)
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if got.Status.Reason != rayjob.PermanentStartError || !strings.HasPrefix(got.Status.Message, "pod "+head.Name+": ErrImagePull: ") ||
			!strings.Contains(got.Status.Message, rayjob.AnnotationFailOnPermanentStartError) {
			t.Errorf("reason %q message %q", got.Status.Reason, got.Status.Message)
		}
	})

	t.Run("opted in, a missing Secret fails the job only after the grace; an unschedulable worker never does", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "secret").With(func(j *rayv1.RayJob) {
			j.Annotations = map[string]string{rayjob.AnnotationFailOnPermanentStartError: "true"}
		}))
		c := e.waitCluster(t, j)
		head := e.troublePod(t, c, "head", rayv1.NodeTypeHead, waitingStatus("CreateContainerConfigError", `secret "db-password" not found`))
		// The grace counts from the pod's creationTimestamp, which the API server sets in real time; the fake clock
		// has drifted from it by envtest's start and the earlier subtests' steps, either way. Set it to that time.
		clk.SetTime(head.CreationTimestamp.Time)
		w := e.troublePod(t, c, "worker", rayv1.NodeTypeWorker, corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/3 nodes are available: 3 Insufficient cpu.", LastTransitionTime: metav1.Now()}}})
		e.poke(t, c)
		got := testutil.WaitFor(t, e.Env, j, "message naming the Secret and the worker", func(j *rayv1.RayJob) bool {
			return strings.Contains(j.Status.Message, `secret "db-password" not found`) && strings.Contains(j.Status.Message, "pod "+w.Name+": Unschedulable: ")
		})
		if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing {
			t.Fatalf("failed within the grace: %+v", got.Status)
		}
		e.WaitEvent(t, j, corev1.EventTypeWarning, podtrouble.ReasonUnschedulable)
		clk.Step(3 * time.Minute)
		e.poke(t, c)
		got = e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if got.Status.Reason != rayjob.PermanentStartError || !strings.Contains(got.Status.Message, `secret "db-password" not found`) {
			t.Errorf("reason %q message %q", got.Status.Reason, got.Status.Message)
		}
	})

	t.Run("a bad value of the annotation is a validation error naming it", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "badvalue").With(func(j *rayv1.RayJob) {
			j.Annotations = map[string]string{rayjob.AnnotationFailOnPermanentStartError: "yes"}
		}))
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusValidationFailed)
		want := `metadata.annotations[manta.dev/fail-on-permanent-start-error]: Unsupported value: "yes": supported values: "true", "false"`
		if got.Status.Message != want {
			t.Errorf("message %q, want %q", got.Status.Message, want)
		}
		if note := e.WaitEvent(t, j, corev1.EventTypeWarning, rayjob.ReasonInvalidSpec); note != want {
			t.Errorf("event %q", note)
		}
	})
}

// troublePod creates a pod of the cluster (as the RayCluster controller would) with the status given (as the kubelet
// or the scheduler would write it).
func (e *env) troublePod(t *testing.T, c *rayv1.RayCluster, suffix, nodeType string, st corev1.PodStatus) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name + "-" + suffix,
			Labels: map[string]string{rayv1.LabelCluster: c.Name, rayv1.LabelNodeType: nodeType}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-" + nodeType, Image: "127.0.0.1:5000/ray:nope"}}},
	}
	e.Create(t, p)
	e.setPodStatus(t, p, st)
	return p
}

func (e *env) setPodStatus(t *testing.T, p *corev1.Pod, st corev1.PodStatus) {
	t.Helper()
	testutil.UpdateStatus(t, e.Env, p, func(p *corev1.Pod) { p.Status = st })
}

func waitingStatus(reason, msg string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "ray-head", Image: "127.0.0.1:5000/ray:nope",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}}
}

// poke changes the cluster's status as the RayCluster controller does when a pod's changes (its status.reason):
// the RayJob, which watches its cluster, reconciles.
func (e *env) poke(t *testing.T, c *rayv1.RayCluster) {
	t.Helper()
	testutil.UpdateStatus(t, e.Env, c, func(cur *rayv1.RayCluster) {
		n := 1
		if _, err := fmt.Sscanf(cur.Status.Reason, "poke %d", &n); err == nil {
			n++
		}
		cur.Status.Reason = fmt.Sprintf("poke %d", n)
	})
}
