package envtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/testutil"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

// TestSubmitBeforeClusterReady runs each mode's job twice side by side, opted in (rayjob.AnnotationSubmitBeforeClusterReady)
// and not, with the test playing the RayCluster controller and the kubelet: the clusters get their head Service and a
// running head pod, never ready. The opted-in job starts; the other one waits, as KubeRay's does. Its absence of a
// start is proved at a barrier, not after a sleep: its cluster's status carries a mark the job mirrors, written after
// everything the job would start on was in the controller's cache (the opted-in job reacted to a later write of the
// same kind).
func TestSubmitBeforeClusterReady(t *testing.T) {
	e := startEnv(t)
	early := func(j *rayv1.RayJob) {
		j.Annotations = map[string]string{rayjob.AnnotationSubmitBeforeClusterReady: "true"}
	}

	t.Run("K8sJobMode: the submitter Job once the head Service exists, Running once the head answers", func(t *testing.T) {
		ns := e.Namespace(t)
		plain := e.create(t, testutil.MakeRayJob(ns, "plain").Mode(rayv1.K8sJobMode))
		opted := e.create(t, testutil.MakeRayJob(ns, "opted").Mode(rayv1.K8sJobMode).With(early))
		cPlain, cOpted := e.waitCluster(t, plain), e.waitCluster(t, opted)

		e.headService(t, cPlain)
		e.headService(t, cOpted)
		sub := testutil.WaitFor(t, e.Env, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rayjob.SubmitterJobName(opted)}},
			"the opted-in job's submitter Job", func(*batchv1.Job) bool { return true })
		if !strings.Contains(strings.Join(sub.Spec.Template.Spec.Containers[0].Args, " "), "/api/gcs_healthz") {
			t.Errorf("the submitter does not wait for the dashboard: %v", sub.Spec.Template.Spec.Containers[0].Args)
		}
		got := testutil.Get(t, e.Env, opted)
		if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing {
			t.Errorf("opted in, before its head runs: jobDeploymentStatus %s, want Initializing", got.Status.JobDeploymentStatus)
		}
		// The head Service is on the cluster object itself: once the plain job mirrors it, it has planned with it.
		testutil.WaitFor(t, e.Env, plain, "the plain job's cluster status mirrored", func(j *rayv1.RayJob) bool { return j.Status.RayClusterStatus.Head.ServiceName != "" })
		e.noSubmitter(t, plain)

		e.runningHead(t, cPlain)
		e.runningHead(t, cOpted)
		got = e.waitDeployment(t, opted, rayv1.JobDeploymentStatusRunning)
		if got.Status.RayClusterStatus.State == rayv1.Ready || got.Status.DashboardURL == "" {
			t.Errorf("opted in, Running: rayClusterStatus.state %q, dashboardURL %q", got.Status.RayClusterStatus.State, got.Status.DashboardURL)
		}
		note := e.WaitEvent(t, opted, corev1.EventTypeNormal, rayjob.ReasonStartedBeforeClusterReady)
		if want := "the head of RayCluster " + cOpted.Name + " answers; starting the job before the cluster is ready (state not ready, 0 of 1 workers ready"; !strings.HasPrefix(note, want) {
			t.Errorf("event %q, want it to start with %q", note, want)
		}
		// The opted-in job saw its head pod, made after the plain job's: the plain job's is in the cache too.
		e.poke(t, cPlain)
		got = testutil.WaitFor(t, e.Env, plain, "the poke mirrored", func(j *rayv1.RayJob) bool { return j.Status.RayClusterStatus.Reason == "poke 1" })
		if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing {
			t.Errorf("not opted in: jobDeploymentStatus %s, want Initializing", got.Status.JobDeploymentStatus)
		}
		e.noSubmitter(t, plain)
		if n := e.ray.Cluster(ns, cPlain.Name).Calls(fakeray.Route("GET", "/api/gcs_healthz")); n != 0 {
			t.Errorf("not opted in: %d health checks of the head", n)
		}
		// Ready, the plain job goes on as KubeRay's: the barrier above was a real one.
		e.readyCluster(t, plain)
		e.waitDeployment(t, plain, rayv1.JobDeploymentStatusRunning)
		e.Eventually(t, "the plain job's submitter Job", func() (bool, string) {
			err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: rayjob.SubmitterJobName(plain)}, &batchv1.Job{})
			return err == nil, fmt.Sprint(err)
		})
	})

	t.Run("HTTPMode: submitted once the head pod runs; a head that refuses is asked again, not a failure", func(t *testing.T) {
		ns := e.Namespace(t)
		plain := e.create(t, testutil.MakeRayJob(ns, "plain"))
		opted := e.create(t, testutil.MakeRayJob(ns, "opted").With(early))
		cPlain, cOpted := e.waitCluster(t, plain), e.waitCluster(t, opted)
		e.headService(t, cPlain)
		e.headService(t, cOpted)
		headOpted := e.ray.Cluster(ns, cOpted.Name)
		headOpted.SetDown(true)

		e.runningHead(t, cPlain)
		e.runningHead(t, cOpted)
		// A head that refuses connections: the job is asked again (no watch event brings it back) and stays
		// Initializing, not failed.
		e.Eventually(t, "two submissions refused", func() (bool, string) {
			n := headOpted.Refusals()
			return n >= 2, fmt.Sprint(n, " refused")
		})
		got := testutil.Get(t, e.Env, opted)
		if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing || got.Status.Reason != "" || *got.Status.Failed != 0 {
			t.Errorf("head refusing: jobDeploymentStatus %s reason %q failed %d, want Initializing, no failure", got.Status.JobDeploymentStatus, got.Status.Reason, *got.Status.Failed)
		}
		// Up: the next look (no watch event comes) submits it.
		headOpted.SetDown(false)
		got = e.waitDeployment(t, opted, rayv1.JobDeploymentStatusRunning)
		if accepted, refused := headOpted.Submissions(); accepted != 1 || refused != 0 {
			t.Errorf("submissions: %d accepted, %d refused; want one", accepted, refused)
		}
		if _, ok := headOpted.Job(got.Status.JobId); !ok {
			t.Errorf("Ray does not hold job %s", got.Status.JobId)
		}
		if got.Status.RayClusterStatus.State == rayv1.Ready {
			t.Errorf("the cluster was never made ready, the job mirrors %q", got.Status.RayClusterStatus.State)
		}
		e.WaitEvent(t, opted, corev1.EventTypeNormal, rayjob.ReasonStartedBeforeClusterReady)
		e.waitJobStatus(t, opted, rayv1.JobStatusPending)

		e.poke(t, cPlain)
		got = testutil.WaitFor(t, e.Env, plain, "the poke mirrored", func(j *rayv1.RayJob) bool { return j.Status.RayClusterStatus.Reason == "poke 1" })
		if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing {
			t.Errorf("not opted in: jobDeploymentStatus %s, want Initializing", got.Status.JobDeploymentStatus)
		}
		if accepted, refused := e.ray.Cluster(ns, cPlain.Name).Submissions(); accepted+refused != 0 {
			t.Errorf("not opted in: %d submissions before the cluster is ready", accepted+refused)
		}
	})

	t.Run("a bad value of the annotation is a validation error naming it", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "badvalue").With(func(j *rayv1.RayJob) {
			j.Annotations = map[string]string{rayjob.AnnotationSubmitBeforeClusterReady: "yes"}
		}))
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusValidationFailed)
		want := `metadata.annotations[manta.dev/submit-before-cluster-ready]: Unsupported value: "yes": supported values: "true", "false"`
		if got.Status.Message != want {
			t.Errorf("message %q, want %q", got.Status.Message, want)
		}
		if note := e.WaitEvent(t, j, corev1.EventTypeWarning, rayjob.ReasonInvalidSpec); note != want {
			t.Errorf("event %q", note)
		}
	})
}

