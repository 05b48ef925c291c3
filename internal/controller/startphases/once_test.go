package startphases

import (
	"context"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/testutil"
)

// onceFixture is a reconciler on a fake cache holding a ready cluster of a head (image pulled cold) and a worker,
// with the samples and events it records.
type onceFixture struct {
	cl      client.Client
	samples map[string]int
	events  *events.FakeRecorder
}

func (f *onceFixture) reconciler(epoch time.Time) *Reconciler {
	return newReconciler(f.cl, nil, f.events, Options{
		LateThreshold: time.Minute,
		Observe:       func(kind, phase, nodeType string, _ time.Duration) { f.samples[kind+"/"+nodeType+"/"+phase]++ },
		Clock:         clocktesting.NewFakePassiveClock(epoch),
	})
}

// drain returns the events recorded since the last call.
func (f *onceFixture) drain() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func newOnceFixture(t *testing.T) *onceFixture {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "c-uid", CreationTimestamp: mt(0)}}
	c.Status.DesiredWorkerReplicas, c.Status.State = 1, rayv1.Ready
	c.Status.StateTransitionTimes = map[rayv1.ClusterState]*metav1.Time{rayv1.Ready: mtp(200)}
	objs := []client.Object{c}
	for i, pt := range []struct {
		name, nodeType         string
		sched, pull, start, rd int
	}{{"c-head", "head", 1, 180, 182, 190}, {"c-worker", "worker", 2, 3, 185, 195}} {
		p := &pod(0).cond(corev1.PodScheduled, corev1.ConditionTrue, pt.sched).cond(corev1.PodReady, corev1.ConditionTrue, pt.rd).running(pt.start).Pod
		p.Namespace, p.Name, p.UID = "ns", pt.name, types.UID(pt.name+"-uid")
		p.Labels = map[string]string{rayv1.LabelCluster: "c", rayv1.LabelNodeType: pt.nodeType}
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: pt.name + ".pulled"}, Reason: "Pulled",
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: p.Name, UID: p.UID},
			Message:        []string{"Successfully pulled image", "Container image already present on machine"}[i], LastTimestamp: mt(pt.pull)}
		objs = append(objs, p, ev)
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, clusterpods.Index, clusterpods.IndexValue).
		WithIndex(&corev1.Event{}, PulledIndex, PulledIndexValue).Build()
	return &onceFixture{cl: cl, samples: map[string]int{}, events: events.NewFakeRecorder(100)}
}

func reconcileN(t *testing.T, r *Reconciler, n int) {
	t.Helper()
	for range n {
		if _, err := r.reconcileCluster(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "c"}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecordedOnce: however often a cluster is reconciled, each phase of it and of each pod is one sample, and its
// late and summary events are recorded once; a new process (an operator restart, a new leader) records only what
// happened from its epoch on, so nothing the previous one counted is counted again.
func TestRecordedOnce(t *testing.T) {
	everything := map[string]int{
		"Pod/head/scheduled": 1, "Pod/head/image_pulled": 1, "Pod/head/containers_started": 1, "Pod/head/ray_ready": 1,
		"Pod/worker/scheduled": 1, "Pod/worker/image_pulled": 1, "Pod/worker/containers_started": 1, "Pod/worker/ray_ready": 1,
		"RayCluster//scheduled": 1, "RayCluster//image_pulled": 1, "RayCluster//containers_started": 1, "RayCluster//ray_ready": 1,
	}
	t.Run("repeated reconciles", func(t *testing.T) {
		f := newOnceFixture(t)
		reconcileN(t, f.reconciler(at(-3600)), 5)
		if !maps.Equal(f.samples, everything) {
			t.Errorf("samples %v, want %v", f.samples, everything)
		}
		evs := f.drain()
		if len(evs) != 2 || !strings.HasPrefix(evs[0], "Warning SlowImagePull") || !strings.HasPrefix(evs[1], "Normal StartPhases RayCluster started in 3m20s: image pull 2m58s (slowest)") {
			t.Errorf("events %q", evs)
		}
	})
	t.Run("a restart after the start records nothing", func(t *testing.T) {
		f := newOnceFixture(t)
		reconcileN(t, f.reconciler(at(300)), 2)
		if len(f.samples) != 0 {
			t.Errorf("samples %v, want none", f.samples)
		}
		if evs := f.drain(); len(evs) != 0 {
			t.Errorf("events %q, want none", evs)
		}
	})
	t.Run("a restart during the start records what follows", func(t *testing.T) {
		f := newOnceFixture(t)
		reconcileN(t, f.reconciler(at(184)), 2)
		want := map[string]int{"Pod/head/ray_ready": 1, "Pod/worker/containers_started": 1, "Pod/worker/ray_ready": 1,
			"RayCluster//containers_started": 1, "RayCluster//ray_ready": 1}
		if !maps.Equal(f.samples, want) {
			t.Errorf("samples %v, want %v", f.samples, want)
		}
		// The image pull was late before the epoch (the previous process warned); the summary is this one's.
		if evs := f.drain(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal StartPhases") {
			t.Errorf("events %q, want the summary only", evs)
		}
	})
	t.Run("the epoch is the first reconcile, not the first phase seen", func(t *testing.T) {
		// A fresh operator reconciles before the cluster's pods have reached any phase (here: a cluster not made
		// yet); the phases that follow, seen later, are all its own.
		f := newOnceFixture(t)
		now := at(0)
		r := f.reconciler(now)
		clk := clocktesting.NewFakePassiveClock(now)
		r.opts.Clock = clk
		if _, err := r.reconcileCluster(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "later"}}); err != nil {
			t.Fatal(err)
		}
		now = at(500)
		clk.SetTime(now)
		reconcileN(t, r, 1)
		if !maps.Equal(f.samples, everything) {
			t.Errorf("samples %v, want %v", f.samples, everything)
		}
	})
	t.Run("a pod gone from the cluster is forgotten", func(t *testing.T) {
		f := newOnceFixture(t)
		r := f.reconciler(at(-3600))
		reconcileN(t, r, 1)
		if err := f.cl.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-worker"}}); err != nil {
			t.Fatal(err)
		}
		reconcileN(t, r, 1)
		st := r.clusters[types.NamespacedName{Namespace: "ns", Name: "c"}]
		if _, ok := st.pods["c-worker-uid"]; ok || len(st.pods) != 1 {
			t.Errorf("pods remembered: %v", st.pods)
		}
		if !maps.Equal(f.samples, everything) {
			t.Errorf("samples %v, want %v", f.samples, everything)
		}
	})
}

