package idle

import (
	"strings"
	"testing"
	"time"
)

func TestParseTimeout(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		absent      bool
		want        time.Duration
		wantErr     string
	}{
		{name: "absent", absent: true},
		{name: "minutes", value: "30m", want: 30 * time.Minute},
		{name: "spaces trimmed", value: " 2h ", want: 2 * time.Hour},
		{name: "the minimum", value: "10s", want: MinTimeout},
		{name: "below the minimum", value: "9s", wantErr: "shorter than the minimum 10s"},
		{name: "zero", value: "0", wantErr: "shorter than the minimum"},
		{name: "negative", value: "-5m", wantErr: "shorter than the minimum"},
		{name: "no unit", value: "30", wantErr: "is not a duration"},
		{name: "empty", value: "", wantErr: "is not a duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{}
			if !tc.absent {
				ann[AnnotationIdleTimeout] = tc.value
			}
			d, ok, err := ParseTimeout(ann)
			if ok == tc.absent {
				t.Fatalf("ok = %v with the annotation absent = %v", ok, tc.absent)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), AnnotationIdleTimeout) {
					t.Fatalf("err = %v, want one naming %s and saying %q", err, AnnotationIdleTimeout, tc.wantErr)
				}
				return
			}
			if err != nil || d != tc.want {
				t.Fatalf("ParseTimeout = %v, %v; want %v", d, err, tc.want)
			}
		})
	}
}

func TestDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if due, _ := Due(Track{}, t0, time.Minute); !due {
		t.Fatal("a cluster never checked is due at once")
	}
	tr := Track{LastCheck: t0}
	if due, wait := Due(tr, t0.Add(20*time.Second), time.Minute); due || wait != 40*time.Second {
		t.Fatalf("20s after a check with a 1m interval: due %v wait %s; want not due, 40s", due, wait)
	}
	if due, _ := Due(tr, t0.Add(time.Minute), time.Minute); !due {
		t.Fatal("a check is due once the interval has passed")
	}
}

// TestObserveSequence walks one cluster through checks one interval apart: activity keeps it up, a failed check
// neither starts nor ends an idle stretch and never suspends, and the idle time counts from the first idle check.
func TestObserveSequence(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const timeout = 3 * time.Minute
	busy := Activity{Actors: 1}
	type step struct {
		at      time.Duration
		a       Activity
		failed  bool
		suspend bool
		idleAt  time.Duration // -1: not idle
	}
	steps := []step{
		{at: 0, a: busy, idleAt: -1},
		{at: time.Minute, failed: true, idleAt: -1},                  // unknown: not the start of a stretch
		{at: 2 * time.Minute, idleAt: 2 * time.Minute},               // first idle check
		{at: 3 * time.Minute, failed: true, idleAt: 2 * time.Minute}, // keeps the stretch
		{at: 4 * time.Minute, a: Activity{Tasks: 2}, idleAt: -1},     // activity ends it
		{at: 5 * time.Minute, idleAt: 5 * time.Minute},
		{at: 7 * time.Minute, idleAt: 5 * time.Minute},
		{at: 8 * time.Minute, failed: true, idleAt: 5 * time.Minute}, // past the timeout but the head did not answer
		{at: 8*time.Minute + time.Second, suspend: true, idleAt: 5 * time.Minute},
	}
	var tr Track
	for i, s := range steps {
		var suspend bool
		tr, suspend = Observe(tr, t0.Add(s.at), s.a, s.failed, timeout)
		if suspend != s.suspend {
			t.Fatalf("step %d (%s): suspend = %v, want %v", i, s.at, suspend, s.suspend)
		}
		if !tr.LastCheck.Equal(t0.Add(s.at)) {
			t.Fatalf("step %d: LastCheck = %s", i, tr.LastCheck)
		}
		if s.idleAt < 0 && !tr.IdleSince.IsZero() || s.idleAt >= 0 && !tr.IdleSince.Equal(t0.Add(s.idleAt)) {
			t.Fatalf("step %d (%s): IdleSince = %s, want offset %s", i, s.at, tr.IdleSince, s.idleAt)
		}
	}
}

func TestActivity(t *testing.T) {
	for _, tc := range []struct {
		a    Activity
		busy bool
		text string
	}{
		{Activity{}, false, "nothing running"},
		{Activity{Jobs: 1}, true, "1 job"},
		{Activity{ServeApps: 2, Actors: 1, Tasks: 3}, true, "2 Serve applications, 1 actor, 3 tasks"},
	} {
		if tc.a.Busy() != tc.busy || tc.a.String() != tc.text {
			t.Errorf("%+v: Busy %v String %q; want %v %q", tc.a, tc.a.Busy(), tc.a.String(), tc.busy, tc.text)
		}
	}
}
