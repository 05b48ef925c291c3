package envtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/idle"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/controller/shared/metawrite"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

type env struct {
	*testutil.Env
	cl  client.Client
	wcl client.WithWatch // watches what a test must see every change of
	ray *fakeray.Fleet
}

func TestMain(m *testing.M) {
	testutil.UseTestLogger()
	os.Exit(m.Run())
}

// startEnv runs the RayJob controller alone against a real kube-apiserver: the tests play the RayCluster
// controller (they set a cluster's status) and Ray (newRay's heads), so every transition can be driven.
func startEnv(t *testing.T) *env { return startEnvWith(t, "") }

// newRay is a fake Ray head per cluster whose jobs move only when the test says (fakeray.Options.Manual).
func newRay(t *testing.T) *fakeray.Fleet {
	fr := fakeray.NewFleet(fakeray.Options{Manual: true})
	t.Cleanup(fr.Close)
	return fr
}

// startEnvWith is startEnv with the operator's batch scheduler, and Volcano's PodGroup CRD installed; opts change
// the controller's options.
func startEnvWith(t *testing.T, scheduler string, opts ...func(*rayjob.Options)) *env {
	crds := []string{filepath.Join(testutil.MustRepoRoot(t), "config", "crd")}
	if scheduler != "" {
		crds = append(crds, testutil.VolcanoCRDs(t))
	}
	cfg, cl := testutil.StartEnvtestWithCRDs(t, crds...)
	fr := newRay(t)
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.QPS, mgrCfg.Burst = 500, 1000
	o := rayjob.Options{
		StatusCheckTimeout: 3 * time.Second, TransitionGracePeriod: 30 * time.Second, SubmitterFinishedTimeout: 2 * time.Second,
		PollInterval: 200 * time.Millisecond, StopOnDeleteTimeout: 3 * time.Second, MaxConcurrentReconciles: 4,
		BatchScheduler: scheduler,
	}
	startOperator(t, mgrCfg, fr, o, opts)
	wcl, err := client.NewWithWatch(cfg, client.Options{Scheme: cl.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return &env{Env: testutil.NewEnv(cl), cl: cl, wcl: wcl, ray: fr}
}

// startEnvOnFakeClock is startEnvWith with the controller on a fake clock that only the test moves: no deadline,
// timeout or grace passes while the test sets a scene up, however loaded the machine.
func startEnvOnFakeClock(t *testing.T, opts ...func(*rayjob.Options)) (*env, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(time.Now())
	return startEnvWith(t, "", append([]func(*rayjob.Options){func(o *rayjob.Options) { o.Clock = clk }}, opts...)...), clk
}

// startOperator runs the RayJob controller on cfg with o changed by opts, Ray played by fr, its manager's options
// changed by mgrOpts; it returns a function that stops it (the test's end does too).
func startOperator(t *testing.T, cfg *rest.Config, fr *fakeray.Fleet, o rayjob.Options, opts []func(*rayjob.Options), mgrOpts ...func(*ctrl.Options)) func() {
	t.Helper()
	mgr := testutil.NewManager(t, cfg, mgrOpts...)
	for _, f := range opts {
		f(&o)
	}
	if o.StatusWriter == nil {
		// The operator's own writer (internal/operator): with it the controller reads a RayJob's spec from the
		// cache in place, and the check below holds it to that.
		w, err := metawrite.NewStatus(mgr.GetConfig(), mgr.GetHTTPClient())
		if err != nil {
			t.Fatal(err)
		}
		o.StatusWriter = w
	}
	if err := rayjob.NewReconciler(mgr, fr, o).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	stop := testutil.StartManager(t, mgr)
	// Registered after the manager's own stop, so it runs first (cleanups run last in, first out); a manager the
	// test stopped itself has a cache that no longer follows the API server, and is not checked.
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			testutil.SpecsAsStored(t, mgr.GetCache(), mgr.GetAPIReader(), &rayv1.RayJobList{},
				func(o client.Object) any { return o.(*rayv1.RayJob).Spec })
		}
	})
	return func() { stopped = true; stop() }
}

// create creates the RayJob w builds.
func (e *env) create(t *testing.T, w *testutil.RayJobWrapper) *rayv1.RayJob {
	t.Helper()
	j := w.Obj()
	e.Create(t, j)
	return j
}

