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
		{"a new cluster's first status, not suspended, is held", rayv1.RayClusterStatus{}, notSuspended, time.Time{}, t0, window, window},
		{"suspending is written at once", notSuspended, suspending, t0, t0.Add(time.Second), window, 0},
		{"the end of suspending is written at once", suspending, notSuspended, t0, t0.Add(time.Second), window, 0},
		{"endpoints appearing are progress", progressing, withPorts, time.Time{}, t0, window, window},
		{"corrected endpoints are written at once", withPorts, withNodePorts, t0, t0.Add(time.Second), window, 0},
		{"no window, no hold", rayv1.RayClusterStatus{}, progressing, time.Time{}, t0, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statusHold(&tc.old, &tc.new, tc.pendingSince, tc.now, tc.window); got != tc.want {
				t.Errorf("statusHold = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPendingStatusStale(t *testing.T) {
	p := newPendingStatus()
	key := types.NamespacedName{Namespace: "ns", Name: "rc"}
	if p.stale(key, "1") {
		t.Error("stale before any write")
	}
	p.wrote(key, "1")
	if !p.stale(key, "1") {
		t.Error("the version written over is not seen as stale")
	}
	if p.stale(key, "2") || p.stale(key, "1") {
		t.Error("still stale after the cache caught up")
	}
}

func TestLoadWindow(t *testing.T) {
	for _, tc := range []struct {
		window time.Duration
		held   int
		want   time.Duration
	}{
		{10 * time.Second, 0, 10 * time.Second},
		{10 * time.Second, 5, 11 * time.Second},
		{10 * time.Second, 100, 30 * time.Second},
		{10 * time.Second, 250, time.Minute},
		{10 * time.Second, 550, 2 * time.Minute},
		{10 * time.Second, 600, 2 * time.Minute},
		{10 * time.Second, 10000, maxStatusCoalesceWindow},
		{3 * time.Minute, 10, 3 * time.Minute}, // a window set above the cap is kept
		{-1, 100, -1},                          // no coalescing stays none
	} {
		if got := loadWindow(tc.window, tc.held); got != tc.want {
			t.Errorf("loadWindow(%s, %d) = %s, want %s", tc.window, tc.held, got, tc.want)
		}
	}
	p := newPendingStatus()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	progressing := rayv1.RayClusterStatus{ReadyWorkerReplicas: 1}
	for i := range 50 {
		p.hold(types.NamespacedName{Namespace: "ns", Name: fmt.Sprint(i)}, &rayv1.RayClusterStatus{}, &progressing, t0, 10*time.Second)
	}
	// 50 clusters hold a change: the 51st waits 10 s + 50 x 200 ms.
	if got := p.hold(types.NamespacedName{Namespace: "ns", Name: "late"}, &rayv1.RayClusterStatus{}, &progressing, t0, 10*time.Second); got != 20*time.Second {
		t.Errorf("hold with 50 held = %s, want 20s", got)
	}
	for i := range 50 {
		p.settled(types.NamespacedName{Namespace: "ns", Name: fmt.Sprint(i)})
	}
	if got := p.hold(types.NamespacedName{Namespace: "ns", Name: "other"}, &rayv1.RayClusterStatus{}, &progressing, t0, 10*time.Second); got != 10*time.Second+200*time.Millisecond {
		t.Errorf("hold once settled = %s, want 10.2s", got)
	}
}
