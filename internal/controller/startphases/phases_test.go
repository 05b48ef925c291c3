package startphases

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

var t0 = time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)

func at(s int) time.Time      { return t0.Add(time.Duration(s) * time.Second) }
func mt(s int) metav1.Time    { return metav1.NewTime(at(s)) }
func mtp(s int) *metav1.Time  { t := mt(s); return &t }
func sec(s int) time.Duration { return time.Duration(s) * time.Second }
func times(created int, ph ...int) Times {
	t := Times{Created: at(created)}
	for i, s := range ph {
		if s >= 0 {
			t.At[i] = at(s)
		}
	}
	return t
}

// podWrapper builds pods for the tables.
type podWrapper struct{ corev1.Pod }

func pod(created int) *podWrapper {
	p := &podWrapper{}
	p.CreationTimestamp = mt(created)
	p.Spec.Containers = []corev1.Container{{Name: "ray-head"}}
	return p
}

func (p *podWrapper) cond(typ corev1.PodConditionType, status corev1.ConditionStatus, s int) *podWrapper {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: typ, Status: status, LastTransitionTime: mt(s)})
	return p
}

func (p *podWrapper) containers(n int) *podWrapper {
	p.Spec.Containers = nil
	for i := range n {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: string(rune('a' + i))})
	}
	return p
}

func (p *podWrapper) running(s int) *podWrapper {
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: mt(s)}}})
	return p
}

func (p *podWrapper) terminated(s int) *podWrapper {
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: mt(s), FinishedAt: mt(s + 1)}}})
	return p
}

func (p *podWrapper) waiting() *podWrapper {
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}})
	return p
}

