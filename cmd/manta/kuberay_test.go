package main

import (
	goflag "flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	"github.com/manta-dev/manta/internal/features"
	"github.com/manta-dev/manta/internal/logging"
	"github.com/manta-dev/manta/internal/operator"
)

// chartRender is a container of KubeRay's chart as rendered (testdata): its command, args and env, and the
// configuration file its ConfigMap holds.
type chartRender struct {
	Command []string `json:"command"`
	Args    []string `json:"args"`
	Env     []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
	Config string `json:"config"`
}

func readChartRender(t *testing.T, name string) chartRender {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var r chartRender
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// parseOperator parses args as the manta binary does when run under the name argv0 (main: commandArgs, then the root
// command with its --zap-* flags), and resolves the operator's settings with the given environment and files.
func parseOperator(t *testing.T, argv0 string, args []string, env, files map[string]string) (*operatorFlags, resolvedOperator, error) {
	t.Helper()
	f := &operatorFlags{}
	root := newRootCommand()
	for _, c := range root.Commands() {
		if c.Name() == "operator" {
			root.RemoveCommand(c)
		}
	}
	root.AddCommand(newOperatorCommandWith(f))
	cmd, rest, err := root.Find(commandArgs(argv0, args))
	if err != nil {
		return nil, resolvedOperator{}, err
	}
	if cmd.Name() != "operator" {
		t.Fatalf("%s %v runs %q, not the operator", argv0, args, cmd.Name())
	}
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.ParseFlags(rest); err != nil {
		return nil, resolvedOperator{}, err
	}
	readFile := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	res, err := resolveOperator(cmd.Flags(), &f.o, &f.kr, func(k string) string { return env[k] }, readFile)
	return f, res, err
}

func envOf(r chartRender) map[string]string {
	env := map[string]string{}
	for _, e := range r.Env {
		env[e.Name] = e.Value
	}
	return env
}

// kubeRayChartGates are the gates of KubeRay v1.7.0's default chart values, as Manta holds them.
func kubeRayChartGates() features.Gates {
	g := features.Defaults()
	g[features.RayCronJob], g[features.RayClusterMTLS], g[features.RayClusterNetworkPolicy], g[features.RayClusterHistoryServer] = false, false, false, false
	return g
}

// checkChartDefaults asserts the options KubeRay v1.7.0's chart asks for with its default values.
func checkChartDefaults(t *testing.T, f *operatorFlags, res resolvedOperator) {
	t.Helper()
	o := f.o
	type got struct {
		LeaderElection       bool
		ReconcileConcurrency int
		QPS                  float32
		Burst                int
		NoKubeRayMetrics     bool
		MetricsAddr, Probe   string
		Watch                []string
		BatchScheduler       string
		EnableBatchScheduler bool
		UseKubernetesProxy   bool
		DeleteAfterFinishes  bool
		PodDefaults          bool
		// The chart probes :8080/metrics over plain HTTP without credentials.
		MetricsPlainHTTP bool
	}
	want := got{LeaderElection: true, ReconcileConcurrency: 1, QPS: 100, Burst: 200, MetricsAddr: ":8080", Probe: ":8082", MetricsPlainHTTP: true}
	if d := cmp.Diff(want, got{o.LeaderElection, o.ReconcileConcurrency, o.QPS, o.Burst, o.NoKubeRayMetrics, o.MetricsAddr, o.HealthProbeAddr,
		o.WatchNamespaces, o.BatchScheduler, o.EnableBatchScheduler, o.UseKubernetesProxy, o.DeleteRayJobAfterJobFinishes, o.PodDefaults != nil,
		o.MetricsAsKubeRay && o.MetricsInsecure}); d != "" {
		t.Errorf("options (-want +got):\n%s", d)
	}
	if d := cmp.Diff(logging.Outputs{StdoutEncoder: "json", FileEncoder: "json"}, res.outputs); d != "" {
		t.Errorf("log outputs (-want +got):\n%s", d)
	}
	if d := cmp.Diff(kubeRayChartGates(), res.gates); d != "" {
		t.Errorf("feature gates (-want +got):\n%s", d)
	}
	// The one warning says metrics are plain HTTP (TestManagerServesMetricsAsKubeRay).
	if len(res.warnings) != 1 || !strings.Contains(res.warnings[0], "--metrics-as-kuberay") {
		t.Errorf("warnings %v", res.warnings)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("the options do not validate: %v", err)
	}
}

// TestKubeRayChartDefaultArgs: the command, args and env KubeRay v1.7.0's chart renders with its default values start
// Manta's operator with what they ask for (its binary run as /manager is `manta operator`).
func TestKubeRayChartDefaultArgs(t *testing.T) {
	r := readChartRender(t, "kuberay-v1.7.0-chart-default.yaml")
	f, res, err := parseOperator(t, r.Command[0], r.Args, envOf(r), nil)
	if err != nil {
		t.Fatalf("%s %v: %v", r.Command[0], r.Args, err)
	}
	checkChartDefaults(t, f, res)
}

// TestKubeRayChartConfiguration: the chart with configuration.enabled passes --config and the gates; the file its
// ConfigMap holds sets what the flags set otherwise.
func TestKubeRayChartConfiguration(t *testing.T) {
	r := readChartRender(t, "kuberay-v1.7.0-chart-configuration.yaml")
	files := map[string]string{"/etc/kuberay/config.yaml": r.Config}
	f, res, err := parseOperator(t, r.Command[0], r.Args, envOf(r), files)
	if err != nil {
		t.Fatalf("%s %v: %v", r.Command[0], r.Args, err)
	}
	checkChartDefaults(t, f, res)

	// KubeRay ignores its flags beside --config; Manta refuses them rather than drop a value.
	_, _, err = parseOperator(t, "/manager", append(r.Args, "--qps=5", "--watch-namespace=a"), nil, files)
	if err == nil || !strings.Contains(err.Error(), "--qps, --watch-namespace must be set in the configuration file") {
		t.Errorf("--config with --qps: %v", err)
	}
	// Manta's own flags still apply.
	f, _, err = parseOperator(t, "/manager", append(r.Args, "--puller-image=registry.local/manta:dev"), nil, files)
	if err != nil || f.o.PullerImage != "registry.local/manta:dev" {
		t.Errorf("--config with --puller-image: %v %q", err, f.o.PullerImage)
	}
	// KubeRay does not read DELETE_RAYJOB_CR_AFTER_JOB_FINISHES with --config.
	_, _, err = parseOperator(t, "/manager", r.Args, map[string]string{operator.EnvDeleteRayJobAfterJobFinishes: "true"}, files)
	if err == nil || !strings.Contains(err.Error(), "deleteRayJobAfterJobFinishes: true") {
		t.Errorf("env with --config: %v", err)
	}
	_, _, err = parseOperator(t, "/manager", []string{"--config=/nowhere.yaml"}, nil, files)
	if err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("a missing file: %v", err)
	}
	_, _, err = parseOperator(t, "/manager", []string{"--config=/c.yaml"}, nil, map[string]string{"/c.yaml": r.Config + "logStdoutEncoder: yaml\n"})
	if err == nil || !strings.Contains(err.Error(), "--config /c.yaml") {
		t.Errorf("a duplicate key: %v", err)
	}
}

