package raycluster

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// Defaults of the backoff after a refused pod create: 1 s, doubling, capped at 5 minutes (the Job controller's
// pod-failure backoff is 10 s capped at 6 minutes; a quota that frees up is worth noticing sooner).
const (
	defaultCreateBackoffBase = time.Second
	defaultCreateBackoffMax  = 5 * time.Minute
)

// createBackoff spaces out a cluster's pod creates after one was refused (a ResourceQuota, an admission webhook, a
// LimitRange): every reconcile in between, whatever woke it, leaves the creates alone, and each further refusal
// doubles the wait up to the cap. A reconcile whose creates all go through (Reconcile calls succeeded then), or a
// spec change (a new generation), ends the backoff.
// Deletes and the status are not held back.
type createBackoff struct {
	base, max time.Duration
	mu        sync.Mutex
	m         map[types.NamespacedName]*backoffState
}

type backoffState struct {
	generation int64
	delay      time.Duration
	next       time.Time
	// reported are the kinds of refusal (event reasons) the streak has reported.
	reported []string
}

func newCreateBackoff(base, maxDelay time.Duration) *createBackoff {
	if base <= 0 {
		base = defaultCreateBackoffBase
	}
	if maxDelay <= 0 {
		maxDelay = defaultCreateBackoffMax
	}
	return &createBackoff{base: base, max: max(base, maxDelay), m: map[types.NamespacedName]*backoffState{}}
}

// wait is how long the cluster's creates must still wait; zero when they may go ahead.
func (b *createBackoff) wait(key types.NamespacedName, generation int64, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.m[key]
	if s == nil {
		return 0
	}
	if s.generation != generation {
		delete(b.m, key)
		return 0
	}
	return max(0, s.next.Sub(now))
}

// failed records a refused create of one kind (its event reason) and returns the wait before the next try, and
// whether this is the streak's first refusal of that kind (the one worth an event: a streak that began with the
// head refused reports the workers' refusal once too when the head gets in and they do not).
func (b *createBackoff) failed(key types.NamespacedName, generation int64, now time.Time, kind string) (delay time.Duration, first bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.m[key]
	switch {
	case s == nil || s.generation != generation:
		s = &backoffState{generation: generation, delay: b.base}
		b.m[key] = s
		s.next = now.Add(s.delay)
	case now.Before(s.next):
		// Another create of the same reconcile (a parallel batch, another group): the same wait.
	default:
		s.delay = min(2*s.delay, b.max)
		s.next = now.Add(s.delay)
	}
	if !slices.Contains(s.reported, kind) {
		s.reported = append(s.reported, kind)
		first = true
	}
	return s.next.Sub(now), first
}

// succeeded ends the cluster's backoff: a create went through.
func (b *createBackoff) succeeded(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
}

// backedOff marks a reconcile error whose retry createBackoff has scheduled: Reconcile returns a RequeueAfter for
// it instead of the error, which would have the work queue retry at its own pace (from 5 ms).
type backedOff struct{ err error }

func (e *backedOff) Error() string { return e.err.Error() }
func (e *backedOff) Unwrap() error { return e.err }

// onlyBackedOff says every error joined or wrapped in err is a backedOff.
func onlyBackedOff(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *backedOff:
		return true
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			if x != nil && !onlyBackedOff(x) {
				return false
			}
		}
		return true
	case interface{ Unwrap() error }:
		return onlyBackedOff(e.Unwrap())
	}
	return false
}

// stableCreateError is a refused create's message without the refused pod's name, which is generated anew on each
// try (the API server picks it from the pod's generateName): the ReplicaFailure condition then says the same thing
// on every retry, and is written once.
func stableCreateError(err error, pod *corev1.Pod) string {
	msg := err.Error()
	prefix := `pods "` + pod.Name
	if pod.Name == "" {
		prefix = `pods "` + pod.GenerateName
	}
	i := strings.Index(msg, prefix)
	if i < 0 {
		return msg
	}
	rest := msg[i+len(prefix):]
	j := strings.Index(rest, `" `)
	if j < 0 || strings.ContainsAny(rest[:j], `" `) {
		return msg
	}
	return msg[:i] + "pods " + rest[j+2:]
}

// heldFailure is the ReplicaFailure the cluster already reports, kept while creates wait out their backoff.
func heldFailure(c *rayv1.RayCluster, reason string) *failure {
	if cond := meta.FindStatusCondition(c.Status.Conditions, string(rayv1.RayClusterReplicaFailure)); cond != nil && cond.Status == metav1.ConditionTrue {
		return &failure{cond.Reason, cond.Message}
	}
	return &failure{reason, "waiting to retry a refused pod create"}
}

var errCreatesBackedOff = errors.New("pod creates wait out their backoff after a refusal")
