package raycluster

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

func TestStatusHold(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const window = 5 * time.Second
	cond := func(typ string, s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason}
	}
	progressing := rayv1.RayClusterStatus{ReadyWorkerReplicas: 1, Conditions: []metav1.Condition{
		cond(string(rayv1.HeadPodReady), metav1.ConditionFalse, "HeadPodNotReady")}}
	moreProgress := rayv1.RayClusterStatus{ReadyWorkerReplicas: 2, Conditions: []metav1.Condition{
		cond(string(rayv1.HeadPodReady), metav1.ConditionTrue, "HeadPodRunningAndReady")}}
	ready := *moreProgress.DeepCopy()
	ready.State = rayv1.Ready
	notSuspended := *progressing.DeepCopy()
	notSuspended.Conditions = append(notSuspended.Conditions,
		cond(string(rayv1.RayClusterSuspended), metav1.ConditionFalse, "Suspended"),
		cond(string(rayv1.RayClusterSuspending), metav1.ConditionFalse, "Suspending"))
	suspending := *progressing.DeepCopy()
	suspending.Conditions = append(suspending.Conditions,
		cond(string(rayv1.RayClusterSuspended), metav1.ConditionFalse, "Suspended"),
		cond(string(rayv1.RayClusterSuspending), metav1.ConditionTrue, "Suspending"))
	withPorts := *progressing.DeepCopy()
	withPorts.Endpoints = map[string]string{"dashboard": "8265"}
	withNodePorts := *withPorts.DeepCopy()
	withNodePorts.Endpoints = map[string]string{"dashboard": "31265"}
	scaling := *ready.DeepCopy()
	scaling.DesiredWorkerReplicas = 4
	scaled := *scaling.DeepCopy()
	scaled.ReadyWorkerReplicas = 3
	allScaled := *scaling.DeepCopy()
	allScaled.ReadyWorkerReplicas = 4
	stuck := *progressing.DeepCopy()
	stuck.Reason = "pod rc-head-x: ErrImagePull: container ray-head cannot pull image"
	failing := *progressing.DeepCopy()
	failing.Conditions = append(failing.Conditions, cond(string(rayv1.RayClusterReplicaFailure), metav1.ConditionTrue, "FailedCreateWorkerPod"))

	for _, tc := range []struct {
		name         string
		old, new     rayv1.RayClusterStatus
		pendingSince time.Time
		now          time.Time
		window       time.Duration
		want         time.Duration
	}{
		{"first progress change is held for the window", rayv1.RayClusterStatus{}, progressing, time.Time{}, t0, window, window},
		{"a later one waits out the rest", progressing, moreProgress, t0, t0.Add(2 * time.Second), window, 3 * time.Second},
		{"written once the window is over", progressing, moreProgress, t0, t0.Add(window), window, 0},
		{"a state change is written at once", progressing, ready, t0, t0.Add(time.Second), window, 0},
		{"a new failure condition is written at once", progressing, failing, t0, t0.Add(time.Second), window, 0},
		{"a failure that clears is written at once", failing, progressing, time.Time{}, t0, window, 0},
		{"a pod that cannot start is written at once", progressing, stuck, time.Time{}, t0, window, 0},
		{"so is its cause clearing", stuck, progressing, time.Time{}, t0, window, 0},
		{"a new cluster's first status, not suspended, is held", rayv1.RayClusterStatus{}, notSuspended, time.Time{}, t0, window, window},
		{"suspending is written at once", notSuspended, suspending, t0, t0.Add(time.Second), window, 0},
		{"the end of suspending is written at once", suspending, notSuspended, t0, t0.Add(time.Second), window, 0},
		{"endpoints appearing are progress", progressing, withPorts, time.Time{}, t0, window, window},
		{"corrected endpoints are written at once", withPorts, withNodePorts, t0, t0.Add(time.Second), window, 0},
		{"a ready cluster's workers coming up one by one are held", scaling, scaled, time.Time{}, t0, window, window},
		{"its last worker ready is written at once", scaled, allScaled, t0, t0.Add(time.Second), window, 0},
		{"no window, no hold", rayv1.RayClusterStatus{}, progressing, time.Time{}, t0, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statusHold(&tc.old, &tc.new, tc.pendingSince, tc.now, tc.window); got != tc.want {
				t.Errorf("statusHold = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestLoadWindow(t *testing.T) {
	for _, tc := range []struct {
		window time.Duration
		held   int
		want   time.Duration
	}{
		{10 * time.Second, 0, quietStatusHold},
		{10 * time.Second, burstHeld - 1, quietStatusHold}, // no burst: the quiet hold
		{10 * time.Second, 15, 1500 * time.Millisecond},
		{10 * time.Second, 50, 5 * time.Second},
		{10 * time.Second, 100, 10 * time.Second},
		{10 * time.Second, 10000, 10 * time.Second}, // never above the window
		{3 * time.Second, 1000, 3 * time.Second},
		{500 * time.Millisecond, 0, 500 * time.Millisecond}, // a window below the quiet hold is kept
		{-1, 100, -1}, // no coalescing stays none
	} {
		if got := loadWindow(tc.window, tc.held); got != tc.want {
			t.Errorf("loadWindow(%s, %d) = %s, want %s", tc.window, tc.held, got, tc.want)
		}
	}
}

// The coalescer's bound, on its own clock: a cluster's held change is written (hold 0) no later than the quiet
// hold after it was first held outside a burst, and no later than the window under one, however many clusters
// hold a change and however often it is reconciled; wrote reports that age.
func TestPendingStatusBound(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const window = 10 * time.Second
	progressing := rayv1.RayClusterStatus{ReadyWorkerReplicas: 1}
	key := func(i int) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: fmt.Sprint(i)} }
	// heldUntil reconciles the cluster every 100 ms from start until its change may be written, and returns when.
	heldUntil := func(p *pendingStatus, k types.NamespacedName, start time.Time) time.Time {
		t.Helper()
		for now := start; now.Sub(start) <= 5*window; now = now.Add(100 * time.Millisecond) {
			if p.hold(k, &rayv1.RayClusterStatus{}, &progressing, now, window) == 0 {
				return now
			}
		}
		t.Fatalf("%s still held after %s", k, 5*window)
		return time.Time{}
	}

	for _, tc := range []struct {
		name  string
		other int // clusters holding a change beside the one measured
		bound time.Duration
	}{
		{"quiet", 0, quietStatusHold},
		{"a few others", burstHeld - 2, quietStatusHold},
		{"burst", 60, 6100 * time.Millisecond}, // 61 holding a change, itself included
		{"large burst", 2000, window},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPendingStatus()
			for i := range tc.other {
				p.hold(key(i), &rayv1.RayClusterStatus{}, &progressing, t0, window)
			}
			at := heldUntil(p, key(-1), t0)
			if got := at.Sub(t0); got != tc.bound {
				t.Errorf("written after %s, want %s", got, tc.bound)
			}
			if got := p.wrote(key(-1), at); got != tc.bound {
				t.Errorf("wrote reports staleness %s, want %s", got, tc.bound)
			}
			if got := p.wrote(key(-2), at); got != 0 {
				t.Errorf("a write with nothing held reports staleness %s, want 0", got)
			}
		})
	}

	t.Run("window off", func(t *testing.T) {
		p := newPendingStatus()
		for i := range 200 {
			if d := p.hold(key(i), &rayv1.RayClusterStatus{}, &progressing, t0, -1); d != 0 {
				t.Fatalf("hold %s with coalescing off", d)
			}
		}
		if got := p.wrote(key(0), t0.Add(time.Minute)); got != 0 {
			t.Errorf("staleness %s with coalescing off", got)
		}
	})
}

// held (manta_raycluster_statuses_held) counts the clusters with a change waiting: each leaves it when its change
// is written, no longer differs, or its cluster is gone.
func TestPendingStatusHeld(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	progressing := rayv1.RayClusterStatus{ReadyWorkerReplicas: 1}
	p := newPendingStatus()
	key := func(i int) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: fmt.Sprint(i)} }
	for i := range 3 {
		if d := p.hold(key(i), &rayv1.RayClusterStatus{}, &progressing, t0, DefaultStatusCoalesceWindow); d == 0 {
			t.Fatalf("cluster %d: progress not held", i)
		}
	}
	p.hold(key(0), &rayv1.RayClusterStatus{}, &progressing, t0.Add(100*time.Millisecond), DefaultStatusCoalesceWindow)
	for i, step := range []func(){
		func() {},
		func() { p.wrote(key(0), t0.Add(time.Second)) },
		func() { p.settled(key(1)) },
		func() { p.forget(key(2)) },
	} {
		step()
		if got, want := p.held(), 3-i; got != want {
			t.Errorf("after step %d: held %d, want %d", i, got, want)
		}
	}
}