// Every flag of KubeRay v1.7.0's operator (ray-operator/main.go, the zap flags it binds, controller-runtime's
// --kubeconfig on Go's flag.CommandLine) is accepted and reaches what it sets; the log outputs, --enable-metrics and
// --forced-cluster-upgrade as documented.
func TestKubeRayOperatorFlags(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { _ = goflag.CommandLine.Set("kubeconfig", "") })
	args := []string{"--kubeconfig=" + filepath.Join(dir, "kubeconfig"), "--metrics-addr=:9090", "--health-probe-bind-address=:9091", "--enable-leader-election=false",
		"--leader-election-namespace=ops", "--reconcile-concurrency=3", "--watch-namespace=a,b", "--forced-cluster-upgrade",
		"--log-file-path=" + filepath.Join(dir, "op.log"), "--log-file-encoder=console", "--log-stdout-encoder=console",
		"--batch-scheduler=yunikorn", "--use-kubernetes-proxy", "--feature-gates=RayCronJob=false", "--enable-metrics=false",
		"--qps=50.5", "--burst=70", "--zap-devel", "--zap-encoder=console", "--zap-log-level=debug", "--zap-stacktrace-level=panic",
		"--zap-time-encoding=iso8601"}
	f, res, err := parseOperator(t, "manta", append([]string{"operator"}, args...), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := f.o
	if o.MetricsAddr != ":9090" || o.HealthProbeAddr != ":9091" || o.LeaderElection || o.LeaderElectionNS != "ops" || o.ReconcileConcurrency != 3 ||
		!cmp.Equal(o.WatchNamespaces, []string{"a", "b"}) || o.BatchScheduler != "yunikorn" || !o.UseKubernetesProxy || !o.NoKubeRayMetrics ||
		o.QPS != 50.5 || o.Burst != 70 {
		t.Errorf("options %+v", o)
	}
	if d := cmp.Diff(logging.Outputs{StdoutEncoder: "console", File: filepath.Join(dir, "op.log"), FileEncoder: "console"}, res.outputs); d != "" {
		t.Errorf("log outputs (-want +got):\n%s", d)
	}
	if res.gates[features.RayCronJob] || !res.gates[features.RayClusterMTLS] {
		t.Errorf("gates %v", res.gates)
	}
	if len(res.warnings) != 1 || !strings.Contains(res.warnings[0], "--forced-cluster-upgrade is deprecated in KubeRay") {
		t.Errorf("warnings %v", res.warnings)
	}
	if !logOptions.Development {
		t.Error("--zap-devel not applied")
	}
	// ctrl.GetConfig reads the file --kubeconfig names.
	if _, err := ctrl.GetConfig(); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "kubeconfig")) {
		t.Errorf("--kubeconfig not honoured: %v", err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--feature-gates=RayCronjob=true"}, `unknown feature gate "RayCronjob"`},
		{[]string{"--feature-gates=RayCronJob"}, "is not Name=true|false"},
		{[]string{"--log-stdout-encoder=text"}, `--log-stdout-encoder "text": must be json or console`},
		{[]string{"--log-file-encoder=xml"}, `--log-file-encoder "xml": must be json or console`},
		{[]string{"--zap-encoder=json", "--log-stdout-encoder=console"}, "disagree"},
		{[]string{"--enable-metrics=sometimes"}, "enable-metrics"},
	} {
		if _, _, err := parseOperator(t, "manta", append([]string{"operator"}, c.args...), nil, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// KubeRay parses its flags with Go's flag package, which takes one dash too; its chart and manifests use two. Manta
// takes both for the operator, so a Deployment written either way starts.
func TestCommandArgs(t *testing.T) {
	for _, c := range []struct {
		argv0 string
		in    []string
		want  []string
	}{
		{"/manager", nil, []string{"operator", "--metrics-as-kuberay"}},
		{"/manager", []string{"-watch-namespace", "a,b", "-qps=5", "--burst=3", "-h"}, []string{"operator", "--metrics-as-kuberay", "--watch-namespace", "a,b", "--qps=5", "--burst=3", "-h"}},
		{"/manager", []string{"--metrics-secure"}, []string{"operator", "--metrics-secure"}},
		{"/manager", []string{"-metrics-as-kuberay=false"}, []string{"operator", "--metrics-as-kuberay=false"}},
		{"/usr/local/bin/manta", []string{"operator", "-feature-gates=RayCronJob=false", "--zap-log-level", "-2"},
			[]string{"operator", "--feature-gates=RayCronJob=false", "--zap-log-level", "-2"}},
		{"manta", []string{"operator", "--", "-x"}, []string{"operator", "--", "-x"}},
		{"manta", []string{"dev", "-nodes=3"}, []string{"dev", "-nodes=3"}},
		{"manta", []string{"version"}, []string{"version"}},
	} {
		if got := commandArgs(c.argv0, c.in); !cmp.Equal(got, c.want) {
			t.Errorf("%s %v: %v, want %v", c.argv0, c.in, got, c.want)
		}
	}
	f, _, err := parseOperator(t, "/manager", []string{"-watch-namespace", "a,b", "-qps=5", "-enable-leader-election=false", "-zap-log-level=debug"}, nil, nil)
	if err != nil || !cmp.Equal(f.o.WatchNamespaces, []string{"a", "b"}) || f.o.QPS != 5 || f.o.LeaderElection {
		t.Errorf("one-dash flags: %v %+v", err, f)
	}
}

// The manta binary run as /manager (KubeRay's chart: command [{{ .Values.operatorCommand }}]) is `manta operator`,
// through main's path: commandArgs and the root command's Execute. A bad gate stops it before it connects anywhere.
func TestManagerRunsTheOperator(t *testing.T) {
	root := newRootCommand()
	root.SetArgs(commandArgs("/manager", []string{"-feature-gates=Bogus=true"}))
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), `unknown feature gate "Bogus"`) {
		t.Errorf("/manager -feature-gates=Bogus=true: %v", err)
	}
}

// Under KubeRay's name /metrics is plain HTTP on :8080 as KubeRay serves it (its chart probes it without
// credentials), unless the arguments ask for HTTPS; asking for both is refused.
func TestManagerServesMetricsAsKubeRay(t *testing.T) {
	f, res, err := parseOperator(t, "/manager", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !f.o.MetricsAsKubeRay || !f.o.MetricsInsecure || f.o.MetricsAddr != ":8080" {
		t.Errorf("/manager: metrics as KubeRay %v, insecure %v, addr %q; want plain HTTP on :8080", f.o.MetricsAsKubeRay, f.o.MetricsInsecure, f.o.MetricsAddr)
	}
	if err := f.o.Validate(); err != nil {
		t.Errorf("/manager's metrics do not validate: %v", err)
	}
	if !slices.ContainsFunc(res.warnings, func(w string) bool { return strings.Contains(w, "--metrics-as-kuberay") }) {
		t.Errorf("no warning says metrics are plain HTTP: %q", res.warnings)
	}
	f, _, err = parseOperator(t, "/manager", []string{"--metrics-secure"}, nil, nil)
	if err != nil || f.o.MetricsAsKubeRay || f.o.MetricsInsecure {
		t.Errorf("/manager --metrics-secure: %v, as KubeRay %v, insecure %v; want HTTPS", err, f.o.MetricsAsKubeRay, f.o.MetricsInsecure)
	}
	f, _, err = parseOperator(t, "manta", []string{"operator"}, nil, nil)
	if err != nil || f.o.MetricsAsKubeRay || f.o.MetricsInsecure {
		t.Errorf("manta operator: %v, as KubeRay %v, insecure %v; want HTTPS", err, f.o.MetricsAsKubeRay, f.o.MetricsInsecure)
	}
	f, _, err = parseOperator(t, "manta", []string{"operator", "--metrics-as-kuberay", "--metrics-secure"}, nil, nil)
	if err == nil {
		err = f.o.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "--metrics-as-kuberay") {
		t.Errorf("--metrics-as-kuberay with --metrics-secure: %v, want an error naming both", err)
	}
}
