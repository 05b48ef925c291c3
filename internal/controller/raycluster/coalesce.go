package raycluster

import (
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// DefaultStatusCoalesceWindow bounds how long, under a burst, a status change that only reports progress (counts,
// head address, HeadPodReady and RayClusterProvisioned) may wait to be written together with the next one
// (--status-coalesce-window). A new cluster's pods turn Ready one by one within seconds (tens of seconds on a loaded
// control plane); writing each step cost a status update per pod, 3 to 8 per cluster, through the same API server
// that is creating the next clusters' pods. Within the window those steps become the one write that says ready.
const DefaultStatusCoalesceWindow = 10 * time.Second

// quietStatusHold is the hold outside a burst: with the pod events' own batching (podBatch, 1 s) a change a pod
// reports reaches the API server within 2 s, while a cluster's steps of the same second still become one write.
const quietStatusHold = time.Second

// progressConditions change as pods come up; a change to any other condition (failures, suspension, validation)
// or to the state is written at once.
var progressConditions = map[string]bool{
	string(rayv1.HeadPodReady):          true,
	string(rayv1.RayClusterProvisioned): true,
}

// notYetTrue are conditions whose appearing as False (or changing while False) says nothing new: the cluster is not
// suspended, as it was not before.
var notYetTrue = map[string]bool{
	string(rayv1.RayClusterSuspended):  true,
	string(rayv1.RayClusterSuspending): true,
}

// progressOnly says whether the only differences between old and new are progress: same state, and every
// condition outside progressConditions unchanged (status, reason and message).
func progressOnly(old, new *rayv1.RayClusterStatus) bool {
	// A change of reason says why pods cannot start (starttrouble.go): news for the user, written at once.
	if old.State != new.State || old.Reason != new.Reason {
		return false
	}
	if len(old.Endpoints) > 0 && !maps.Equal(old.Endpoints, new.Endpoints) {
		// A correction of what clients connect to (a Service's node ports known only after a create that raced
		// the cache), not progress: written at once. Endpoints appearing for a new cluster are progress.
		return false
	}
	types := map[string]bool{}
	for _, c := range old.Conditions {
		types[c.Type] = true
	}
	for _, c := range new.Conditions {
		types[c.Type] = true
	}
	for t := range types {
		if progressConditions[t] {
			continue
		}
		a, b := meta.FindStatusCondition(old.Conditions, t), meta.FindStatusCondition(new.Conditions, t)
		if notYetTrue[t] && (a == nil || a.Status == metav1.ConditionFalse) && (b == nil || b.Status == metav1.ConditionFalse) {
			// A new cluster's first reconcile adds Suspended=False and Suspending=False: news to nobody, and
			// written at once it was a second status update for every cluster.
			continue
		}
		if (a == nil) != (b == nil) {
			return false
		}
		if a != nil && (a.Status != b.Status || a.Reason != b.Reason || a.Message != b.Message) {
			return false
		}
	}
	return true
}

// statusHold decides, for a status that differs from the stored one, whether to write it now. pendingSince is when
// an unwritten progress change was first seen (zero if none). It returns 0 to write now, or how long to wait.
func statusHold(old, new *rayv1.RayClusterStatus, pendingSince, now time.Time, window time.Duration) time.Duration {
	switch {
	case window <= 0 || !progressOnly(old, new) || complete(new):
		return 0
	case pendingSince.IsZero():
		return window
	case now.Sub(pendingSince) < window:
		return window - now.Sub(pendingSince)
	}
	return 0
}

// complete says whether s reports a ready cluster with every worker it wants ready: the last step of a scale-up,
// with no later progress to write it together with, so it is written at once. A status without HeadPodReady
// (RayClusterStatusConditions off) is judged by the rest.
func complete(s *rayv1.RayClusterStatus) bool {
	head := meta.FindStatusCondition(s.Conditions, string(rayv1.HeadPodReady))
	return s.State == rayv1.Ready && s.ReadyWorkerReplicas == s.DesiredWorkerReplicas &&
		(head == nil || head.Status == metav1.ConditionTrue)
}

// pendingStatus remembers, per cluster, since when a progress change has been held back.
type pendingStatus struct {
	mu    sync.Mutex
	since map[types.NamespacedName]time.Time
}

func newPendingStatus() *pendingStatus {
	return &pendingStatus{since: map[types.NamespacedName]time.Time{}}
}

// wrote records a successful status write at now, and returns how long the oldest change it carries was held back
// (0 when none was): how far the API server's status was behind the operator's.
func (p *pendingStatus) wrote(key types.NamespacedName, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var stale time.Duration
	if since, ok := p.since[key]; ok {
		stale = max(0, now.Sub(since))
	}
	delete(p.since, key)
	return stale
}

// hold returns how long to hold the change back (0: write it now), starting the cluster's clock at its first
// held change.
func (p *pendingStatus) hold(key types.NamespacedName, old, new *rayv1.RayClusterStatus, now time.Time, window time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := statusHold(old, new, p.since[key], now, loadWindow(window, len(p.since)))
	if d > 0 {
		if _, ok := p.since[key]; !ok {
			p.since[key] = now
		}
	}
	return d
}

// Under a burst the hold grows with the number of clusters holding a change, by perHeldStretch each, from
// quietStatusHold up to the window: with hundreds of clusters provisioning at once their pods take seconds to turn
// Ready, and a progress write every second would be a second status update for most of them, each through the API
// server that is creating the next clusters' pods. Fewer than burstHeld clusters holding a change is no burst: the
// hold stays quietStatusHold. State changes and failures are always written at once.
const (
	perHeldStretch = 100 * time.Millisecond
	burstHeld      = 10
)

// loadWindow is the coalescing window when held clusters hold a change: never above window, never above
// quietStatusHold outside a burst.
func loadWindow(window time.Duration, held int) time.Duration {
	if window <= 0 {
		return window
	}
	quiet := min(window, quietStatusHold)
	if held < burstHeld {
		return quiet
	}
	return min(window, max(quiet, time.Duration(held)*perHeldStretch))
}

// held is how many clusters hold a change back now.
func (p *pendingStatus) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.since)
}

// settled drops a cluster's held change once its status no longer differs (nothing left to write).
func (p *pendingStatus) settled(key types.NamespacedName) {
	p.mu.Lock()
	delete(p.since, key)
	p.mu.Unlock()
}

// forget drops what is remembered of a cluster that is gone.
func (p *pendingStatus) forget(key types.NamespacedName) {
	p.mu.Lock()
	delete(p.since, key)
	p.mu.Unlock()
}
