package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond every 100ms until it holds, failing the test after timeout with what cond last said.
// Tests run on small, busy machines: give waits minutes, not seconds.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
