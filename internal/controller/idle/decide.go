package idle

import (
	"fmt"
	"strings"
	"time"
)

// ParseTimeout reads manta.dev/idle-timeout from a cluster's annotations. ok is false when the annotation is
// absent; err names the annotation when its value is not a duration of at least MinTimeout.
func ParseTimeout(annotations map[string]string) (d time.Duration, ok bool, err error) {
	v, ok := annotations[AnnotationIdleTimeout]
	if !ok {
		return 0, false, nil
	}
	d, err = time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, true, fmt.Errorf("annotation %s: %q is not a duration (examples: 30m, 2h, 90s)", AnnotationIdleTimeout, v)
	}
	if d < MinTimeout {
		return 0, true, fmt.Errorf("annotation %s: %q is shorter than the minimum %s", AnnotationIdleTimeout, v, MinTimeout)
	}
	return d, true, nil
}

// Activity is what one check found on a head; Busy when any count is above zero.
type Activity struct {
	// Jobs that are not in a terminal state (PENDING or RUNNING, submitted or plain drivers).
	Jobs int
	// ServeApps is the number of Serve applications, whatever their status.
	ServeApps int
	// Actors that are not DEAD; Tasks that are neither FINISHED nor FAILED.
	Actors, Tasks int
}

// Busy reports whether anything runs or waits to run.
func (a Activity) Busy() bool { return a.Jobs+a.ServeApps+a.Actors+a.Tasks > 0 }

// String names what was found, for messages ("1 job, 2 actors").
func (a Activity) String() string {
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{a.Jobs, "job"}, {a.ServeApps, "Serve application"}, {a.Actors, "actor"}, {a.Tasks, "task"}} {
		if p.n == 1 {
			parts = append(parts, "1 "+p.what)
		} else if p.n > 1 {
			parts = append(parts, fmt.Sprintf("%d %ss", p.n, p.what))
		}
	}
	if len(parts) == 0 {
		return "nothing running"
	}
	return strings.Join(parts, ", ")
}

// Track is what the controller remembers of one cluster between checks.
type Track struct {
	// LastCheck is when the head was last read (zero: never since the cluster last became Ready).
	LastCheck time.Time
	// IdleSince is the first check of the current idle stretch (zero: the last successful check found activity,
	// or none succeeded yet). The idle time counts from the first check that found nothing, not from the last
	// activity (which happened at some unknown moment before it): a cluster is never suspended early.
	IdleSince time.Time
}

// Due reports whether a check may run at now, at most one per interval; if not, wait is how long until it may.
func Due(t Track, now time.Time, interval time.Duration) (due bool, wait time.Duration) {
	if t.LastCheck.IsZero() {
		return true, 0
	}
	next := t.LastCheck.Add(interval)
	if !now.Before(next) {
		return true, 0
	}
	return false, next.Sub(now)
}

// Observe folds one check's outcome into t and reports whether the cluster has now been idle for timeout. A
// failed check (failed true) keeps the idle stretch as it was but never suspends: only a head that answered and
// showed nothing is idle.
func Observe(t Track, at time.Time, a Activity, failed bool, timeout time.Duration) (next Track, suspend bool) {
	t.LastCheck = at
	switch {
	case failed:
		return t, false
	case a.Busy():
		t.IdleSince = time.Time{}
		return t, false
	case t.IdleSince.IsZero():
		t.IdleSince = at
	}
	return t, at.Sub(t.IdleSince) >= timeout
}
