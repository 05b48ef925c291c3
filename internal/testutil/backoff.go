package testutil

import (
	"testing"
	"time"
)

// CheckBackoff checks that tries (the times of successive refused tries) are spaced out by a backoff doubling from
// base: try i+1 comes no sooner than base × 2^i after try i, less 20% for the time a request takes to be answered,
// which the gaps are measured across (a loaded machine makes gaps longer, never shorter). It logs the gaps and
// returns them.
func CheckBackoff(t *testing.T, tries []time.Time, base time.Duration) []time.Duration {
	t.Helper()
	var gaps []time.Duration
	for i := 1; i < len(tries); i++ {
		gaps = append(gaps, tries[i].Sub(tries[i-1]))
	}
	t.Logf("intervals between refused tries: %v", gaps)
	for i, g := range gaps {
		if want := base << i; g < want*8/10 {
			t.Errorf("try %d came %s after the one before; want at least %s: no backoff (%v)", i+1, g, want, gaps)
		}
	}
	return gaps
}
