package rayjob

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/ray"
)

// Opted in (AnnotationSubmitBeforeClusterReady), an Initializing job starts once its head answers, whatever its
// cluster's state; without the annotation the same observation leaves it waiting.
func TestPlanStartEarly(t *testing.T) {
	initializing := startedStatus(rayv1.JobDeploymentStatusInitializing, rayv1.JobStatusNew)
	early := func(mode rayv1.JobSubmissionMode, mutate ...func(*rayv1.RayJob)) *rayv1.RayJob {
		return planJob(mode, initializing, append([]func(*rayv1.RayJob){func(j *rayv1.RayJob) {
			j.Annotations = map[string]string{AnnotationSubmitBeforeClusterReady: "true"}
		}}, mutate...)...)
	}
	k8s := early(rayv1.K8sJobMode)
	// The RayCluster controller made the head Service and the head pod; the worker is not up.
	starting := ownedCluster(k8s, "")
	starting.Status.ReadyWorkerReplicas, starting.Status.DesiredWorkerReplicas = 0, 1
	starting.Status.Head = rayv1.HeadInfo{ServiceName: planCluster + "-head-svc", PodName: planCluster + "-head", PodIP: "10.1.0.5"}
	noService := starting.DeepCopy()
	noService.Status.Head = rayv1.HeadInfo{}
	head := func(phase corev1.PodPhase, ip string) []corev1.Pod {
		return []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: planCluster + "-head",
			Labels: map[string]string{rayv1.LabelCluster: planCluster, rayv1.LabelNodeType: rayv1.NodeTypeHead}},
			Status: corev1.PodStatus{Phase: phase, PodIP: ip}}}
	}
	mirror := func(s *rayv1.RayJobStatus) { s.RayClusterStatus = starting.Status }
	started := func(d rayv1.JobDeploymentStatus) func(s *rayv1.RayJobStatus) {
		return func(s *rayv1.RayJobStatus) {
			s.RayClusterStatus = starting.Status
			s.JobDeploymentStatus = d
			s.DashboardURL = DashboardURL(starting, "")
		}
	}
	healthy := func(o *observation) {
		o.cluster, o.pods, o.inClusterDashboard, o.headProbed = starting, head(corev1.PodRunning, "10.1.0.5"), "http://dash", true
	}
	testPlan(t, []planCase{{
		name: "not opted in: the head answers, the job waits for the cluster, no submitter",
		job:  planJob(rayv1.K8sJobMode, initializing),
		obs:  healthy,
		want: mirror,
	}, {
		name: `"false": as without the annotation`,
		job:  early(rayv1.HTTPMode, func(j *rayv1.RayJob) { j.Annotations[AnnotationSubmitBeforeClusterReady] = "false" }),
		obs:  healthy,
		want: mirror,
	}, {
		name: "K8sJobMode, no head Service yet: nothing to make, look again soon",
		job:  k8s,
		obs: func(o *observation) {
			o.cluster, o.inClusterDashboard = noService, "http://dash"
		},
		want:    func(s *rayv1.RayJobStatus) { s.RayClusterStatus = noService.Status },
		requeue: earlyProbeInterval,
	}, {
		name: "K8sJobMode, the head Service exists, the head pod still Pending: the submitter Job now, still Initializing",
		job:  k8s,
		obs: func(o *observation) {
			o.cluster, o.pods, o.inClusterDashboard = starting, head(corev1.PodPending, ""), "http://dash"
		},
		want:    mirror,
		actions: []string{"create Job j"},
		requeue: earlyProbeInterval,
	}, {
		name: "K8sJobMode, the head runs and its dashboard does not answer yet: still Initializing, not a failure",
		job:  k8s,
		obs: func(o *observation) {
			healthy(o)
			o.headErr = fmt.Errorf("gcs health: %w", ray.ErrUnavailable)
		},
		want:    mirror,
		actions: []string{"create Job j"},
		requeue: earlyProbeInterval,
	}, {
		name: "K8sJobMode, the dashboard answers: Running on a cluster not ready, the submitter already made",
		job:  k8s,
		obs: func(o *observation) {
			healthy(o)
			o.submitter = submitter(k8s)
		},
		want:    started(rayv1.JobDeploymentStatusRunning),
		events:  []string{ReasonStartedBeforeClusterReady},
		requeue: reconcile.MinRequeue,
	}, {
		name: "the poll interval, when shorter, bounds the looks",
		job:  k8s,
		obs: func(o *observation) {
			healthy(o)
			o.headErr = ray.ErrUnavailable
			o.submitter = submitter(k8s)
		},
		cfg:     func(c *planConfig) { c.pollInterval = 200 * time.Millisecond },
		want:    mirror,
		requeue: 200 * time.Millisecond,
	}, {
		name:    "HTTPMode, the head pod not running: no submission yet",
		job:     early(rayv1.HTTPMode),
		obs:     func(o *observation) { o.cluster, o.pods = starting, head(corev1.PodPending, "10.1.0.5") },
		want:    mirror,
		requeue: earlyProbeInterval,
	}, {
		name: "HTTPMode, the head pod runs but its raylet has not registered (the GCS lists no head node alive): no submission yet",
		job:  early(rayv1.HTTPMode),
		obs: func(o *observation) {
			o.cluster, o.pods, o.headProbed = starting, head(corev1.PodRunning, "10.1.0.5"), true
			o.headErr = fmt.Errorf("head node: %w: the GCS does not list it alive yet", ray.ErrUnavailable)
		},
		want:    mirror,
		requeue: earlyProbeInterval,
	}, {
		name: "HTTPMode, the head takes jobs: submit now, Running",
		job:  early(rayv1.HTTPMode),
		obs: func(o *observation) {
			o.cluster, o.pods, o.headProbed = starting, head(corev1.PodRunning, "10.1.0.5"), true
		},
		want:    started(rayv1.JobDeploymentStatusRunning),
		actions: []string{"submit j-id to j-rc"},
		events:  []string{ReasonStartedBeforeClusterReady},
		requeue: reconcile.MinRequeue,
	}, {
		name:    "SidecarMode, the dashboard answers: Running",
		job:     early(rayv1.SidecarMode),
		obs:     healthy,
		want:    started(rayv1.JobDeploymentStatusRunning),
		events:  []string{ReasonStartedBeforeClusterReady},
		requeue: reconcile.MinRequeue,
	}, {
		name:   "InteractiveMode, the dashboard answers: Waiting for the user's submission",
		job:    early(rayv1.InteractiveMode),
		obs:    healthy,
		want:   started(rayv1.JobDeploymentStatusWaiting),
		events: []string{ReasonStartedBeforeClusterReady},
	}, {
		name: "the head's dashboard client could not be made: still Initializing, the reconcile's error",
		job:  early(rayv1.SidecarMode),
		obs: func(o *observation) {
			healthy(o)
			o.dashErr = errors.New("no token")
		},
		want:    mirror,
		requeue: earlyProbeInterval,
		err:     "no token",
	}, {
		name: "HTTPMode, the head's dashboard client could not be made: no submission, the reconcile's error",
		job:  early(rayv1.HTTPMode),
		obs: func(o *observation) {
			o.cluster, o.pods, o.dashErr = starting, head(corev1.PodRunning, "10.1.0.5"), errors.New("no token")
		},
		want:    mirror,
		requeue: earlyProbeInterval,
		err:     "no token",
	}})
}

