package envtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/idle"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/controller/rayjob/rayjobtest"
	"github.com/manta-dev/manta/internal/testutil"
)

const wait = 2 * time.Minute

type env struct {
	*testutil.Env
	cl  client.Client
	ray *rayjobtest.Ray
}

// startEnv runs the RayJob controller alone against a real kube-apiserver: the tests play the RayCluster
// controller (they set a cluster's status) and Ray (rayjobtest.Ray), so every transition can be driven.
func TestMain(m *testing.M) {
	if os.Getenv("MANTA_TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.Level(-2))))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	os.Exit(m.Run())
}

func startEnv(t *testing.T) *env { return startEnvWith(t, "") }

// startEnvWith is startEnv with the operator's batch scheduler, and Volcano's PodGroup CRD installed; opts change
// the controller's options.
func startEnvWith(t *testing.T, scheduler string, opts ...func(*rayjob.Options)) *env {
	crds := []string{filepath.Join(testutil.MustRepoRoot(t), "config", "crd")}
	if scheduler != "" {
		crds = append(crds, testutil.VolcanoCRDs(t))
	}
	cfg, cl := testutil.StartEnvtestWithCRDs(t, crds...)
	fr := rayjobtest.NewRay()
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.QPS, mgrCfg.Burst = 500, 1000
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	o := rayjob.Options{
		StatusCheckTimeout: 3 * time.Second, TransitionGracePeriod: 30 * time.Second, SubmitterFinishedTimeout: 2 * time.Second,
		PollInterval: 200 * time.Millisecond, StopOnDeleteTimeout: 3 * time.Second, MaxConcurrentReconciles: 4,
		BatchScheduler: scheduler,
	}
	for _, f := range opts {
		f(&o)
	}
	r := rayjob.NewReconciler(mgr, fr, o)
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testutil.RunManager(t, mgr)
	return &env{Env: testutil.NewEnv(cl), cl: cl, ray: fr}
}

// create creates the RayJob w builds.
func (e *env) create(t *testing.T, w *testutil.RayJobWrapper) *rayv1.RayJob {
	t.Helper()
	j := w.Obj()
	e.Create(t, j)
	return j
}

func (e *env) get(t *testing.T, j *rayv1.RayJob) *rayv1.RayJob {
	t.Helper()
	return testutil.Get(t, e.Env, j)
}

// waitFor polls the RayJob until cond holds.
func (e *env) waitFor(t *testing.T, j *rayv1.RayJob, what string, cond func(*rayv1.RayJob) bool) *rayv1.RayJob {
	t.Helper()
	return testutil.WaitFor(t, e.Env, j, what, cond)
}

func (e *env) waitDeployment(t *testing.T, j *rayv1.RayJob, want rayv1.JobDeploymentStatus) *rayv1.RayJob {
	t.Helper()
	return e.waitFor(t, j, "jobDeploymentStatus "+string(want), func(j *rayv1.RayJob) bool { return j.Status.JobDeploymentStatus == want })
}

// readyCluster waits for the job's cluster, checks it is the job's, and marks it ready as the RayCluster
// controller would.
func (e *env) readyCluster(t *testing.T, j *rayv1.RayJob) *rayv1.RayCluster {
	t.Helper()
	j = e.waitFor(t, j, "rayClusterName", func(j *rayv1.RayJob) bool { return j.Status.RayClusterName != "" })
	c := &rayv1.RayCluster{}
	testutil.Eventually(t, wait, "the RayCluster "+j.Status.RayClusterName, func() (bool, string) {
		err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: j.Namespace, Name: j.Status.RayClusterName}, c)
		return err == nil, fmt.Sprint(err)
	})
	c.Status.State = rayv1.Ready
	c.Status.ReadyWorkerReplicas = 1
	if err := e.cl.Status().Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) clusterGone(t *testing.T, ns, name string) {
	t.Helper()
	testutil.Eventually(t, wait, "RayCluster "+name+" deleted", func() (bool, string) {
		err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &rayv1.RayCluster{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func (e *env) update(t *testing.T, j *rayv1.RayJob, mutate func(*rayv1.RayJob)) {
	t.Helper()
	testutil.Eventually(t, wait, "update "+j.Name, func() (bool, string) {
		cur := e.get(t, j)
		mutate(cur)
		err := e.cl.Update(context.Background(), cur)
		return err == nil, fmt.Sprint(err)
	})
}

// waitEvent waits for an event of the given type and reason about the RayJob, and returns its note.
func (e *env) waitEvent(t *testing.T, j *rayv1.RayJob, typ, reason string) string {
	t.Helper()
	return e.WaitEvent(t, j, typ, reason)
}

func (e *env) requests(ns, cluster string) (reqs int, jobs int, stops []string) {
	e.ray.With(ns, cluster, func(h *rayjobtest.Head) {
		reqs, jobs, stops = len(h.Requests), len(h.Jobs), append([]string(nil), h.Stops...)
	})
	return
}

func TestEnvtest(t *testing.T) {
	e := startEnv(t)

	t.Run("HTTPMode runs to Complete, submits once, reports Ray's times, and deletes the cluster", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "http-ok").With(func(j *rayv1.RayJob) {
			j.Labels = map[string]string{"team": "a"}
			j.Spec.ShutdownAfterJobFinishes = true
			j.Spec.Metadata = map[string]string{"owner": "me"}
			j.Spec.RuntimeEnvYAML = "env_vars:\n  A: b\n"
			j.Spec.EntrypointNumCpus = 0.5
			j.Spec.EntrypointResources = `{"custom": 2}`
		}))
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusInitializing)
		if !strings.HasPrefix(got.Status.JobId, "http-ok-") || len(got.Status.JobId) != len("http-ok-")+5 {
			t.Errorf("jobId = %q, want http-ok-<5 chars>", got.Status.JobId)
		}
		c := e.readyCluster(t, j)
		if c.Labels[rayv1.LabelOriginCRD] != "RayJob" || c.Labels[rayv1.LabelOriginCRName] != "http-ok" || c.Labels["team"] != "a" {
			t.Errorf("cluster labels = %v", c.Labels)
		}
		if !metav1.IsControlledBy(c, got) {
			t.Errorf("cluster is not controlled by the RayJob: %v", c.OwnerReferences)
		}
		got = e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
		if want := c.Name + "-head-svc." + ns + ".svc.cluster.local:8265"; got.Status.DashboardURL != want {
			t.Errorf("dashboardURL = %q, want %q", got.Status.DashboardURL, want)
		}
		if got.Status.RayClusterStatus.State != rayv1.Ready {
			t.Errorf("rayClusterStatus.state = %q", got.Status.RayClusterStatus.State)
		}
		id := got.Status.JobId
		testutil.Eventually(t, wait, "the job submitted", func() (bool, string) {
			n, _, _ := e.requests(ns, c.Name)
			return n > 0, ""
		})
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) {
			r := h.Requests[0]
			if r.SubmissionID != id || r.Metadata["owner"] != "me" || r.EntrypointNumCPUs != 0.5 || r.EntrypointResources["custom"] != 2 || r.RuntimeEnv["env_vars"] == nil {
				t.Errorf("submit request = %+v", r)
			}
			h.SetJob(id, rayv1.JobStatusRunning, 1_700_000_000_000, 0)
		})
		e.waitFor(t, j, "jobStatus RUNNING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusRunning })
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) { h.SetJob(id, rayv1.JobStatusSucceeded, 1_700_000_000_000, 1_700_000_005_000) })
		got = e.waitDeployment(t, j, rayv1.JobDeploymentStatusComplete)
		if got.Status.JobStatus != rayv1.JobStatusSucceeded || ptr.Deref(got.Status.Succeeded, -1) != 1 || ptr.Deref(got.Status.Failed, -1) != 0 || got.Status.EndTime == nil {
			t.Errorf("status = %+v", got.Status)
		}
		if info := got.Status.RayJobStatusInfo; info.StartTime == nil || info.StartTime.Unix() != 1_700_000_000 || info.EndTime == nil || info.EndTime.Unix() != 1_700_000_005 {
			t.Errorf("rayJobInfo = %+v", info)
		}
		if got.Status.ObservedGeneration != got.Generation {
			t.Errorf("observedGeneration = %d, generation %d", got.Status.ObservedGeneration, got.Generation)
		}
		e.clusterGone(t, ns, c.Name)
		if n, _, _ := e.requests(ns, c.Name); n != 1 {
			t.Errorf("submit calls = %d, want 1", n)
		}
	})

	t.Run("HTTPMode submit that times out after Ray accepted it is not submitted again", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "http-timeout"))
		got := e.waitFor(t, j, "rayClusterName", func(j *rayv1.RayJob) bool { return j.Status.RayClusterName != "" })
		e.ray.With(ns, got.Status.RayClusterName, func(h *rayjobtest.Head) { h.AcceptThenTimeout = true })
		c := e.readyCluster(t, j)
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
		testutil.Eventually(t, wait, "the job seen as PENDING", func() (bool, string) {
			g := e.get(t, j)
			return g.Status.JobStatus == rayv1.JobStatusPending, string(g.Status.JobStatus)
		})
		// The controller has had its chances to submit again once it has polled the job three more times.
		var polled int
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) { polled = h.Gets })
		testutil.Eventually(t, wait, "three more polls of the job", func() (bool, string) {
			var n int
			e.ray.With(ns, c.Name, func(h *rayjobtest.Head) { n = h.Gets })
			return n >= polled+3, fmt.Sprintf("%d polls", n-polled)
		})
		reqs, jobs, _ := e.requests(ns, c.Name)
		if jobs != 1 || reqs != 1 {
			t.Errorf("submit calls = %d, jobs = %d; want 1 and 1", reqs, jobs)
		}
	})

	t.Run("dashboard down longer than the status check timeout fails the job", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "down"))
		c := e.readyCluster(t, j)
		e.waitFor(t, j, "PENDING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusPending })
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) { h.Down = true })
		e.waitFor(t, j, "jobStatusCheckFailureStartTime", func(j *rayv1.RayJob) bool { return j.Status.JobStatusCheckFailureStartTime != nil })
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if got.Status.Reason != rayv1.JobStatusCheckTimeoutExceeded {
			t.Errorf("reason = %q", got.Status.Reason)
		}
	})

	t.Run("a job Ray lost is not resubmitted", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "lost"))
		c := e.readyCluster(t, j)
		got := e.waitFor(t, j, "PENDING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusPending })
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) { delete(h.Jobs, got.Status.JobId) })
		got = e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if got.Status.Reason != rayv1.JobStatusCheckTimeoutExceeded || !strings.Contains(got.Status.Message, "no longer knows") {
			t.Errorf("reason %q message %q", got.Status.Reason, got.Status.Message)
		}
		if n, _, _ := e.requests(ns, c.Name); n != 1 {
			t.Errorf("submit calls = %d, want 1", n)
		}
	})

	t.Run("backoffLimit retries on a new cluster with a new job id", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "retry").BackoffLimit(1))
		c1 := e.readyCluster(t, j)
		first := e.waitFor(t, j, "PENDING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusPending })
		e.ray.With(ns, c1.Name, func(h *rayjobtest.Head) { h.SetJob(first.Status.JobId, rayv1.JobStatusFailed, 1, 2) })
		e.waitFor(t, j, "a second cluster", func(j *rayv1.RayJob) bool {
			return j.Status.RayClusterName != "" && j.Status.RayClusterName != c1.Name
		})
		e.clusterGone(t, ns, c1.Name)
		c2 := e.readyCluster(t, j)
		second := e.waitFor(t, j, "PENDING again", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusPending })
		if second.Status.JobId == first.Status.JobId || ptr.Deref(second.Status.Failed, 0) != 1 {
			t.Errorf("second attempt: jobId %q (first %q), failed %v", second.Status.JobId, first.Status.JobId, second.Status.Failed)
		}
		e.ray.With(ns, c2.Name, func(h *rayjobtest.Head) { h.SetJob(second.Status.JobId, rayv1.JobStatusFailed, 1, 2) })
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if got.Status.Reason != rayv1.AppFailed || ptr.Deref(got.Status.Failed, 0) != 2 {
			t.Errorf("status = %+v", got.Status)
		}
	})

	t.Run("K8sJobMode creates one submitter Job and completes when Ray and the submitter are done", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "k8sjob").With(func(j *rayv1.RayJob) {
			j.Spec.SubmissionMode = rayv1.K8sJobMode
			j.Spec.SubmitterConfig = &rayv1.SubmitterConfig{BackoffLimit: ptr.To[int32](5)}
		}))
		c := e.readyCluster(t, j)
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
		sub := &batchv1.Job{}
		testutil.Eventually(t, wait, "the submitter Job", func() (bool, string) {
			err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "k8sjob"}, sub)
			return err == nil, fmt.Sprint(err)
		})
		ctr := sub.Spec.Template.Spec.Containers[0]
		script := strings.Join(append(ctr.Command, ctr.Args...), " ")
		if ctr.Name != rayjob.SubmitterContainerName || ctr.Image != "rayproject/ray:2.52.0" || ptr.Deref(sub.Spec.BackoffLimit, 0) != 5 ||
			!strings.Contains(script, "--submission-id") || !strings.Contains(script, "ray job logs") ||
			sub.Labels["app.kubernetes.io/created-by"] != "kuberay-operator" || !metav1.IsControlledBy(sub, got) {
			t.Errorf("submitter Job = %+v", sub)
		}
		env := map[string]string{}
		for _, v := range ctr.Env {
			env[v.Name] = v.Value
		}
		if env["RAY_JOB_SUBMISSION_ID"] != got.Status.JobId || env["RAY_DASHBOARD_ADDRESS"] != c.Name+"-head-svc."+ns+".svc.cluster.local:8265" {
			t.Errorf("submitter env = %v", env)
		}
		// The submitter submits; Ray finishes; the submitter finishes.
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) {
			h.SetJob(got.Status.JobId, rayv1.JobStatusSucceeded, time.Now().UnixMilli()-1000, time.Now().UnixMilli())
		})
		e.waitFor(t, j, "SUCCEEDED", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusSucceeded })
		if g := e.get(t, j); g.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusRunning {
			t.Errorf("completed before the submitter finished: %s", g.Status.JobDeploymentStatus)
		}
		now := metav1.Now()
		sub.Status.StartTime = &now
		sub.Status.CompletionTime = &now
		sub.Status.Succeeded = 1
		sub.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		if err := e.cl.Status().Update(context.Background(), sub); err != nil {
			t.Fatal(err)
		}
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusComplete)
	})

	t.Run("K8sJobMode submitter that fails before submitting fails the RayJob", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "k8sfail").Mode(rayv1.K8sJobMode))
		e.readyCluster(t, j)
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
		sub := &batchv1.Job{}
		testutil.Eventually(t, wait, "the submitter Job", func() (bool, string) {
			err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "k8sfail"}, sub)
			return err == nil, fmt.Sprint(err)
		})
		now := metav1.Now()
		sub.Status.StartTime = &now
		sub.Status.Failed = 3
		sub.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"},
		}
		if err := e.cl.Status().Update(context.Background(), sub); err != nil {
			t.Fatal(err)
		}
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if got.Status.Reason != rayv1.SubmissionFailed || !strings.Contains(got.Status.Message, "backoff limit") {
			t.Errorf("reason %q message %q", got.Status.Reason, got.Status.Message)
		}
	})

	t.Run("K8sJobMode fails 30 s after the submitter finished when Ray never reports the job terminal", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "k8sgrace").With(func(j *rayv1.RayJob) {
			j.Spec.SubmissionMode = rayv1.K8sJobMode
			j.Spec.ShutdownAfterJobFinishes = true
		}))
		c := e.readyCluster(t, j)
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) {
			h.SetJob(got.Status.JobId, rayv1.JobStatusRunning, time.Now().UnixMilli(), 0)
		})
		e.waitFor(t, j, "RUNNING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusRunning })
		// The submitter completes while Ray goes on reporting the job RUNNING.
		sub := &batchv1.Job{}
		if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "k8sgrace"}, sub); err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		sub.Status.StartTime, sub.Status.CompletionTime, sub.Status.Succeeded = &now, &now, 1
		sub.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		if err := e.cl.Status().Update(context.Background(), sub); err != nil {
			t.Fatal(err)
		}
		got = e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		s := got.Status
		wantMsg := fmt.Sprintf("The RayJob submitter finished at %s but the ray job did not reach terminal state within 2s", now.Local().Format(time.DateTime))
		if s.Reason != rayv1.JobDeploymentStatusTransitionGracePeriodExceeded || s.JobStatus != rayv1.JobStatusFailed || s.Message != wantMsg ||
			ptr.Deref(s.Failed, 0) != 1 || s.EndTime == nil || s.EndTime.Time.Before(now.Add(2*time.Second-time.Second)) {
			t.Errorf("status %+v, want message %q", s, wantMsg)
		}
		e.clusterGone(t, ns, c.Name)
		e.waitEvent(t, j, corev1.EventTypeNormal, rayjob.ReasonDeletedCluster)
	})

	t.Run("SidecarMode fails 30 s after the submitter container exited when Ray never reports the job terminal", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "sidegrace").Mode(rayv1.SidecarMode))
		c := e.readyCluster(t, j)
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) {
			h.SetJob(got.Status.JobId, rayv1.JobStatusRunning, time.Now().UnixMilli(), 0)
		})
		e.waitFor(t, j, "RUNNING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusRunning })
		// The head pod (no RayCluster controller runs here), whose submitter container exits 0 while Ray goes on
		// reporting the job RUNNING.
		head := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.Name + "-head",
			Labels: map[string]string{rayv1.LabelCluster: c.Name, rayv1.LabelNodeType: rayv1.NodeTypeHead}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray"}, {Name: rayjob.SubmitterContainerName, Image: "rayproject/ray"}}}}
		if err := e.cl.Create(context.Background(), head); err != nil {
			t.Fatal(err)
		}
		// A minute-old exit, as the kubelet reports it, at second precision: the timeout (2 s here) has passed.
		finished := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
		head.Status.Phase = corev1.PodRunning
		head.Status.ContainerStatuses = []corev1.ContainerStatus{
			{Name: "ray-head", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: finished}}},
			{Name: rayjob.SubmitterContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: finished}}},
		}
		if err := e.cl.Status().Update(context.Background(), head); err != nil {
			t.Fatal(err)
		}
		got = e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		s := got.Status
		wantMsg := fmt.Sprintf("The RayJob submitter finished at %s but the ray job did not reach terminal state within 2s", finished.Local().Format(time.DateTime))
		if s.Reason != rayv1.JobDeploymentStatusTransitionGracePeriodExceeded || s.JobStatus != rayv1.JobStatusFailed || s.Message != wantMsg {
			t.Errorf("status %+v, want message %q", s, wantMsg)
		}
	})

	t.Run("suspend: Suspended without a cluster, resume creates one, suspend again deletes it", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "susp").Suspend().ShutdownAfterJobFinishes())
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusSuspended)
		if got.Status.RayClusterName != "" {
			t.Errorf("suspended job has cluster %q", got.Status.RayClusterName)
		}
		e.update(t, j, func(j *rayv1.RayJob) { j.Spec.Suspend = false })
		c := e.readyCluster(t, j)
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
		e.update(t, j, func(j *rayv1.RayJob) { j.Spec.Suspend = true })
		got = e.waitDeployment(t, j, rayv1.JobDeploymentStatusSuspended)
		e.clusterGone(t, ns, c.Name)
		if got.Status.RayClusterName != "" || got.Status.JobStatus != "" || got.Status.RayClusterStatus.State != "" {
			t.Errorf("status after suspend = %+v", got.Status)
		}
	})

	t.Run("suspended mid-run without shutdownAfterJobFinishes: ValidationFailed; the fixed spec starts over on a new cluster once the old is gone", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "badsusp"))
		c := e.readyCluster(t, j)
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
		e.update(t, j, func(j *rayv1.RayJob) { j.Spec.Suspend = true })
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusValidationFailed)
		if !strings.Contains(got.Status.Message, "spec.suspend") {
			t.Errorf("message %q", got.Status.Message)
		}
		e.update(t, j, func(j *rayv1.RayJob) { j.Spec.Suspend = false })
		// The old run's cluster goes before the new run names its own: never two clusters at once.
		e.clusterGone(t, ns, c.Name)
		got = e.waitFor(t, j, "a new cluster", func(j *rayv1.RayJob) bool { return j.Status.RayClusterName != "" && j.Status.RayClusterName != c.Name })
		clusters := &rayv1.RayClusterList{}
		if err := e.cl.List(t.Context(), clusters, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, rc := range clusters.Items {
			if rc.Name != got.Status.RayClusterName {
				t.Errorf("cluster %s of the old run still there beside %s", rc.Name, got.Status.RayClusterName)
			}
		}
	})

	t.Run("activeDeadlineSeconds fails the job and stops it in Ray", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "deadline").ActiveDeadline(3))
		c := e.readyCluster(t, j)
		got := e.waitFor(t, j, "PENDING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusPending })
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) { h.SetJob(got.Status.JobId, rayv1.JobStatusRunning, 1, 0) })
		got = e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if want := fmt.Sprintf("The RayJob has passed the activeDeadlineSeconds. StartTime: %s. ActiveDeadlineSeconds: %d", got.Status.StartTime.Local(), *j.Spec.ActiveDeadlineSeconds); got.Status.Reason != rayv1.DeadlineExceeded || got.Status.Message != want {
			t.Errorf("reason = %q, message %q, want KubeRay's %q", got.Status.Reason, got.Status.Message, want)
		}
		if _, _, stops := e.requests(ns, c.Name); len(stops) == 0 || stops[0] != got.Status.JobId {
			t.Errorf("stops = %v", stops)
		}
	})

	t.Run("preRunningDeadlineSeconds fails a job whose cluster never gets ready", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "prerun").PreRunningDeadline(2))
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if got.Status.Reason != rayv1.PreRunningDeadlineExceeded {
			t.Errorf("reason = %q", got.Status.Reason)
		}
	})

	t.Run("invalid specs end in ValidationFailed naming the field", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "invalid").RuntimeEnvYAML("a: ["))
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusValidationFailed)
		if got.Status.Reason != rayv1.ValidationFailed || !strings.Contains(got.Status.Message, "spec.runtimeEnvYAML") {
			t.Errorf("reason %q message %q", got.Status.Reason, got.Status.Message)
		}
		e.update(t, j, func(j *rayv1.RayJob) { j.Spec.RuntimeEnvYAML = "" })
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusInitializing)
	})

	t.Run("InteractiveMode waits for spec.jobId, then follows that job", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "interactive").Mode(rayv1.InteractiveMode).Entrypoint(""))
		c := e.readyCluster(t, j)
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusWaiting)
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) { h.SetJob("mine", rayv1.JobStatusRunning, 1, 0) })
		e.update(t, j, func(j *rayv1.RayJob) { j.Spec.JobId = "mine" })
		got := e.waitFor(t, j, "RUNNING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusRunning })
		if got.Status.JobId != "mine" || got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusRunning {
			t.Errorf("status = %+v", got.Status)
		}
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) { h.SetJob("mine", rayv1.JobStatusSucceeded, 1, 2) })
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusComplete)
		if n, _, _ := e.requests(ns, c.Name); n != 0 {
			t.Errorf("the operator submitted %d jobs in InteractiveMode", n)
		}
	})

	t.Run("SidecarMode puts the submitter in the head pod and follows the job", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "sidecar").Mode(rayv1.SidecarMode))
		c := e.readyCluster(t, j)
		head := c.Spec.HeadGroupSpec.Template.Spec
		if len(head.Containers) != 2 || head.Containers[1].Name != rayjob.SubmitterContainerName || head.RestartPolicy != corev1.RestartPolicyNever ||
			c.Annotations[rayv1.LabelDisableProvisionedHeadRestart] != "true" || c.Labels[rayv1.LabelJobSubmissionMode] != "SidecarMode" || !strings.Contains(strings.Join(head.Containers[1].Args, " "), "127.0.0.1:8265") {
			t.Errorf("head template = %+v, labels %v", head, c.Labels)
		}
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) { h.SetJob(got.Status.JobId, rayv1.JobStatusFailed, 1, 2) })
		got = e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if got.Status.Reason != rayv1.AppFailed || got.Status.JobStatus != rayv1.JobStatusFailed {
			t.Errorf("status = %+v", got.Status)
		}
		if n, _, _ := e.requests(ns, c.Name); n != 0 {
			t.Errorf("the operator submitted %d jobs in SidecarMode", n)
		}
	})

	t.Run("deletionRules: DeleteWorkers, then DeleteCluster, then DeleteSelf, each after its TTL", func(t *testing.T) {
		ns := e.Namespace(t)
		succeeded := rayv1.JobStatusSucceeded
		j := e.create(t, testutil.MakeRayJob(ns, "rules").With(func(j *rayv1.RayJob) {
			j.Spec.DeletionStrategy = &rayv1.DeletionStrategy{DeletionRules: []rayv1.DeletionRule{
				{Policy: rayv1.DeleteWorkers, Condition: rayv1.DeletionCondition{JobStatus: &succeeded, TTLSeconds: 0}},
				{Policy: rayv1.DeleteCluster, Condition: rayv1.DeletionCondition{JobStatus: &succeeded, TTLSeconds: 3}},
				{Policy: rayv1.DeleteSelf, Condition: rayv1.DeletionCondition{JobStatus: &succeeded, TTLSeconds: 6}},
			}}
		}))
		c := e.readyCluster(t, j)
		got := e.waitFor(t, j, "PENDING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusPending })
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) { h.SetJob(got.Status.JobId, rayv1.JobStatusSucceeded, 1, 2) })
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusComplete)
		testutil.Eventually(t, wait, "worker groups suspended", func() (bool, string) {
			cur := &rayv1.RayCluster{}
			if err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(c), cur); err != nil {
				return false, err.Error()
			}
			return ptr.Deref(cur.Spec.WorkerGroupSpecs[0].Suspend, false), "not yet"
		})
		if err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(j), &rayv1.RayJob{}); err != nil {
			t.Fatalf("RayJob gone too early: %v", err)
		}
		e.clusterGone(t, ns, c.Name)
		if note, want := e.waitEvent(t, j, corev1.EventTypeNormal, rayjob.ReasonSuspendedWorkers), "Set the `suspend` field to true for all worker groups in cluster "+ns+"/"+c.Name; note != want {
			t.Errorf("event note %q, want %q", note, want)
		}
		testutil.Eventually(t, wait, "the RayJob deleted", func() (bool, string) {
			err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(j), &rayv1.RayJob{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})

	t.Run("legacy onFailure DeleteNone keeps the cluster; onSuccess is not applied to a failure", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "legacy").With(func(j *rayv1.RayJob) {
			j.Spec.DeletionStrategy = &rayv1.DeletionStrategy{
				OnSuccess: &rayv1.DeletionPolicy{Policy: ptr.To(rayv1.DeleteCluster)},
				OnFailure: &rayv1.DeletionPolicy{Policy: ptr.To(rayv1.DeleteNone)},
			}
		}))
		c := e.readyCluster(t, j)
		got := e.waitFor(t, j, "PENDING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusPending })
		e.ray.With(ns, c.Name, func(h *rayjobtest.Head) { h.SetJob(got.Status.JobId, rayv1.JobStatusFailed, 1, 2) })
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		// A spec change the controller must observe: once it has, it has applied the deletion policy of the
		// finished job at least once.
		e.update(t, j, func(j *rayv1.RayJob) { j.Spec.TTLSecondsAfterFinished++ })
		e.waitFor(t, j, "the spec change observed", func(j *rayv1.RayJob) bool { return j.Status.ObservedGeneration == j.Generation })
		if err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(c), &rayv1.RayCluster{}); err != nil {
			t.Errorf("cluster deleted on failure with DeleteNone: %v", err)
		}
	})

	t.Run("deleting a running RayJob stops its Ray job", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "delete-me"))
		c := e.readyCluster(t, j)
		got := e.waitFor(t, j, "RUNNING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusPending })
		if !strings.Contains(strings.Join(got.Finalizers, ","), rayjob.Finalizer) {
			t.Errorf("finalizers = %v", got.Finalizers)
		}
		if err := e.cl.Delete(context.Background(), got); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, wait, "the RayJob deleted", func() (bool, string) {
			err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(j), &rayv1.RayJob{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		if _, _, stops := e.requests(ns, c.Name); len(stops) != 1 || stops[0] != got.Status.JobId {
			t.Errorf("stops = %v", stops)
		}
	})

	t.Run("clusterSelector uses an existing cluster and leaves it", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "selector").ClusterSelector(map[string]string{rayv1.LabelCluster: "shared"}))
		// Selected before it exists: a warning event as KubeRay's, the status message left alone.
		note := e.waitEvent(t, j, corev1.EventTypeWarning, rayjob.ReasonClusterNotFound)
		if want := "RayCluster " + ns + "/shared set in the clusterSelector is not found. It must be created manually"; note != want {
			t.Errorf("event note %q, want %q", note, want)
		}
		if got := e.get(t, j); got.Status.Message != "" || got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing {
			t.Errorf("status %+v", got.Status)
		}
		existing := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}, Spec: *testutil.RayJobClusterSpec()}
		if err := e.cl.Create(context.Background(), existing); err != nil {
			t.Fatal(err)
		}
		c := e.readyCluster(t, j)
		if c.Name != "shared" {
			t.Fatalf("cluster = %s", c.Name)
		}
		got := e.waitFor(t, j, "PENDING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusPending })
		e.ray.With(ns, "shared", func(h *rayjobtest.Head) { h.SetJob(got.Status.JobId, rayv1.JobStatusSucceeded, 1, 2) })
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusComplete)
		if err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(c), &rayv1.RayCluster{}); err != nil {
			t.Errorf("selected cluster deleted: %v", err)
		}
	})

	t.Run("clusterSelector resumes a cluster suspended for idleness, and runs the job on it", func(t *testing.T) {
		ns := e.Namespace(t)
		sleepy := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sleepy", Annotations: map[string]string{
			idle.AnnotationIdleTimeout: "10m", idle.AnnotationIdleSuspendedAt: "2026-01-01T00:00:00Z"}}, Spec: *testutil.RayJobClusterSpec()}
		sleepy.Spec.Suspend = ptr.To(true)
		if err := e.cl.Create(context.Background(), sleepy); err != nil {
			t.Fatal(err)
		}
		j := e.create(t, testutil.MakeRayJob(ns, "wake").ClusterSelector(map[string]string{rayv1.LabelCluster: "sleepy"}))
		if note := e.waitEvent(t, j, corev1.EventTypeNormal, rayjob.ReasonResumedIdleCluster); !strings.Contains(note, ns+"/sleepy") {
			t.Errorf("event note %q", note)
		}
		c := e.readyCluster(t, j)
		if ptr.Deref(c.Spec.Suspend, false) {
			t.Fatal("the selected cluster is still suspended")
		}
		got := e.waitFor(t, j, "PENDING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusPending })
		e.ray.With(ns, "sleepy", func(h *rayjobtest.Head) { h.SetJob(got.Status.JobId, rayv1.JobStatusSucceeded, 1, 2) })
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusComplete)
	})

	t.Run("a RayJob managed by another controller is left alone", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "foreign").ManagedBy("kueue.x-k8s.io/multikueue"))
		// The work queue hands out the foreign RayJob before one created after it: once that one is reconciled,
		// the controller has seen the foreign one too.
		e.waitDeployment(t, e.create(t, testutil.MakeRayJob(ns, "ours")), rayv1.JobDeploymentStatusInitializing)
		got := e.get(t, j)
		if got.Status.JobDeploymentStatus != "" || len(got.Finalizers) != 0 {
			t.Errorf("foreign RayJob touched: %+v finalizers %v", got.Status, got.Finalizers)
		}
	})
}
