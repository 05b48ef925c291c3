package raycluster

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
)

// The controller's performance mechanisms (internal/controller/shared/optimize), each switched by
// Options.Optimizations, meet the reconcile at these points only; with all of them off it observes, plans, writes and
// writes the status plainly:
//   - the status write asks a statusPolicy whether to write now (coalescing, or writeAtOnce);
//   - ownerHandler and podUpdateMatters (queue.go) decide when a change to an owned object is reconciled;
//   - templateHashes (pods.go) may reuse a generation's hashes;
//   - clusterLive may skip its read for a new cluster (skipLiveCheck).
//
// Metadata-only writes (Options.PodCreator, Options.StatusWriter) and the pod watch's pruning are wired by
// internal/operator. The expectations, the create backoff and the status writes' reconcile.StatusWrites are not
// among them: they keep the controller correct (no duplicate pods; refused creates reported and retried at a pace;
// no status change dropped for a cache behind the controller's own status write), not fast.

// statusPolicy decides when a changed status is written.
type statusPolicy interface {
	// hold returns how long to hold back a change of the cluster (0: write it now).
	hold(key types.NamespacedName, old, new *rayv1.RayClusterStatus, now time.Time) time.Duration
	// wrote records a status write and returns how long its oldest change was held back.
	wrote(key types.NamespacedName, now time.Time) time.Duration
	// settled says the status no longer differs; forget, that the cluster is gone.
	settled(key types.NamespacedName)
	forget(key types.NamespacedName)
}

// writeAtOnce is the plain policy: every change is written when it is seen.
type writeAtOnce struct{}

func (writeAtOnce) hold(types.NamespacedName, *rayv1.RayClusterStatus, *rayv1.RayClusterStatus, time.Time) time.Duration {
	return 0
}
func (writeAtOnce) wrote(types.NamespacedName, time.Time) time.Duration { return 0 }
func (writeAtOnce) settled(types.NamespacedName)                        {}
func (writeAtOnce) forget(types.NamespacedName)                         {}

// coalescing holds progress-only changes back (coalesce.go).
type coalescing struct {
	p      *pendingStatus
	window time.Duration
	sw     *optimize.Switches
}

func (s coalescing) hold(key types.NamespacedName, old, new *rayv1.RayClusterStatus, now time.Time) time.Duration {
	d := s.p.hold(key, old, new, now, s.window)
	if d > 0 {
		s.sw.Acted(optimize.StatusCoalescing)
	}
	return d
}

func (s coalescing) wrote(key types.NamespacedName, now time.Time) time.Duration {
	return s.p.wrote(key, now)
}
func (s coalescing) settled(key types.NamespacedName) { s.p.settled(key) }
func (s coalescing) forget(key types.NamespacedName)  { s.p.forget(key) }

// skipLiveCheck says whether a new cluster's first pods may be created without clusterLive's read
// (optimize.NewClusterLiveSkip): no operator has reported on the cluster yet (no state, condition or observed
// generation: the conditions may be off), this one has created no pod for it, and it is less than newClusterAge old.
// Pods made for such a cluster deleted meanwhile are collected by the garbage collector; the stale-cache case
// clusterLive guards against needs pods that existed and went.
func (r *Reconciler) skipLiveCheck(run *run) bool {
	c := run.c
	if !r.opts.Optimizations.On(optimize.NewClusterLiveSkip) || c.Status.State != "" || len(c.Status.Conditions) > 0 ||
		c.Status.ObservedGeneration != 0 || len(run.obs.pods) > 0 || r.opts.Clock.Since(c.CreationTimestamp.Time) >= newClusterAge {
		return false
	}
	if uid, made := r.madePods.Load(run.key); made && uid == c.UID {
		return false
	}
	r.opts.Optimizations.Acted(optimize.NewClusterLiveSkip)
	return true
}