func TestPodTimes(t *testing.T) {
	pulled := []Pull{{At: at(20), Pulled: true}}
	for _, tc := range []struct {
		name  string
		pod   *podWrapper
		pulls []Pull
		want  Times
	}{
		{"new", pod(0), nil, times(0)},
		{"unschedulable", pod(0).cond(corev1.PodScheduled, corev1.ConditionFalse, 1), nil, times(0)},
		{"scheduled, pulling", pod(0).cond(corev1.PodScheduled, corev1.ConditionTrue, 1).waiting(), nil, times(0, 1)},
		{"pulled, not started", pod(0).cond(corev1.PodScheduled, corev1.ConditionTrue, 1).waiting(), pulled, times(0, 1, 20)},
		{"started, not ready", pod(0).cond(corev1.PodScheduled, corev1.ConditionTrue, 1).cond(corev1.PodReady, corev1.ConditionFalse, 1).running(21), pulled,
			times(0, 1, 20, 21)},
		{"ready", pod(0).cond(corev1.PodScheduled, corev1.ConditionTrue, 1).cond(corev1.PodReady, corev1.ConditionTrue, 30).running(21), pulled,
			times(0, 1, 20, 21, 30)},
		{"no kubelet events: no pull phase", pod(0).cond(corev1.PodScheduled, corev1.ConditionTrue, 1).cond(corev1.PodReady, corev1.ConditionTrue, 30).running(21), nil,
			times(0, 1, -1, 21, 30)},
		{"started when the last container did", pod(0).containers(2).cond(corev1.PodScheduled, corev1.ConditionTrue, 1).running(21).terminated(25), nil,
			times(0, 1, -1, 25)},
		{"one of two containers reported", pod(0).containers(2).cond(corev1.PodScheduled, corev1.ConditionTrue, 1).running(21), nil,
			times(0, 1)},
		{"one of two containers waiting", pod(0).containers(2).cond(corev1.PodScheduled, corev1.ConditionTrue, 1).running(21).waiting(), nil,
			times(0, 1)},
		{"ready left from before a restart is not this start's", pod(0).cond(corev1.PodScheduled, corev1.ConditionTrue, 1).cond(corev1.PodReady, corev1.ConditionTrue, 30).running(40), nil,
			times(0, 1, -1, 40)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PodTimes(&tc.pod.Pod, tc.pulls)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PodTimes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPullEnd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pulls []Pull
		want  time.Time
	}{
		{"none", nil, time.Time{}},
		{"one pull", []Pull{{at(30), true}}, at(30)},
		// A worker: its init container pulled the image, its main container found it after waiting for the head.
		{"pull then present", []Pull{{at(30), true}, {at(90), false}}, at(30)},
		{"two pulls (a sidecar's image)", []Pull{{at(30), true}, {at(45), true}, {at(90), false}}, at(45)},
		{"all present: the first check", []Pull{{at(9), false}, {at(3), false}}, at(3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PullEnd(tc.pulls); !got.Equal(tc.want) {
				t.Errorf("PullEnd = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPullFromEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   corev1.Event
		want Pull
	}{
		{"pulled, core/v1 times", corev1.Event{Message: `Successfully pulled image "ray:2.52" in 28.1s (28.1s including waiting). Image size: 674000000 bytes.`,
			FirstTimestamp: mt(30), LastTimestamp: mt(30)}, Pull{at(30), true}},
		{"present", corev1.Event{Message: `Container image "ray:2.52" already present on machine and can be accessed by the pod`, LastTimestamp: mt(5)}, Pull{at(5), false}},
		{"events.k8s.io time only", corev1.Event{Message: "Successfully pulled image", EventTime: metav1.NewMicroTime(at(7))}, Pull{at(7), true}},
		{"a series: its last", corev1.Event{Message: "Container image x already present on machine", LastTimestamp: mt(5),
			Series: &corev1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(at(50))}}, Pull{at(50), false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PullFromEvent(&tc.ev); !got.At.Equal(tc.want.At) || got.Pulled != tc.want.Pulled {
				t.Errorf("PullFromEvent = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func cluster(created, workers int) *rayv1.RayCluster {
	c := &rayv1.RayCluster{}
	c.CreationTimestamp = mt(created)
	c.Generation, c.Status.ObservedGeneration = 1, 1
	c.Status.DesiredWorkerReplicas = int32(workers)
	return c
}

func TestClusterTimes(t *testing.T) {
	ready := func(c *rayv1.RayCluster, s int) *rayv1.RayCluster {
		c.Status.State = rayv1.Ready
		c.Status.StateTransitionTimes = map[rayv1.ClusterState]*metav1.Time{rayv1.Ready: mtp(s)}
		return c
	}
	head := PodOf{"head", times(1, 2, 20, 21, 30)}
	w1 := PodOf{"w1", times(1, 3, 25, 26, 35)}
	w2 := PodOf{"w2", times(1, 2, 22, 40, 41)}
	for _, tc := range []struct {
		name string
		c    *rayv1.RayCluster
		pods []PodOf
		want Times
		last [numPhases]string
	}{
		{"no pods", cluster(0, 2), nil, times(0), [numPhases]string{}},
		{"head only of three", cluster(0, 2), []PodOf{head}, times(0), [numPhases]string{}},
		{"no status for the spec yet: the wanted count is unknown", func() *rayv1.RayCluster {
			c := cluster(0, 0)
			c.Status.ObservedGeneration = 0
			return c
		}(), []PodOf{head}, times(0), [numPhases]string{}},
		{"each phase when the last wanted pod reached it", cluster(0, 2), []PodOf{head, w1, w2}, times(0, 3, 25, 40),
			[numPhases]string{"w1", "w1", "w2"}},
		{"ready from the status", ready(cluster(0, 2), 42), []PodOf{head, w1, w2}, times(0, 3, 25, 40, 42),
			[numPhases]string{"w1", "w1", "w2"}},
		{"a spare pod (being replaced) does not hold the cluster back", cluster(0, 1), []PodOf{head, w1, w2}, times(0, 2, 22, 26),
			[numPhases]string{"w2", "w2", "w1"}}, // head and w2 tie at 2 s: the second of them
		{"ready from RayClusterProvisioned when no state time", func() *rayv1.RayCluster {
			c := cluster(0, 0)
			c.Status.Conditions = []metav1.Condition{{Type: string(rayv1.RayClusterProvisioned), Status: metav1.ConditionTrue, LastTransitionTime: mt(31)}}
			return c
		}(), []PodOf{head}, times(0, 2, 20, 21, 31), [numPhases]string{"head", "head", "head"}},
		{"no pull events: no pull phase, the rest still", ready(cluster(0, 0), 31), []PodOf{{"head", times(1, 2, -1, 21, 30)}}, times(0, 2, -1, 21, 31),
			[numPhases]string{"head", "", "head"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, last := ClusterTimes(tc.c, tc.pods)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ClusterTimes (-want +got):\n%s", diff)
			}
			if last != tc.last {
				t.Errorf("last pods = %q, want %q", last, tc.last)
			}
		})
	}
}

// TestClusterTimesLargeCluster: a cluster of more pods than ClusterTimes sorts on the stack gets the same answer.
func TestClusterTimesLargeCluster(t *testing.T) {
	var pods []PodOf
	for i := range 40 {
		// Reached in the reverse order of the list, so the sort has work to do.
		pods = append(pods, PodOf{fmt.Sprintf("p%d", i), times(1, 100-i, 200-i, 300-i)})
	}
	got, last := ClusterTimes(cluster(0, 29), pods) // 30 pods wanted: the 30th earliest is p10's
	if diff := cmp.Diff(times(0, 90, 190, 290), got); diff != "" {
		t.Errorf("ClusterTimes (-want +got):\n%s", diff)
	}
	if want := [numPhases]string{"p10", "p10", "p10"}; last != want {
		t.Errorf("last pods = %q, want %q", last, want)
	}
}

// TestClusterTimesAllocs: ClusterTimes runs at each reconcile of a cluster; for a cluster of up to 16 pods it
// allocates nothing.
func TestClusterTimesAllocs(t *testing.T) {
	var pods []PodOf
	for i := range 16 {
		pods = append(pods, PodOf{fmt.Sprintf("p%d", i), times(1, 2+i, 20+i, 40+i)})
	}
	c := cluster(0, 15)
	if n := testing.AllocsPerRun(100, func() { ClusterTimes(c, pods) }); n != 0 {
		t.Errorf("ClusterTimes of 16 pods: %v allocations, want 0", n)
	}
}

func TestJobTimes(t *testing.T) {
	job := func(created int, mutate func(*rayv1.RayJobStatus)) *rayv1.RayJob {
		j := &rayv1.RayJob{}
		j.CreationTimestamp = mt(created)
		if mutate != nil {
			mutate(&j.Status)
		}
		return j
	}
	cl := times(1, 3, 25, 40, 42)
	for _, tc := range []struct {
		name    string
		j       *rayv1.RayJob
		cluster *Times
		running time.Time
		want    Times
	}{
		{"new", job(0, nil), nil, time.Time{}, times(0)},
		{"cluster starting", job(0, nil), ptr.To(times(1, 3, 25)), time.Time{}, times(0, 3, 25)},
		{"submitted, running, finished", job(0, func(s *rayv1.RayJobStatus) {
			s.RayJobStatusInfo.StartTime, s.RayJobStatusInfo.EndTime = mtp(45), mtp(100)
		}), &cl, at(50), times(0, 3, 25, 40, 42, 45, 50, 100)},
		{"finished from the RayJob's end once terminal", job(0, func(s *rayv1.RayJobStatus) {
			s.RayJobStatusInfo.StartTime, s.EndTime, s.JobDeploymentStatus = mtp(45), mtp(101), rayv1.JobDeploymentStatusComplete
		}), &cl, at(50), times(0, 3, 25, 40, 42, 45, 50, 101)},
		{"an end time while still running is not the end", job(0, func(s *rayv1.RayJobStatus) {
			s.EndTime, s.JobDeploymentStatus = mtp(101), rayv1.JobDeploymentStatusRunning
		}), nil, at(50), times(0, -1, -1, -1, -1, -1, 50)},
		{"RUNNING first seen after the end is not kept", job(0, func(s *rayv1.RayJobStatus) {
			s.RayJobStatusInfo.StartTime, s.RayJobStatusInfo.EndTime = mtp(45), mtp(60)
		}), &cl, at(70), times(0, 3, 25, 40, 42, 45, -1, 60)},
		{"a selected cluster's phases from before the job are not the job's", job(41, func(s *rayv1.RayJobStatus) {
			s.RayJobStatusInfo.StartTime = mtp(45)
		}), &cl, time.Time{}, times(41, -1, -1, -1, 42, 45)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := JobTimes(tc.j, tc.cluster, tc.running)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("JobTimes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStepsAndSummary(t *testing.T) {
	for _, tc := range []struct {
		name  string
		t     Times
		end   Phase
		verb  string
		want  string
		steps []time.Duration
	}{
		{"cold cluster", times(0, 1, 31, 33, 41), RayReady, "started",
			"started in 41s: image pull 30s (slowest), scheduling 1s, container start 2s, Ray start 8s", []time.Duration{sec(1), sec(30), sec(2), sec(8)}},
		{"no pull phase: the container start step runs from scheduling", times(0, 1, -1, 33, 41), RayReady, "started",
			"started in 41s: container start 32s (slowest), scheduling 1s, Ray start 8s", []time.Duration{sec(1), 0, sec(32), sec(8)}},
		{"job", times(0, 1, 2, 3, 20, 22, 25, 85), Finished, "finished",
			"finished in 1m25s: job run 1m0s (slowest), scheduling 1s, image pull 1s, container start 1s, Ray start 17s, job submission 2s, waiting in Ray 3s",
			[]time.Duration{sec(1), sec(1), sec(1), sec(17), sec(2), sec(3), sec(60)}},
		{"sub-second steps", Times{Created: t0, At: [numPhases]time.Time{t0.Add(340 * time.Millisecond)}}, Scheduled, "scheduled",
			"scheduled in 300ms: scheduling 300ms (slowest)", []time.Duration{340 * time.Millisecond}},
		{"a clock behind: never negative", times(10, 9), Scheduled, "scheduled", "scheduled in 0s: scheduling 0s (slowest)", []time.Duration{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, want := range tc.steps {
				if got := tc.t.StepOf(Phase(i)); tc.t.Has(Phase(i)) && got != want {
					t.Errorf("StepOf(%s) = %s, want %s", Phase(i), got, want)
				}
			}
			if got := Summary(tc.verb, &tc.t, tc.end); got != tc.want {
				t.Errorf("Summary =\n %q, want\n %q", got, tc.want)
			}
		})
	}
}

func TestLate(t *testing.T) {
	tt := times(0, 1, 181, 183)
	for _, tc := range []struct {
		p         Phase
		threshold time.Duration
		want      bool
	}{
		{Scheduled, 2 * time.Minute, false},
		{ImagePulled, 2 * time.Minute, true},
		{ImagePulled, 0, false}, // off
		{ImagePulled, 3 * time.Minute, false},
		{ContainersStarted, 1, true},
		{RayReady, 1, false}, // not reached
	} {
		if got := Late(&tt, tc.p, tc.threshold); got != tc.want {
			t.Errorf("Late(%s, %s) = %v, want %v", tc.p, tc.threshold, got, tc.want)
		}
	}
	if got, want := lateNote(KindRayCluster, &tt, ImagePulled, 2*time.Minute, "c-head"),
		"RayCluster reached image_pulled 3m1s after creation: the image pull took 3m0s, over the 2m0s threshold (--start-phase-late-threshold); last pod: c-head"; got != want {
		t.Errorf("lateNote =\n %q, want\n %q", got, want)
	}
}

// TestParseSummary reads back what Summary writes, and refuses what it does not.
func TestParseSummary(t *testing.T) {
	job := times(0, 1, 2, 3, 20, 22, 25, 85)
	total, steps, err := ParseSummary("RayJob " + Summary("finished", &job, Finished))
	if err != nil {
		t.Fatal(err)
	}
	want := []StepTime{{Scheduled, sec(1)}, {ImagePulled, sec(1)}, {ContainersStarted, sec(1)}, {RayReady, sec(17)}, {Submitted, sec(2)}, {Running, sec(3)}, {Finished, sec(60)}}
	if total != sec(85) || !cmp.Equal(steps, want) {
		t.Errorf("ParseSummary = %s %v, want 1m25s %v", total, steps, want)
	}
	for _, bad := range []string{"", "RayCluster started", "RayCluster started in x: scheduling 1s", "RayCluster started in 3s: warming up 1s",
		"RayCluster started in 3s: scheduling 1s, scheduling 2s", "RayCluster started in 3s: scheduling soon"} {
		if _, _, err := ParseSummary(bad); err == nil {
			t.Errorf("ParseSummary(%q) accepted", bad)
		}
	}
}