// A refused early submission: a head that cannot take it yet leaves the job Initializing, to be asked again; any
// other refusal fails the submission as in Running.
func TestPlanStartEarlySubmissionRefused(t *testing.T) {
	j := planJob(rayv1.HTTPMode, startedStatus(rayv1.JobDeploymentStatusInitializing, rayv1.JobStatusNew), func(j *rayv1.RayJob) {
		j.Annotations = map[string]string{AnnotationSubmitBeforeClusterReady: "true"}
	})
	c := ownedCluster(j, "")
	pods := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: planCluster + "-head",
		Labels: map[string]string{rayv1.LabelCluster: planCluster, rayv1.LabelNodeType: rayv1.NodeTypeHead}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.5"}}}
	for _, tc := range []struct {
		name       string
		err        error
		deployment rayv1.JobDeploymentStatus
		reason     rayv1.JobFailedReason
		requeue    bool
	}{
		{"the dashboard is not listening yet", fmt.Errorf("POST /api/jobs/: dial: connect: connection refused (%w)", ray.ErrUnavailable), rayv1.JobDeploymentStatusInitializing, "", true},
		{"no job agent yet", fmt.Errorf("ray answered 500 (%w): No available agent to submit job, please try again later.", ray.ErrUnavailable), rayv1.JobDeploymentStatusInitializing, "", true},
		{"refused for good", errors.New("ray answered 400: entrypoint: field required"), rayv1.JobDeploymentStatusFailed, rayv1.SubmissionFailed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := computePlan(observed(j, func(o *observation) { o.cluster, o.pods, o.headProbed = c, pods, true }), planCfg())
			if len(p.actions) != 1 || p.actions[0].kind != submitJob {
				t.Fatalf("actions %v, want one submission", actionNames(p))
			}
			if err := p.failed(&p.actions[0], tc.err); err != nil {
				t.Fatalf("reconcile error %v", err)
			}
			s := &p.j.Status
			if s.JobDeploymentStatus != tc.deployment || s.Reason != tc.reason {
				t.Errorf("jobDeploymentStatus %s reason %q, want %s %q", s.JobDeploymentStatus, s.Reason, tc.deployment, tc.reason)
			}
			if got := p.RequeueAfter(); tc.requeue && got != earlyProbeInterval {
				t.Errorf("requeue after %v, want %v", got, earlyProbeInterval)
			}
			if got := eventReasons(p.Events); len(got) != 0 {
				t.Errorf("events %v, want none (the job did not start)", got)
			}
		})
	}
}

func TestValidateSubmitBeforeClusterReady(t *testing.T) {
	for v, want := range map[string]string{
		"true": "", "false": "",
		"yes":  `metadata.annotations[manta.dev/submit-before-cluster-ready]: Unsupported value: "yes": supported values: "true", "false"`,
		"True": `metadata.annotations[manta.dev/submit-before-cluster-ready]: Unsupported value: "True": supported values: "true", "false"`,
	} {
		j := planJob(rayv1.K8sJobMode, rayv1.RayJobStatus{}, func(j *rayv1.RayJob) {
			j.Annotations = map[string]string{AnnotationSubmitBeforeClusterReady: v}
		})
		got := ""
		if errs := Validate(j); len(errs) > 0 {
			got = errs.ToAggregate().Error()
		}
		if got != want {
			t.Errorf("%q: %q, want %q", v, got, want)
		}
	}
}
