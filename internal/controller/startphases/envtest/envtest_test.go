package envtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/startphases"
	"github.com/manta-dev/manta/internal/metrics"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// samples are the histogram's sample counts of the series a test touches.
type samples map[string]uint64

func countSamples() samples {
	s := samples{}
	for _, k := range []struct{ kind, nodeType string }{{startphases.KindPod, "head"}, {startphases.KindPod, "worker"}, {startphases.KindRayCluster, ""}, {startphases.KindRayJob, ""}} {
		for _, p := range startphases.Phases {
			s[k.kind+"/"+k.nodeType+"/"+p.String()] = metrics.StartPhaseSamples(k.kind, p.String(), k.nodeType)
		}
	}
	return s
}

// added is what each series gained since before, the series that gained nothing left out.
func (s samples) added(before samples) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range s {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// TestEnvtest runs the start-phases controllers on the operator's manager (its cache, with only the Pulled
// events; its event queue) against a real API server. There is no kubelet: the test writes the pods' statuses, the
// kubelet's Pulled events and the RayCluster's and RayJob's statuses by hand, with times it chooses (a cold image
// pull of 3 minutes), and checks that each phase of each object gives exactly one sample however often the
// objects are reconciled, the late steps a Warning event each, and the end a summary naming the slowest step.
func TestEnvtest(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	env := testutil.NewEnv(cl)
	mgr, err := operator.NewManager(cfg, operator.Options{MetricsAddr: "0", HealthProbeAddr: "0", SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now().Add(-time.Hour)) // the epoch: before everything the test writes
	if err := startphases.NewReconciler(mgr, startphases.Options{LateThreshold: 2 * time.Minute, Clock: clk}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testutil.RunManager(t, mgr)
	ctx := context.Background()
	ns := env.Namespace(t)
	before := countSamples()

	job := testutil.MakeRayJob(ns, "job").Obj()
	env.Create(t, job)
	created := job.CreationTimestamp.Time
	at := func(s int) metav1.Time { return metav1.NewTime(created.Add(time.Duration(s) * time.Second)) }
	c := testutil.MakeRayCluster(ns, "job-c").Workers("small", 1).Label(rayv1.LabelOriginCRD, "RayJob").Label(rayv1.LabelOriginCRName, "job").Obj()
	env.Create(t, c)
	// The status the RayCluster controller writes for the spec: only then is the wanted pod count known.
	c.Status.DesiredWorkerReplicas, c.Status.ObservedGeneration = 1, c.Generation
	if err := cl.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	job.Status.RayClusterName, job.Status.JobDeploymentStatus = c.Name, rayv1.JobDeploymentStatusInitializing
	if err := cl.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}

	// The head: scheduled at 1 s, its image pulled cold (3 min), started at 182 s, Ready at 190 s. The worker:
	// scheduled at 2 s, the image already on its node (checked at 3 s), started at 185 s (after waiting for the
	// head), Ready at 195 s.
	type podTimes struct {
		name, nodeType, message       string
		sched, pulled, started, ready int
	}
	var pods []*corev1.Pod
	for _, pt := range []podTimes{
		{"job-c-head", "head", `Successfully pulled image "rayproject/ray:2.52.0" in 2m59s (2m59s including waiting). Image size: 674000000 bytes.`, 1, 180, 182, 190},
		{"job-c-small-worker-0", "worker", `Container image "rayproject/ray:2.52.0" already present on machine and can be accessed by the pod`, 2, 3, 185, 195},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pt.name, Labels: map[string]string{
			rayv1.LabelCluster: c.Name, rayv1.LabelNodeType: pt.nodeType}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray", Image: "rayproject/ray:2.52.0"}}}}
		env.Create(t, p)
		// The pod itself was made at the job's creation (to the second; its own timestamp is later by the test's
		// writes, which would only shorten the steps).
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at(pt.sched)},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: at(pt.ready)}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "ray", Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(pt.started)}}}}}
		if err := cl.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		env.Create(t, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pt.name + ".pulled"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name, UID: p.UID, APIVersion: "v1", FieldPath: "spec.containers{ray}"},
			Reason:         "Pulled", Message: pt.message, Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "kubelet"},
			FirstTimestamp: at(pt.pulled), LastTimestamp: at(pt.pulled)})
		pods = append(pods, p)
	}
	// Another event about the head, which the cache must not hold (only Pulled is watched).
	env.Create(t, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job-c-head.started"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pods[0].Name, UID: pods[0].UID, APIVersion: "v1"},
		Reason:         "Started", Message: "Started container ray", Type: corev1.EventTypeNormal, LastTimestamp: at(1)})

	// Pod phases are measured from each pod's own creation; the cluster's from the cluster's.
	env.Eventually(t, "every pod phase recorded", func() (bool, string) {
		a := countSamples().added(before)
		return a["Pod/head/ray_ready"] == 1 && a["Pod/worker/ray_ready"] == 1 && a["Pod/head/image_pulled"] == 1 && a["Pod/worker/image_pulled"] == 1, fmt.Sprint(a)
	})
	late := env.WaitEvent(t, c, corev1.EventTypeWarning, "SlowImagePull")
	if !strings.Contains(late, "image pull took") || !strings.Contains(late, "last pod: job-c-head") {
		t.Errorf("SlowImagePull note = %q", late)
	}

	// The cluster turns ready at 200 s.
	c = testutil.Get(t, env, c)
	c.Status.State = rayv1.Ready
	c.Status.StateTransitionTimes = map[rayv1.ClusterState]*metav1.Time{rayv1.Ready: ptr.To(at(200))}
	if err := cl.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	summary := env.WaitEvent(t, c, corev1.EventTypeNormal, startphases.ReasonSummary)
	// The cluster's steps: its creation follows the job's by the test's writes (under a second, rounded into
	// the first step), so check the words, not the first figure.
	if !strings.HasPrefix(summary, "RayCluster started in ") || !strings.Contains(summary, ": image pull ") || !strings.Contains(summary, "(slowest)") ||
		!strings.Contains(summary, "container start 5s, Ray start 15s") {
		t.Errorf("cluster summary = %q", summary)
	}
	if i := strings.Index(summary, "(slowest)"); !strings.HasPrefix(summary[strings.Index(summary, ": ")+2:i], "image pull") {
		t.Errorf("cluster summary names another step the slowest: %q", summary)
	}

	// The job: Ray takes it at 205 s (submitted), the operator sees it RUNNING at 210 s, it ends at 400 s.
	job = testutil.Get(t, env, job)
	job.Status.JobStatus, job.Status.JobDeploymentStatus = rayv1.JobStatusPending, rayv1.JobDeploymentStatusRunning
	job.Status.RayJobStatusInfo.StartTime = ptr.To(at(205))
	if err := cl.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
	env.Eventually(t, "submitted recorded", func() (bool, string) {
		a := countSamples().added(before)
		return a["RayJob//submitted"] == 1, fmt.Sprint(a)
	})
	clk.SetTime(created.Add(210 * time.Second))
	job.Status.JobStatus = rayv1.JobStatusRunning
	if err := cl.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
	env.Eventually(t, "running recorded", func() (bool, string) {
		a := countSamples().added(before)
		return a["RayJob//running"] == 1, fmt.Sprint(a)
	})
	job.Status.JobStatus, job.Status.JobDeploymentStatus = rayv1.JobStatusSucceeded, rayv1.JobDeploymentStatusComplete
	job.Status.RayJobStatusInfo.EndTime, job.Status.EndTime = ptr.To(at(400)), ptr.To(at(401))
	if err := cl.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
	jobSummary := env.WaitEvent(t, job, corev1.EventTypeNormal, startphases.ReasonSummary)
	if want := "RayJob finished in 6m40s: job run 3m10s (slowest), scheduling 2s, image pull 2m58s, container start 5s, Ray start 15s, job submission 5s, waiting in Ray 5s"; jobSummary != want {
		t.Errorf("job summary =\n %q, want\n %q", jobSummary, want)
	}
	if note := env.WaitEvent(t, job, corev1.EventTypeWarning, "SlowImagePull"); !strings.HasPrefix(note, "RayJob reached image_pulled 3m0s after creation: the image pull took 2m58s") {
		t.Errorf("job SlowImagePull note = %q", note)
	}

	// Reconciles of everything again (labels on the pods, the cluster and the job; the pods' status rewritten), then
	// a second worker that is only scheduled: once its sample is in, the reconciles before it are done too (one
	// worker per controller), and no other series may have grown.
	for _, p := range pods {
		p = testutil.Get(t, env, p)
		p.Labels["touched"] = "1"
		if err := cl.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	c = testutil.Get(t, env, c)
	c.Labels["touched"] = "1"
	if err := cl.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	job = testutil.Get(t, env, job)
	job.Labels = map[string]string{"touched": "1"}
	if err := cl.Update(ctx, job); err != nil {
		t.Fatal(err)
	}
	extra := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job-c-small-worker-1", Labels: map[string]string{
		rayv1.LabelCluster: c.Name, rayv1.LabelNodeType: "worker"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray", Image: "rayproject/ray:2.52.0"}}}}
	env.Create(t, extra)
	extra.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := cl.Status().Update(ctx, extra); err != nil {
		t.Fatal(err)
	}
	env.Eventually(t, "the extra worker's scheduled sample", func() (bool, string) {
		a := countSamples().added(before)
		return a["Pod/worker/scheduled"] == 2, fmt.Sprint(a)
	})
	// The job's reconcile after its label change: its controller has its own queue, so wait for a reconcile that
	// follows it (the cluster's label change maps to the job too, and the job's summary series is counted by the
	// event queue): a second job, created now, whose submitted sample comes after.
	job2 := testutil.MakeRayJob(ns, "job2").Obj()
	env.Create(t, job2)
	job2.Status.RayJobStatusInfo.StartTime = ptr.To(metav1.Now())
	if err := cl.Status().Update(ctx, job2); err != nil {
		t.Fatal(err)
	}
	env.Eventually(t, "the second job's submitted sample", func() (bool, string) {
		a := countSamples().added(before)
		return a["RayJob//submitted"] == 2, fmt.Sprint(a)
	})

	want := map[string]uint64{
		"Pod/head/scheduled": 1, "Pod/head/image_pulled": 1, "Pod/head/containers_started": 1, "Pod/head/ray_ready": 1,
		"Pod/worker/scheduled": 2, "Pod/worker/image_pulled": 1, "Pod/worker/containers_started": 1, "Pod/worker/ray_ready": 1,
		"RayCluster//scheduled": 1, "RayCluster//image_pulled": 1, "RayCluster//containers_started": 1, "RayCluster//ray_ready": 1,
		"RayJob//scheduled": 1, "RayJob//image_pulled": 1, "RayJob//containers_started": 1, "RayJob//ray_ready": 1,
		"RayJob//submitted": 2, "RayJob//running": 1, "RayJob//finished": 1,
	}
	got := countSamples().added(before)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("samples added:\n got %v\nwant %v", got, want)
	}
}