// TestPodMapReplacedNotWritten: a reconcile reads its cluster's recorded pods outside the lock, so the map is never
// written once stored: a change stores a new one (the old one keeps what it had), and a reconcile that records
// nothing new keeps the map it found.
func TestPodMapReplacedNotWritten(t *testing.T) {
	f := newOnceFixture(t)
	r := f.reconciler(at(-3600))
	key := types.NamespacedName{Namespace: "ns", Name: "c"}
	reconcileN(t, r, 1)
	first := r.clusters[key].pods
	kept := maps.Clone(first)
	reconcileN(t, r, 1)
	if reflect.ValueOf(r.clusters[key].pods).Pointer() != reflect.ValueOf(first).Pointer() {
		t.Errorf("a reconcile that recorded nothing replaced the pods' map")
	}
	if err := f.cl.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-worker"}}); err != nil {
		t.Fatal(err)
	}
	reconcileN(t, r, 1)
	if got := r.clusters[key].pods; len(got) != 1 || reflect.ValueOf(got).Pointer() == reflect.ValueOf(first).Pointer() {
		t.Errorf("pods after the worker left: %v (the same map: %v)", got, reflect.ValueOf(got).Pointer() == reflect.ValueOf(first).Pointer())
	}
	if !maps.Equal(first, kept) {
		t.Errorf("the stored map was written: %v, was %v", first, kept)
	}
}

// TestJobRunningSeen: a RayJob's RUNNING is the time the reconciler first saw it after seeing it before RUNNING; a
// job first seen RUNNING (an operator restart in the middle) gets no running phase rather than a wrong one.
func TestJobRunningSeen(t *testing.T) {
	for _, tc := range []struct {
		name     string
		statuses []rayv1.JobStatus
		want     int
	}{
		{"pending then running", []rayv1.JobStatus{rayv1.JobStatusPending, rayv1.JobStatusRunning, rayv1.JobStatusRunning}, 1},
		{"first seen running", []rayv1.JobStatus{rayv1.JobStatusRunning, rayv1.JobStatusRunning}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newOnceFixture(t)
			now := at(-3600)
			r := f.reconciler(now)
			clk := clocktesting.NewFakePassiveClock(now)
			r.opts.Clock = clk
			j := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j", UID: "j-uid", CreationTimestamp: mt(0)}}
			if err := f.cl.Create(context.Background(), j); err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.statuses {
				now = at(210 + i)
				clk.SetTime(now)
				j.Status.JobStatus = s
				if err := f.cl.Update(context.Background(), j); err != nil {
					t.Fatal(err)
				}
				if _, err := r.reconcileJob(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "j"}}); err != nil {
					t.Fatal(err)
				}
			}
			if got := f.samples["RayJob//running"]; got != tc.want {
				t.Errorf("running samples %d, want %d", got, tc.want)
			}
		})
	}
}

// A pod of a cluster the cache holds wakes the cluster; one of a cluster not there (deleted before its pods, as a
// finished RayJob's is) wakes nothing, unless gone-cluster-filter is off.
func TestPodOfAGoneClusterWakesNothing(t *testing.T) {
	f := newOnceFixture(t)
	pod := func(cluster string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: cluster + "-head", Labels: map[string]string{rayv1.LabelCluster: cluster}}}
	}
	for _, tc := range []struct {
		name    string
		sw      *optimize.Switches
		cluster string
		want    int
		acted   int64
	}{
		{"cached", optimize.Off(), "c", 1, 0},
		{"gone", optimize.Off(), "gone", 0, 1},
		{"gone, the filter off", optimize.Off(optimize.GoneClusterFilter), "gone", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.reconciler(time.Unix(0, 0))
			r.opts.Optimizations = tc.sw
			got := r.podCluster(context.Background(), pod(tc.cluster))
			if len(got) != tc.want || (tc.want == 1 && got[0].Name != tc.cluster) {
				t.Errorf("podCluster = %v, want %d request(s) for %s", got, tc.want, tc.cluster)
			}
			if n := tc.sw.Count(optimize.GoneClusterFilter); n != tc.acted {
				t.Errorf("gone-cluster-filter acted %d times, want %d", n, tc.acted)
			}
		})
	}
}