// headService writes what the RayCluster controller reports once it made the head Service: its name in
// status.head. The cluster stays not ready.
func (e *env) headService(t *testing.T, c *rayv1.RayCluster) {
	t.Helper()
	testutil.UpdateStatus(t, e.Env, c, func(c *rayv1.RayCluster) {
		c.Status.Head.ServiceName = clusterbuild.HeadServiceName(c)
		c.Status.DesiredWorkerReplicas = 1
	})
}

// runningHead creates the cluster's head pod, Running with an IP and not Ready (its readiness probe has not
// passed yet), as the RayCluster controller and the kubelet would.
func (e *env) runningHead(t *testing.T, c *rayv1.RayCluster) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name + "-head",
			Labels: map[string]string{rayv1.LabelCluster: c.Name, rayv1.LabelNodeType: rayv1.NodeTypeHead}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray:2.52.0"}}},
	}
	e.Create(t, p)
	testutil.SetPodPhase(t, e.cl, p, corev1.PodRunning, false, "10.1.0.5")
}

// noSubmitter fails the test when the job's submitter Job exists.
func (e *env) noSubmitter(t *testing.T, j *rayv1.RayJob) {
	t.Helper()
	err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: j.Namespace, Name: rayjob.SubmitterJobName(j)}, &batchv1.Job{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("job %s: a submitter Job before its cluster is ready (get: %v)", j.Name, err)
	}
}
