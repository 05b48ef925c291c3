// Package createbackoff spaces out a controller's pod creates after the API server refused one (a ResourceQuota,
// an admission webhook, a LimitRange): the RayCluster and ImagePullJob controllers share it.
package createbackoff

import (
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Defaults of the backoff after a refused pod create: 1 s, doubling, capped at 5 minutes (the Job controller's
// pod-failure backoff is 10 s capped at 6 minutes; a quota that frees up is worth noticing sooner).
const (
	DefaultBase = time.Second
	DefaultMax  = 5 * time.Minute
)

// Backoff spaces out an owner's pod creates after one was refused: every reconcile in between, whatever woke it,
// leaves the creates alone, and each further refusal doubles the wait up to the cap. A reconcile whose creates all
// go through (its controller calls Succeeded then), or a spec change (a new generation), ends the backoff.
// Deletes and the status are not held back.
type Backoff struct {
	base, max time.Duration
	mu        sync.Mutex
	m         map[types.NamespacedName]*state
}

type state struct {
	generation int64
	delay      time.Duration
	next       time.Time
	// reported are the kinds of refusal (event reasons) the streak has reported.
	reported []string
}

// New returns a Backoff that first waits base, at most maxDelay (DefaultBase and DefaultMax when not positive).
func New(base, maxDelay time.Duration) *Backoff {
	if base <= 0 {
		base = DefaultBase
	}
	if maxDelay <= 0 {
		maxDelay = DefaultMax
	}
	return &Backoff{base: base, max: max(base, maxDelay), m: map[types.NamespacedName]*state{}}
}

// Wait is how long the owner's creates must still wait; zero when they may go ahead.
func (b *Backoff) Wait(key types.NamespacedName, generation int64, now time.Time) time.Duration {
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

// Failed records a refused create of one kind (its event reason) and returns the wait before the next try, and
// whether this is the streak's first refusal of that kind (the one worth an event: a RayCluster streak that began
// with the head refused reports the workers' refusal once too when the head gets in and they do not).
func (b *Backoff) Failed(key types.NamespacedName, generation int64, now time.Time, kind string) (delay time.Duration, first bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.m[key]
	switch {
	case s == nil || s.generation != generation:
		s = &state{generation: generation, delay: b.base}
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

// Succeeded ends the owner's backoff (a reconcile whose creates all went through, or the owner is gone).
func (b *Backoff) Succeeded(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
}

// StableMessage is a refused create's message without the refused pod's name, which is generated anew on each try
// (the API server picks it from the pod's generateName): a condition or status message that carries it then says
// the same thing on every retry, and is written once.
func StableMessage(err error, pod *corev1.Pod) string {
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
