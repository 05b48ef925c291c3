package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func provisioned(status metav1.ConditionStatus) []metav1.Condition {
	return []metav1.Condition{{Type: string(rayv1.RayClusterProvisioned), Status: status}}
}

func TestClusterProvisionedDuration(t *testing.T) {
	c := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u1", CreationTimestamp: metav1.NewTime(t0)}}
	c.Status.Conditions = provisioned(metav1.ConditionTrue)

	// Already provisioned before: no new observation.
	ObserveCluster(c, &rayv1.RayClusterStatus{Conditions: provisioned(metav1.ConditionTrue)}, t0.Add(time.Hour))
	if n := testutil.CollectAndCount(clusterProvisionedDuration); n != 0 {
		t.Fatalf("%d series after a status that was already provisioned", n)
	}
	ObserveCluster(c, &rayv1.RayClusterStatus{Conditions: provisioned(metav1.ConditionFalse)}, t0.Add(42*time.Second))
	want := `
# HELP kuberay_cluster_provisioned_duration_seconds The time, in seconds, when a RayCluster's ` + "`RayClusterProvisioned`" + ` status transitions from false (or unset) to true
# TYPE kuberay_cluster_provisioned_duration_seconds gauge
kuberay_cluster_provisioned_duration_seconds{name="c",namespace="ns",uid="u1"} 42
`
	if err := testutil.CollectAndCompare(clusterProvisionedDuration, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// The same name recreated (a new UID) before the old cluster's deletion was seen: its series replaces the old.
	again := c.DeepCopy()
	again.UID, again.CreationTimestamp = "u2", metav1.NewTime(t0.Add(time.Hour))
	ObserveCluster(again, &rayv1.RayClusterStatus{}, t0.Add(time.Hour+7*time.Second))
	if err := testutil.CollectAndCompare(clusterProvisionedDuration, strings.NewReader(strings.Replace(strings.Replace(want, "u1", "u2", 1), "} 42", "} 7", 1))); err != nil {
		t.Error(err)
	}
	ForgetCluster(types.NamespacedName{Namespace: "ns", Name: "c"})
	if n := testutil.CollectAndCount(clusterProvisionedDuration); n != 0 {
		t.Errorf("%d series after ForgetCluster", n)
	}
}

func TestJobExecutionDuration(t *testing.T) {
	j := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: "u2"}}
	j.Status.StartTime = ptr.To(metav1.NewTime(t0))
	for _, step := range []struct {
		from, to rayv1.JobDeploymentStatus
		failed   int32
		observed bool
	}{
		{rayv1.JobDeploymentStatusInitializing, rayv1.JobDeploymentStatusRunning, 0, false},
		{rayv1.JobDeploymentStatusRunning, rayv1.JobDeploymentStatusRetrying, 0, true},
		{rayv1.JobDeploymentStatusRunning, rayv1.JobDeploymentStatusComplete, 1, true},
		{rayv1.JobDeploymentStatusComplete, rayv1.JobDeploymentStatusComplete, 1, false},
	} {
		before := testutil.CollectAndCount(jobExecutionDuration)
		j.Status.JobDeploymentStatus = step.to
		ObserveJob(j, &rayv1.RayJobStatus{JobDeploymentStatus: step.from, Failed: ptr.To(step.failed)}, t0.Add(10*time.Second))
		if got := testutil.CollectAndCount(jobExecutionDuration) - before; got != map[bool]int{true: 1}[step.observed] {
			t.Errorf("%s -> %s: %d new series", step.from, step.to, got)
		}
	}
	want := `
# HELP kuberay_job_execution_duration_seconds Duration from when the RayJob CR’s JobDeploymentStatus transitions from Initializing to either the Retrying state or a terminal state, such as Complete or Failed. The Retrying state indicates that the CR previously failed and that spec.backoffLimit is enabled.
# TYPE kuberay_job_execution_duration_seconds gauge
kuberay_job_execution_duration_seconds{job_deployment_status="Complete",name="j",namespace="ns",retry_count="1",uid="u2"} 10
kuberay_job_execution_duration_seconds{job_deployment_status="Retrying",name="j",namespace="ns",retry_count="0",uid="u2"} 10
`
	if err := testutil.CollectAndCompare(jobExecutionDuration, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	ForgetJob(types.NamespacedName{Namespace: "ns", Name: "j"})
	if n := testutil.CollectAndCount(jobExecutionDuration); n != 0 {
		t.Errorf("%d series after ForgetJob", n)
	}
}

