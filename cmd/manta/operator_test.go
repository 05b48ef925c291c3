package main

import (
	"io"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/operator"
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

// --adaptive-procs is on by default, off when GOMAXPROCS is set in the environment, and the flag given wins.
func TestAdaptProcs(t *testing.T) {
	for _, c := range []struct {
		env             string
		given, on, want bool
	}{
		{"", false, true, true},
		{"4", false, true, false},
		{"", true, false, false},
		{"4", true, true, true},
	} {
		t.Setenv("GOMAXPROCS", c.env)
		if got := adaptProcs(c.given, c.on); got != c.want {
			t.Errorf("GOMAXPROCS=%q, flag given %v = %v: %v, want %v", c.env, c.given, c.on, got, c.want)
		}
	}
}

// --gcs-ft-redis-cleanup defaults to true, to false when KubeRay's ENABLE_GCS_FT_REDIS_CLEANUP=false is set, and the
// flag given wins over the environment.
func TestRedisCleanupFlag(t *testing.T) {
	for _, c := range []struct {
		env  string
		args []string
		off  bool
	}{
		{"", nil, false},
		{"true", nil, false},
		{"false", nil, true},
		{"FALSE", nil, true},
		{"", []string{"--gcs-ft-redis-cleanup=false"}, true},
		{"false", []string{"--gcs-ft-redis-cleanup"}, false},
		{"false", []string{"--gcs-ft-redis-cleanup=true"}, false},
	} {
		t.Setenv(envRedisCleanup, c.env)
		var o operator.Options
		fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
		addOperatorFlags(fs, &o)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if o.NoRedisCleanup != c.off {
			t.Errorf("%s=%q %v: NoRedisCleanup %v, want %v", envRedisCleanup, c.env, c.args, o.NoRedisCleanup, c.off)
		}
	}
	fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
	addOperatorFlags(fs, &operator.Options{})
	if err := fs.Parse([]string{"--gcs-ft-redis-cleanup=maybe"}); err == nil {
		t.Error("--gcs-ft-redis-cleanup=maybe accepted")
	}
}

// KubeRay's flag names reach the options (operator.Options.Validate checks them).
func TestBatchSchedulerFlags(t *testing.T) {
	var o operator.Options
	fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
	addOperatorFlags(fs, &o)
	if err := fs.Parse([]string{"--batch-scheduler=yunikorn", "--enable-batch-scheduler"}); err != nil {
		t.Fatal(err)
	}
	if o.BatchScheduler != "yunikorn" || !o.EnableBatchScheduler {
		t.Errorf("options %q %v", o.BatchScheduler, o.EnableBatchScheduler)
	}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--enable-batch-scheduler") {
		t.Errorf("both flags: %v", err)
	}
}

