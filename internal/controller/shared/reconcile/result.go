// Package reconcile holds what every Manta controller does the same way at the end of a reconcile: how it writes
// the status, when to look again, which events to record, and what to return when the status write fails. A
// controller gathers its asks in a Result while it reconciles, writes the status once, then returns
// Result.Finish. The rules:
//
//   - Status write. The status is written once per reconcile (when it changed) through a StatusWriter: the
//     controller's Options.StatusWriter, ClientStatus of the manager's client when that is nil (the operator
//     passes one that reads back only the new resourceVersion). Nothing else writes the object's status.
//   - Requeue. Requeue(d) asks to look again after d; the earliest ask wins. d <= 0 ("as soon as possible") means
//     MinRequeue: time for the cache to show this reconcile's own writes, without which the next reconcile reads
//     them stale and its status write conflicts.
//   - Events. Eventf reports a write to another object (a pod, a Service, a RayCluster, a Serve config, a Ray
//     job): the write happened, or failed, whatever becomes of the status write, so the event is recorded either
//     way (nobody would hear of it otherwise: the next reconcile does not repeat the write). StatusEventf reports a
//     change of the object's own status: it is recorded only once that status is stored, because the reconcile
//     that retries the write finds the same change and reports it then. Events are recorded in the order asked.
//   - Errors. The reconcile's own error is never dropped: it is returned (joined with the status write's error when
//     that failed for another reason than a conflict), so the work queue retries with its backoff. A status write
//     that conflicts, or finds the object gone, means the cache was stale: the reconcile is requeued after
//     ConflictRequeue, with no error (and so no error log); the newer object's watch event usually comes first.
//     The same holds for a reconcile that failed only with ErrObjectChanged (a finalizer write that conflicted).
//   - Skeleton. A controller of a kind reconciles through Lifecycle, which reads the object, checks
//     spec.managedBy, runs the deletion path or the live reconcile, writes the status and returns Finish. Only it
//     writes a finalizer (AddFinalizer, RemoveFinalizer), and a deletion path records its events through its Result,
//     as a live reconcile does.
//   - Cache lag. A controller that does not watch its own status updates writes its status through StatusWrites,
//     which answers ErrCacheBehind, without writing, for an object read before the cache showed the controller's
//     last status write of it: that reconcile's status events wait, and it is looked at again after
//     CacheLagRequeue (sooner when it asked for that), with no error. Without it, a status computed from the older
//     copy could equal it and be dropped, and no event would bring the object back.
//   - Clock. A controller reads the time only from its Options.Clock (a Clock; RealClock when nil), so one fake
//     clock in a test moves every timestamp, deadline, backoff and expectation together.
//   - Children. A controller creates and updates the objects it owns under fixed names only through EnsureOwned
//     (PlanOwned then WriteOwned where a pure plan decides): one rule for a name another controller holds, a name
//     already taken, a drifted or an immutable field. How kinds differ is an option of Owned.
package reconcile

import (
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
)

const (
	// MinRequeue is the shortest requeue: what Requeue(0) asks for.
	MinRequeue = 100 * time.Millisecond
	// ConflictRequeue is when a reconcile whose status write conflicted looks again.
	ConflictRequeue = time.Second
)

// Event is one event to record about the reconciled object.
type Event struct {
	Type, Reason, Action, Note string
	// StatusChange says the event reports a change of the object's status: recorded only once it is stored.
	StatusChange bool
	// Related, when set, is the other object the event is about (the Service created, say): events of one reason
	// about different objects are then told apart instead of counted as repeats of the first.
	Related runtime.Object
}

// Result gathers the events and the requeue one reconcile asks for. The zero value asks for nothing.
type Result struct {
	Events []Event
	after  time.Duration
}

// Eventf asks for an event reporting a write to another object; it is recorded whether the status write succeeds
// or not.
func (r *Result) Eventf(typ, reason, action, format string, args ...any) {
	r.Events = append(r.Events, Event{Type: typ, Reason: reason, Action: action, Note: fmt.Sprintf(format, args...)})
}