func TestImagePulls(t *testing.T) {
	ObservePull(OutcomeSucceeded, 3*time.Second)
	ObservePull(OutcomeFailed, 100*time.Second)
	ObservePull(OutcomeSucceeded, 5*time.Second)
	if got := testutil.ToFloat64(imagePulls.WithLabelValues(OutcomeSucceeded)); got != 2 {
		t.Errorf("succeeded pulls = %v, want 2", got)
	}
	if n := testutil.CollectAndCount(imagePullDuration, "manta_imagepulljob_pull_duration_seconds"); n != 2 {
		t.Errorf("%d pull duration series, want one per outcome", n)
	}
}

// TestObjectSeries: the info and condition series of every kind, from a reader, with KubeRay's names and labels,
// reported once per object when two managers see it, and gone with the object and with the reader.
func TestObjectSeries(t *testing.T) {
	Register() // as Setup does: the series are read from the registry the manager serves
	Register() // a second manager in the process registers nothing twice
	scheme := runtime.NewScheme()
	if err := rayv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cluster := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uc", Labels: map[string]string{"ray.io/originated-from-crd": "RayJob"}}}
	cluster.Status.Conditions = provisioned(metav1.ConditionTrue)
	job := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: "uj"}}
	job.Status.JobDeploymentStatus = rayv1.JobDeploymentStatusRunning
	svc := &rayv1.RayService{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", UID: "us"}}
	svc.Status.Conditions = []metav1.Condition{{Type: string(rayv1.RayServiceReady), Status: metav1.ConditionTrue}}
	bare := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "ns", UID: "ub"}}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cluster, job, svc, bare).Build()

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	for range 2 {
		s := &source{reader: cl, kinds: []Kind{RayClusters, RayJobs, RayServices}}
		go func() { _ = s.Start(ctx); stopped <- struct{}{} }()
	}
	waitSources(t, 2)

	names := []string{"kuberay_cluster_info", "kuberay_cluster_condition_provisioned", "kuberay_job_info",
		"kuberay_job_deployment_status", "kuberay_service_info", "kuberay_service_condition_ready",
		"kuberay_service_condition_upgrade_in_progress"}
	want := `
# HELP kuberay_cluster_info Metadata information about RayCluster custom resources
# TYPE kuberay_cluster_info gauge
kuberay_cluster_info{name="bare",namespace="ns",owner_kind="None",uid="ub"} 1
kuberay_cluster_info{name="c",namespace="ns",owner_kind="RayJob",uid="uc"} 1
# HELP kuberay_cluster_condition_provisioned Indicates whether the RayCluster is provisioned
# TYPE kuberay_cluster_condition_provisioned gauge
kuberay_cluster_condition_provisioned{condition="false",name="bare",namespace="ns",uid="ub"} 1
kuberay_cluster_condition_provisioned{condition="true",name="c",namespace="ns",uid="uc"} 1
# HELP kuberay_job_info Metadata information about RayJob custom resources
# TYPE kuberay_job_info gauge
kuberay_job_info{name="j",namespace="ns",uid="uj"} 1
# HELP kuberay_job_deployment_status The RayJobs current deployment status
# TYPE kuberay_job_deployment_status gauge
kuberay_job_deployment_status{deployment_status="Running",name="j",namespace="ns",uid="uj"} 1
# HELP kuberay_service_info Metadata information about RayService custom resources
# TYPE kuberay_service_info gauge
kuberay_service_info{name="s",namespace="ns",uid="us"} 1
# HELP kuberay_service_condition_ready Describes whether the RayService is ready. Ready means users can send requests to the underlying cluster and the number of serve endpoints is greater than 0.
# TYPE kuberay_service_condition_ready gauge
kuberay_service_condition_ready{condition="true",name="s",namespace="ns",uid="us"} 1
# HELP kuberay_service_condition_upgrade_in_progress Describes whether the RayService is performing a zero-downtime upgrade.
# TYPE kuberay_service_condition_upgrade_in_progress gauge
kuberay_service_condition_upgrade_in_progress{condition="false",name="s",namespace="ns",uid="us"} 1
`
	// Through controller-runtime's registry, which the manager serves on /metrics.
	if err := testutil.GatherAndCompare(ctrlmetrics.Registry, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	if err := cl.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(ctrlmetrics.Registry, "kuberay_service_info", "kuberay_service_condition_ready"); err != nil || n != 0 {
		t.Errorf("%d RayService series after its deletion (%v)", n, err)
	}
	cancel()
	<-stopped
	<-stopped
	if n, err := testutil.GatherAndCount(ctrlmetrics.Registry, names...); err != nil || n != 0 {
		t.Errorf("%d series after the managers stopped (%v)", n, err)
	}
}