// TestSecurityOperatorMetricsSecureFlag: `manta operator --metrics-secure=false` is refused on an address other
// programs on the network can reach, before the operator connects anywhere.
func TestSecurityOperatorMetricsSecureFlag(t *testing.T) {
	for _, c := range []struct {
		args    []string
		refused bool
	}{
		{[]string{"--metrics-secure=false"}, true}, // the default --metrics-addr is :8080
		{[]string{"--metrics-secure=false", "--metrics-addr=0.0.0.0:9090"}, true},
		{[]string{"--metrics-secure=false", "--metrics-addr=127.0.0.1:9090"}, false},
	} {
		cmd := newOperatorCommand()
		cmd.SetArgs(c.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		// With KUBECONFIG pointing nowhere, an accepted command fails later, at loading the config.
		t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
		t.Setenv("KUBERNETES_SERVICE_HOST", "")
		err := cmd.Execute()
		refused := err != nil && strings.Contains(err.Error(), "--metrics-secure=false")
		if refused != c.refused {
			t.Errorf("manta operator %v: error %v, want refused=%v", c.args, err, c.refused)
		}
	}
}

// KubeRay's environment sets the operator's options under the flags: CLUSTER_DOMAIN is the default of
// --cluster-domain, and the flag given wins; a bad number stops the start.
func TestOperatorKubeRayEnv(t *testing.T) {
	env := map[string]string{"CLUSTER_DOMAIN": "corp.example", "RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS": "42"}
	getenv := func(k string) string { return env[k] }
	for _, c := range []struct {
		args   []string
		domain string
	}{{nil, "corp.example"}, {[]string{"--cluster-domain=flag.example"}, "flag.example"}} {
		var o operator.Options
		fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
		addOperatorFlags(fs, &o)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if _, err := applyKubeRayEnv(fs, &o, getenv); err != nil {
			t.Fatal(err)
		}
		if o.ClusterDomain != c.domain || o.RayJobStatusCheckTimeout.Seconds() != 42 {
			t.Errorf("args %v: domain %q, status check timeout %s", c.args, o.ClusterDomain, o.RayJobStatusCheckTimeout)
		}
	}
	env["RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS"] = "soon"
	var o operator.Options
	fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
	addOperatorFlags(fs, &o)
	if _, err := applyKubeRayEnv(fs, &o, getenv); err == nil || !strings.Contains(err.Error(), "RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS") {
		t.Errorf("err %v", err)
	}
}

// --disable-optimization turns the named mechanisms off (repeatable, comma-separated) and refuses unknown names.
func TestDisableOptimizationFlag(t *testing.T) {
	var o operator.Options
	fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addOperatorFlags(fs, &o)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range optimize.All {
		if !o.Optimizations.On(m) {
			t.Errorf("%s off by default", m)
		}
	}
	if err := fs.Parse([]string{"--disable-optimization=status-coalescing,metadata-writes", "--disable-optimization=pod-watch-pruning"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range optimize.All {
		want := m != optimize.StatusCoalescing && m != optimize.MetadataWrites && m != optimize.PodWatchPruning
		if o.Optimizations.On(m) != want {
			t.Errorf("%s on = %v, want %v", m, o.Optimizations.On(m), want)
		}
	}
	fs = pflag.NewFlagSet("operator", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addOperatorFlags(fs, &operator.Options{})
	if err := fs.Parse([]string{"--disable-optimization=status-coalesing"}); err == nil || !strings.Contains(err.Error(), "unknown optimization") {
		t.Errorf("a misspelt name: %v", err)
	}
}

// --start-phase-late-threshold: 2m unless given, 0 turns the late events off, a negative one is refused by name.
func TestStartPhaseLateThresholdFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    time.Duration
		refused bool
	}{
		{nil, 2 * time.Minute, false},
		{[]string{"--start-phase-late-threshold=45s"}, 45 * time.Second, false},
		{[]string{"--start-phase-late-threshold=0"}, 0, false},
		{[]string{"--start-phase-late-threshold=-1s"}, -time.Second, true},
	} {
		var o operator.Options
		fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
		addOperatorFlags(fs, &o)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if o.StartPhaseLateThreshold != tc.want {
			t.Errorf("%v: threshold %s, want %s", tc.args, o.StartPhaseLateThreshold, tc.want)
		}
		err := o.Validate()
		if refused := err != nil && strings.Contains(err.Error(), "--start-phase-late-threshold"); refused != tc.refused {
			t.Errorf("%v: Validate() = %v, want refused %v", tc.args, err, tc.refused)
		}
	}
}

// Events go at ten times the operator's own client limits: a burst's events keep pace with its pod creates (at 20
// and 100 a second, when events waited for the other writes to pause, the backlog of a 1,000-cluster burst took 140
// and 39 s to drain, and every second of it cost the control plane; docs/benchmarks.md, "Where the deferred events'
// cost comes from").
func TestEventLimitsDefaultToTenTimesTheOperators(t *testing.T) {
	var o operator.Options
	fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
	addOperatorFlags(fs, &o)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if o.EventQPS != 10*o.QPS || o.EventBurst != 10*o.Burst {
		t.Errorf("--event-qps %v --event-burst %d by default, want ten times the operator's --qps %v --burst %d", o.EventQPS, o.EventBurst, o.QPS, o.Burst)
	}
	if err := fs.Parse([]string{"--event-qps=7", "--event-burst=3"}); err != nil {
		t.Fatal(err)
	}
	if o.EventQPS != 7 || o.EventBurst != 3 {
		t.Errorf("--event-qps=7 --event-burst=3 gave %v and %d", o.EventQPS, o.EventBurst)
	}
}