// RelatedEventf is Eventf about a write to the object related.
func (r *Result) RelatedEventf(related runtime.Object, typ, reason, action, format string, args ...any) {
	r.Events = append(r.Events, Event{Type: typ, Reason: reason, Action: action, Note: fmt.Sprintf(format, args...), Related: related})
}

// StatusEventf asks for an event reporting a change of the object's status; it is recorded only once the status
// write succeeded (or when there was nothing to write).
func (r *Result) StatusEventf(typ, reason, action, format string, args ...any) {
	r.Events = append(r.Events, Event{Type: typ, Reason: reason, Action: action, Note: fmt.Sprintf(format, args...), StatusChange: true})
}

// Requeue asks to look again after d (MinRequeue when d <= 0); the earliest ask wins.
func (r *Result) Requeue(d time.Duration) {
	if d <= 0 {
		d = MinRequeue
	}
	if r.after == 0 || d < r.after {
		r.after = d
	}
}

// ForgetRequeue drops the requeues asked for so far: the object reached a state that waits for nothing.
func (r *Result) ForgetRequeue() { r.after = 0 }

// RequeueAfter is the earliest requeue asked for; zero when none was.
func (r *Result) RequeueAfter() time.Duration { return r.after }

// Merge adds what another Result (of a part of the reconcile run beside this one) asked for, its events first at
// index at of this one's (so events asked before the parts started stay first).
func (r *Result) Merge(o *Result, at int) {
	events := make([]Event, 0, len(r.Events)+len(o.Events))
	events = append(events, r.Events[:at]...)
	events = append(events, o.Events...)
	r.Events = append(events, r.Events[at:]...)
	if o.after > 0 {
		r.Requeue(o.after)
	}
}

// Finish records the events about regarding and returns what the Reconcile returns, by the package's rules.
// reconcileErr is the reconcile's own error; statusErr is the status write's (nil when it succeeded or when there
// was nothing to write).
func (r *Result) Finish(recorder events.EventRecorder, regarding runtime.Object, reconcileErr, statusErr error) (ctrl.Result, error) {
	for _, e := range r.Events {
		if e.StatusChange && statusErr != nil {
			continue
		}
		recorder.Eventf(regarding, e.Related, e.Type, e.Reason, e.Action, "%s", e.Note)
	}
	behind := errors.Is(statusErr, ErrCacheBehind)
	stale := apierrors.IsConflict(statusErr) || apierrors.IsNotFound(statusErr)
	if reconcileErr != nil && onlyChanged(reconcileErr) && (statusErr == nil || stale || behind) {
		return ctrl.Result{RequeueAfter: ConflictRequeue}, nil
	}
	switch {
	case reconcileErr != nil && (statusErr == nil || stale || behind):
		return ctrl.Result{}, reconcileErr
	case reconcileErr != nil:
		return ctrl.Result{}, errors.Join(reconcileErr, fmt.Errorf("update status: %w", statusErr))
	case behind:
		r.Requeue(CacheLagRequeue)
		return ctrl.Result{RequeueAfter: r.after}, nil
	case stale:
		return ctrl.Result{RequeueAfter: ConflictRequeue}, nil
	case statusErr != nil:
		return ctrl.Result{}, fmt.Errorf("update status: %w", statusErr)
	}
	return ctrl.Result{RequeueAfter: r.after}, nil
}

// onlyChanged tells an error made of ErrObjectChanged alone (however wrapped or joined) from one that carries another
// failure too, which must not be dropped.
func onlyChanged(err error) bool {
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		for _, c := range e.Unwrap() {
			if !onlyChanged(c) {
				return false
			}
		}
		return len(e.Unwrap()) > 0
	case interface{ Unwrap() error }:
		return onlyChanged(e.Unwrap())
	}
	return err == ErrObjectChanged
}
