package operator

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		want string // "" for valid; else a piece of the error
	}{
		{"defaults", Options{}, ""},
		{"short lease", Options{LeaseDuration: 8 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: time.Second}, ""},
		{"lease not above renew deadline", Options{LeaseDuration: 10 * time.Second}, "--leader-elect-lease-duration 10s must be greater than --leader-elect-renew-deadline 10s"},
		{"renew deadline within jittered retry", Options{RenewDeadline: 2 * time.Second}, "--leader-elect-renew-deadline 2s must be greater than 1.2 × --leader-elect-retry-period 2s"},
		{"negative", Options{RetryPeriod: -time.Second}, "--leader-elect-retry-period -1s: must not be negative"},
		{"negative ray timeout", Options{RayTimeout: -time.Second}, "--ray-timeout"},
		{"negative coalesce window", Options{StatusCoalesceWindow: -time.Second}, "--status-coalesce-window -1s: must not be negative"},
		{"negative start phase threshold", Options{StartPhaseLateThreshold: -time.Second}, "--start-phase-late-threshold -1s: must not be negative"},
		{"idle check interval", Options{IdleCheckInterval: 30 * time.Second}, ""},
		{"idle check interval too short", Options{IdleCheckInterval: 500 * time.Millisecond}, "--idle-check-interval 500ms: must be at least 1s"},
		{"negative idle check interval", Options{IdleCheckInterval: -time.Minute}, "--idle-check-interval -1m0s: must be at least 1s"},
	} {
		err := c.o.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v; want one containing %q", c.name, err, c.want)
		}
	}
}

// --status-coalesce-window 0 turns coalescing off: the RayCluster controller's Options take a negative window for
// that (their zero is the default).
func TestCoalesceWindow(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{0: -1, 10 * time.Second: 10 * time.Second, 3 * time.Second: 3 * time.Second} {
		if got := coalesceWindow(in); got != want {
			t.Errorf("coalesceWindow(%s) = %s, want %s", in, got, want)
		}
	}
}

// KubeRay's batch-scheduler flags: --enable-batch-scheduler means volcano, both together and an unknown name stop
// the start naming the flag (ValidateBatchSchedulerConfig, getSchedulerFactory).
func TestBatchSchedulerOptions(t *testing.T) {
	for _, c := range []struct {
		o       Options
		want    string
		wantErr string
	}{
		{Options{}, "", ""},
		{Options{BatchScheduler: "volcano"}, "volcano", ""},
		{Options{BatchScheduler: "yunikorn"}, "yunikorn", ""},
		{Options{BatchScheduler: "scheduler-plugins"}, "scheduler-plugins", ""},
		{Options{BatchScheduler: "kai-scheduler"}, "kai-scheduler", ""},
		{Options{EnableBatchScheduler: true}, "volcano", ""},
		{Options{BatchScheduler: "slurm"}, "", `--batch-scheduler "slurm": not a batch scheduler KubeRay supports (volcano, yunikorn, scheduler-plugins, kai-scheduler)`},
		{Options{BatchScheduler: "yunikorn", EnableBatchScheduler: true}, "", "--enable-batch-scheduler (deprecated) and --batch-scheduler are both set"},
	} {
		got, err := c.o.batchScheduler()
		if got != c.want || (err == nil) != (c.wantErr == "") || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%+v: %q, %v; want %q, error %q", c.o, got, err, c.want, c.wantErr)
		}
		if verr := c.o.Validate(); (verr == nil) != (c.wantErr == "") {
			t.Errorf("%+v: Validate %v", c.o, verr)
		}
	}
}