func waitSources(t *testing.T, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		objects.mu.Lock()
		got := len(objects.sources)
		objects.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sources registered, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The gauges read from a running component's memory report 0 until it is set, then what it answers at each scrape.
func TestFuncGauges(t *testing.T) {
	for _, c := range []struct {
		g   *funcGauge
		set func(func() int)
	}{{eventsQueued, SetEventsQueued}, {statusesHeld, SetStatusesHeld}} {
		c.g.f.Store(nil)
		if got := testutil.ToFloat64(c.g); got != 0 {
			t.Errorf("unset: %v, want 0", got)
		}
		n := 0
		c.set(func() int { n++; return n })
		if a, b := testutil.ToFloat64(c.g), testutil.ToFloat64(c.g); a != 1 || b != 2 {
			t.Errorf("set: scrapes read %v then %v, want 1 then 2", a, b)
		}
		c.g.f.Store(nil)
	}
}

// --enable-metrics=false: KubeRay's duration series are not recorded, as KubeRay's operator emits none of its
// control-plane metrics then.
func TestKubeRayMetricsOff(t *testing.T) {
	SetKubeRay(false)
	t.Cleanup(func() { SetKubeRay(true) })
	c := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: "off", Namespace: "ns", UID: "u9", CreationTimestamp: metav1.NewTime(t0)}}
	c.Status.Conditions = provisioned(metav1.ConditionTrue)
	before := testutil.CollectAndCount(clusterProvisionedDuration)
	ObserveCluster(c, &rayv1.RayClusterStatus{}, t0.Add(time.Minute))
	if n := testutil.CollectAndCount(clusterProvisionedDuration); n != before {
		t.Errorf("%d provisioned series, was %d", n, before)
	}
	j := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Name: "off", Namespace: "ns", UID: "j9"}}
	j.Status.JobDeploymentStatus = rayv1.JobDeploymentStatusComplete
	j.Status.StartTime = ptr.To(metav1.NewTime(t0))
	before = testutil.CollectAndCount(jobExecutionDuration)
	ObserveJob(j, &rayv1.RayJobStatus{JobDeploymentStatus: rayv1.JobDeploymentStatusRunning}, t0.Add(time.Minute))
	if n := testutil.CollectAndCount(jobExecutionDuration); n != before {
		t.Errorf("%d job series, was %d", n, before)
	}
	SetKubeRay(true)
	ObserveCluster(c, &rayv1.RayClusterStatus{}, t0.Add(time.Minute))
	t.Cleanup(func() { ForgetCluster(types.NamespacedName{Namespace: "ns", Name: "off"}) })
	if n := testutil.CollectAndCount(clusterProvisionedDuration); n != before+1 && n != 1 {
		t.Errorf("on again: %d provisioned series", n)
	}
}