func (e *env) waitDeployment(t *testing.T, j *rayv1.RayJob, want rayv1.JobDeploymentStatus) *rayv1.RayJob {
	t.Helper()
	return testutil.WaitFor(t, e.Env, j, "jobDeploymentStatus "+string(want), func(j *rayv1.RayJob) bool { return j.Status.JobDeploymentStatus == want })
}

func (e *env) waitJobStatus(t *testing.T, j *rayv1.RayJob, want rayv1.JobStatus) *rayv1.RayJob {
	t.Helper()
	return testutil.WaitFor(t, e.Env, j, "jobStatus "+string(want), func(j *rayv1.RayJob) bool { return j.Status.JobStatus == want })
}

// readyCluster waits for the job's cluster, checks it is the job's, and marks it ready as the RayCluster
// controller would.
func (e *env) readyCluster(t *testing.T, j *rayv1.RayJob) *rayv1.RayCluster {
	t.Helper()
	return testutil.UpdateStatus(t, e.Env, e.waitCluster(t, j), func(c *rayv1.RayCluster) {
		c.Status.State = rayv1.Ready
		c.Status.ReadyWorkerReplicas = 1
	})
}

// submitted creates the RayJob w builds, marks its cluster ready and waits until Ray holds its job, PENDING; it
// returns the RayJob as created, its cluster, and the RayJob as it then is.
func (e *env) submitted(t *testing.T, w *testutil.RayJobWrapper) (j *rayv1.RayJob, c *rayv1.RayCluster, pending *rayv1.RayJob) {
	t.Helper()
	j = e.create(t, w)
	c = e.readyCluster(t, j)
	return j, c, e.waitJobStatus(t, j, rayv1.JobStatusPending)
}

// waitCluster waits for the job's cluster.
func (e *env) waitCluster(t *testing.T, j *rayv1.RayJob) *rayv1.RayCluster {
	t.Helper()
	j = testutil.WaitFor(t, e.Env, j, "rayClusterName", func(j *rayv1.RayJob) bool { return j.Status.RayClusterName != "" })
	return testutil.WaitFor(t, e.Env, &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: j.Status.RayClusterName}},
		"the RayCluster "+j.Status.RayClusterName, func(*rayv1.RayCluster) bool { return true })
}

