package main

import (
	"runtime/debug"
	"testing"
)

func TestSetGCPercent(t *testing.T) {
	orig := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	current := func() int { p := debug.SetGCPercent(-1); debug.SetGCPercent(p); return p }

	t.Setenv("GOGC", "")
	setGCPercent(false, defaultGCPercent)
	if got := current(); got != defaultGCPercent {
		t.Errorf("no flag, no GOGC: %d, want %d", got, defaultGCPercent)
	}
	debug.SetGCPercent(100)
	t.Setenv("GOGC", "100")
	setGCPercent(false, defaultGCPercent)
	if got := current(); got != 100 {
		t.Errorf("GOGC=100 without the flag: %d, want the environment's 100", got)
	}
	setGCPercent(true, 30)
	if got := current(); got != 30 {
		t.Errorf("--gc-percent=30 with GOGC=100: %d, want 30", got)
	}
}