// eventTime is when the controller recorded regarding's event of reason (the first, if several).
func (e *env) eventTime(t *testing.T, regarding client.Object, reason string) time.Time {
	t.Helper()
	l := &eventsv1.EventList{}
	if err := e.cl.List(context.Background(), l, client.InNamespace(regarding.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	for _, ev := range l.Items {
		if ev.Regarding.Name == regarding.GetName() && ev.Reason == reason {
			return ev.EventTime.Time
		}
	}
	t.Fatalf("no %s event for %s", reason, regarding.GetName())
	return time.Time{}
}

func (e *env) clusterGone(t *testing.T, ns, name string) {
	t.Helper()
	e.Eventually(t, "RayCluster "+name+" deleted", func() (bool, string) {
		err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &rayv1.RayCluster{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// requests is what reached the head of cluster: the submissions (accepted or refused), the jobs it holds, and the
// job IDs it was asked to stop.
func (e *env) requests(ns, cluster string) (reqs int, jobs int, stops []string) {
	h := e.ray.Cluster(ns, cluster)
	accepted, refused := h.Submissions()
	return accepted + refused, len(h.Jobs()), h.Stops()
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
		e.Eventually(t, "the job submitted", func() (bool, string) {
			n, _, _ := e.requests(ns, c.Name)
			return n > 0, ""
		})
		head := e.ray.Cluster(ns, c.Name)
		if r, ok := head.Job(id); !ok || r.SubmissionID != id || r.Metadata["owner"] != "me" || r.EntrypointNumCPUs != 0.5 || r.EntrypointResources["custom"] != 2 || r.RuntimeEnv["env_vars"] == nil {
			t.Errorf("submitted job %s = %+v (held: %v)", id, r, ok)
		}
		head.SetJob(id, ray.JobStatusRunning, 1_700_000_000_000, 0)
		e.waitJobStatus(t, j, rayv1.JobStatusRunning)
		e.ray.Cluster(ns, c.Name).SetJob(id, ray.JobStatusSucceeded, 1_700_000_000_000, 1_700_000_005_000)
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
		got := testutil.WaitFor(t, e.Env, j, "rayClusterName", func(j *rayv1.RayJob) bool { return j.Status.RayClusterName != "" })
		e.ray.Cluster(ns, got.Status.RayClusterName).DropNextSubmitAnswer()
		c := e.readyCluster(t, j)
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
		e.Eventually(t, "the job seen as PENDING", func() (bool, string) {
			g := testutil.Get(t, e.Env, j)
			return g.Status.JobStatus == rayv1.JobStatusPending, string(g.Status.JobStatus)
		})
		// The controller has had its chances to submit again once it has polled the job three more times.
		const poll = "GET /api/jobs/{id}"
		polled := e.ray.Cluster(ns, c.Name).Calls(poll)
		e.Eventually(t, "three more polls of the job", func() (bool, string) {
			n := e.ray.Cluster(ns, c.Name).Calls(poll)
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
		e.waitJobStatus(t, j, rayv1.JobStatusPending)
		e.ray.Cluster(ns, c.Name).SetDown(true)
		testutil.WaitFor(t, e.Env, j, "jobStatusCheckFailureStartTime", func(j *rayv1.RayJob) bool { return j.Status.JobStatusCheckFailureStartTime != nil })
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if got.Status.Reason != rayv1.JobStatusCheckTimeoutExceeded {
			t.Errorf("reason = %q", got.Status.Reason)
		}
	})

	t.Run("a job Ray lost is not resubmitted", func(t *testing.T) {
		ns := e.Namespace(t)
		j, c, _ := e.submitted(t, testutil.MakeRayJob(ns, "lost"))
		e.ray.Cluster(ns, c.Name).Restart()
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if got.Status.Reason != rayv1.JobStatusCheckTimeoutExceeded || !strings.Contains(got.Status.Message, "no longer knows") {
			t.Errorf("reason %q message %q", got.Status.Reason, got.Status.Message)
		}
		if n, _, _ := e.requests(ns, c.Name); n != 1 {
			t.Errorf("submit calls = %d, want 1", n)
		}
	})

	t.Run("backoffLimit retries on a new cluster with a new job id", func(t *testing.T) {
		ns := e.Namespace(t)
		j, c1, first := e.submitted(t, testutil.MakeRayJob(ns, "retry").BackoffLimit(1))
		e.ray.Cluster(ns, c1.Name).SetJob(first.Status.JobId, ray.JobStatusFailed, 1, 2)
		testutil.WaitFor(t, e.Env, j, "a second cluster", func(j *rayv1.RayJob) bool {
			return j.Status.RayClusterName != "" && j.Status.RayClusterName != c1.Name
		})
		e.clusterGone(t, ns, c1.Name)
		c2 := e.readyCluster(t, j)
		second := e.waitJobStatus(t, j, rayv1.JobStatusPending)
		if second.Status.JobId == first.Status.JobId || ptr.Deref(second.Status.Failed, 0) != 1 {
			t.Errorf("second attempt: jobId %q (first %q), failed %v", second.Status.JobId, first.Status.JobId, second.Status.Failed)
		}
		e.ray.Cluster(ns, c2.Name).SetJob(second.Status.JobId, ray.JobStatusFailed, 1, 2)
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
		e.Eventually(t, "the submitter Job", func() (bool, string) {
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
		e.ray.Cluster(ns, c.Name).SetJob(got.Status.JobId, ray.JobStatusSucceeded, time.Now().UnixMilli()-1000, time.Now().UnixMilli())
		e.waitJobStatus(t, j, rayv1.JobStatusSucceeded)
		if g := testutil.Get(t, e.Env, j); g.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusRunning {
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
		e.Eventually(t, "the submitter Job", func() (bool, string) {
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
		e.ray.Cluster(ns, c.Name).SetJob(got.Status.JobId, ray.JobStatusRunning, time.Now().UnixMilli(), 0)
		e.waitJobStatus(t, j, rayv1.JobStatusRunning)
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
		e.WaitEvent(t, j, corev1.EventTypeNormal, rayjob.ReasonDeletedCluster)
	})

	t.Run("SidecarMode fails 30 s after the submitter container exited when Ray never reports the job terminal", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "sidegrace").Mode(rayv1.SidecarMode))
		c := e.readyCluster(t, j)
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
		e.ray.Cluster(ns, c.Name).SetJob(got.Status.JobId, ray.JobStatusRunning, time.Now().UnixMilli(), 0)
		e.waitJobStatus(t, j, rayv1.JobStatusRunning)
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
		testutil.Update(t, e.Env, j, func(j *rayv1.RayJob) { j.Spec.Suspend = false })
		c := e.readyCluster(t, j)
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
		testutil.Update(t, e.Env, j, func(j *rayv1.RayJob) { j.Spec.Suspend = true })
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
		testutil.Update(t, e.Env, j, func(j *rayv1.RayJob) { j.Spec.Suspend = true })
		got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusValidationFailed)
		if !strings.Contains(got.Status.Message, "spec.suspend") {
			t.Errorf("message %q", got.Status.Message)
		}
		testutil.Update(t, e.Env, j, func(j *rayv1.RayJob) { j.Spec.Suspend = false })
		// The old run's cluster goes before the new run names its own: never two clusters at once.
		e.clusterGone(t, ns, c.Name)
		got = testutil.WaitFor(t, e.Env, j, "a new cluster", func(j *rayv1.RayJob) bool { return j.Status.RayClusterName != "" && j.Status.RayClusterName != c.Name })
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
		testutil.Update(t, e.Env, j, func(j *rayv1.RayJob) { j.Spec.RuntimeEnvYAML = "" })
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusInitializing)
	})

	t.Run("InteractiveMode waits for spec.jobId, then follows that job", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "interactive").Mode(rayv1.InteractiveMode).Entrypoint(""))
		c := e.readyCluster(t, j)
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusWaiting)
		e.ray.Cluster(ns, c.Name).SetJob("mine", ray.JobStatusRunning, 1, 0)
		testutil.Update(t, e.Env, j, func(j *rayv1.RayJob) { j.Spec.JobId = "mine" })
		got := e.waitJobStatus(t, j, rayv1.JobStatusRunning)
		if got.Status.JobId != "mine" || got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusRunning {
			t.Errorf("status = %+v", got.Status)
		}
		e.ray.Cluster(ns, c.Name).SetJob("mine", ray.JobStatusSucceeded, 1, 2)
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
		e.ray.Cluster(ns, c.Name).SetJob(got.Status.JobId, ray.JobStatusFailed, 1, 2)
		got = e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		if got.Status.Reason != rayv1.AppFailed || got.Status.JobStatus != rayv1.JobStatusFailed {
			t.Errorf("status = %+v", got.Status)
		}
		if n, _, _ := e.requests(ns, c.Name); n != 0 {
			t.Errorf("the operator submitted %d jobs in SidecarMode", n)
		}
	})

	// The order is read from a watch of the cluster, and each TTL from the times the controller recorded: a poll
	// of the cluster could miss its few seconds of suspended workers on a busy machine.
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
		got := e.waitJobStatus(t, j, rayv1.JobStatusPending)
		ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultWait)
		defer cancel()
		w, err := e.wcl.Watch(ctx, &rayv1.RayClusterList{}, client.InNamespace(ns),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: c.ResourceVersion, FieldSelector: "metadata.name=" + c.Name}})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		e.ray.Cluster(ns, c.Name).SetJob(got.Status.JobId, ray.JobStatusSucceeded, 1, 2)
		done := e.waitDeployment(t, j, rayv1.JobDeploymentStatusComplete)
		if done.Status.EndTime == nil {
			t.Fatalf("Complete with no endTime: %+v", done.Status)
		}
		end := done.Status.EndTime.Time // as stored, to the second: what the controller counts the TTLs from
		suspended := false
		for deleted := false; !deleted; {
			ev, ok := <-w.ResultChan()
			if !ok {
				t.Fatalf("the cluster's watch ended before its deletion (suspended seen: %v)", suspended)
			}
			cur, isRC := ev.Object.(*rayv1.RayCluster)
			if !isRC {
				t.Fatalf("watch event %s: %v", ev.Type, ev.Object)
			}
			deleted = ev.Type == watch.Deleted
			if !deleted && len(cur.Spec.WorkerGroupSpecs) > 0 && !suspended {
				suspended = true
				for _, g := range cur.Spec.WorkerGroupSpecs {
					suspended = suspended && ptr.Deref(g.Suspend, false)
				}
			}
		}
		if !suspended {
			t.Error("the cluster was deleted without its worker groups suspended first")
		}
		if note, want := e.WaitEvent(t, j, corev1.EventTypeNormal, rayjob.ReasonSuspendedWorkers), "Set the `suspend` field to true for all worker groups in cluster "+ns+"/"+c.Name; note != want {
			t.Errorf("event note %q, want %q", note, want)
		}
		e.Eventually(t, "the RayJob deleted", func() (bool, string) {
			err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(j), &rayv1.RayJob{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		for _, step := range []struct {
			reason string
			ttl    time.Duration
		}{{rayjob.ReasonDeletedCluster, 3 * time.Second}, {rayjob.ReasonDeletedSelf, 6 * time.Second}} {
			e.WaitEvent(t, j, corev1.EventTypeNormal, step.reason)
			if at := e.eventTime(t, j, step.reason); at.Before(end.Add(step.ttl)) {
				t.Errorf("%s at %s, before the job's end (%s) and its TTL %s", step.reason, at.Format(time.RFC3339Nano), end.Format(time.RFC3339), step.ttl)
			}
		}
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
		got := e.waitJobStatus(t, j, rayv1.JobStatusPending)
		e.ray.Cluster(ns, c.Name).SetJob(got.Status.JobId, ray.JobStatusFailed, 1, 2)
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusFailed)
		// A spec change the controller must observe: once it has, it has applied the deletion policy of the
		// finished job at least once.
		testutil.Update(t, e.Env, j, func(j *rayv1.RayJob) { j.Spec.TTLSecondsAfterFinished++ })
		testutil.WaitFor(t, e.Env, j, "the spec change observed", func(j *rayv1.RayJob) bool { return j.Status.ObservedGeneration == j.Generation })
		if err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(c), &rayv1.RayCluster{}); err != nil {
			t.Errorf("cluster deleted on failure with DeleteNone: %v", err)
		}
	})

	t.Run("deleting a running RayJob stops its Ray job", func(t *testing.T) {
		ns := e.Namespace(t)
		j, c, got := e.submitted(t, testutil.MakeRayJob(ns, "delete-me"))
		if !strings.Contains(strings.Join(got.Finalizers, ","), rayjob.Finalizer) {
			t.Errorf("finalizers = %v", got.Finalizers)
		}
		if err := e.cl.Delete(context.Background(), got); err != nil {
			t.Fatal(err)
		}
		e.Eventually(t, "the RayJob deleted", func() (bool, string) {
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
		note := e.WaitEvent(t, j, corev1.EventTypeWarning, rayjob.ReasonClusterNotFound)
		if want := "RayCluster " + ns + "/shared set in the clusterSelector is not found. It must be created manually"; note != want {
			t.Errorf("event note %q, want %q", note, want)
		}
		if got := testutil.Get(t, e.Env, j); got.Status.Message != "" || got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing {
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
		got := e.waitJobStatus(t, j, rayv1.JobStatusPending)
		e.ray.Cluster(ns, "shared").SetJob(got.Status.JobId, ray.JobStatusSucceeded, 1, 2)
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
		if note := e.WaitEvent(t, j, corev1.EventTypeNormal, rayjob.ReasonResumedIdleCluster); !strings.Contains(note, ns+"/sleepy") {
			t.Errorf("event note %q", note)
		}
		c := e.readyCluster(t, j)
		if ptr.Deref(c.Spec.Suspend, false) {
			t.Fatal("the selected cluster is still suspended")
		}
		got := e.waitJobStatus(t, j, rayv1.JobStatusPending)
		e.ray.Cluster(ns, "sleepy").SetJob(got.Status.JobId, ray.JobStatusSucceeded, 1, 2)
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusComplete)
	})

	t.Run("a RayJob managed by another controller is left alone", func(t *testing.T) {
		ns := e.Namespace(t)
		j := e.create(t, testutil.MakeRayJob(ns, "foreign").ManagedBy("kueue.x-k8s.io/multikueue"))
		// The work queue hands out the foreign RayJob before one created after it: once that one is reconciled,
		// the controller has seen the foreign one too.
		e.waitDeployment(t, e.create(t, testutil.MakeRayJob(ns, "ours")), rayv1.JobDeploymentStatusInitializing)
		got := testutil.Get(t, e.Env, j)
		if got.Status.JobDeploymentStatus != "" || len(got.Finalizers) != 0 {
			t.Errorf("foreign RayJob touched: %+v finalizers %v", got.Status, got.Finalizers)
		}
	})
}
