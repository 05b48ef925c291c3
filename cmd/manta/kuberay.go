package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/manta-dev/manta/internal/features"
	"github.com/manta-dev/manta/internal/logging"
	"github.com/manta-dev/manta/internal/operator"
)

// kubeRayFlags are the flags of KubeRay v1.7.0's operator (ray-operator/main.go) that have no Manta flag of the same
// meaning already: a Deployment written for KubeRay runs `manta operator` (or /manager, see commandArgs) unchanged.
type kubeRayFlags struct {
	featureGates  string
	config        string
	enableMetrics bool
	logFile       string
	logFileEnc    string
	logStdoutEnc  string
	forcedUpgrade bool
}

func addKubeRayFlags(fs *pflag.FlagSet, f *kubeRayFlags) {
	fs.StringVar(&f.featureGates, "feature-gates", "", "KubeRay's feature gates, Name=true|false comma-separated: "+
		"one set to false turns its feature off in Manta, one Manta cannot change accepts only Manta's value, an unknown one is an error (docs/operations.md); gates: "+
		fmt.Sprint(features.Names()))
	fs.StringVar(&f.config, "config", "", "KubeRay's operator configuration file (config.ray.io/v1alpha1 Configuration); the flags it also sets are then refused (docs/operations.md)")
	fs.BoolVar(&f.enableMetrics, "enable-metrics", true, "emit KubeRay's control-plane metrics of Ray objects (kuberay_*) on --metrics-addr; Manta's own metrics are always emitted")
	fs.StringVar(&f.logFile, "log-file-path", "", "also write the log to this file, rotated at 500 MB, 10 files kept for 30 days (as KubeRay)")
	fs.StringVar(&f.logFileEnc, "log-file-encoder", "json", "encoder of --log-file-path: json or console")
	fs.StringVar(&f.logStdoutEnc, "log-stdout-encoder", "", "encoder of the log on stderr: json or console (default: --zap-encoder's, json unless --zap-devel)")
	fs.BoolVar(&f.forcedUpgrade, "forced-cluster-upgrade", false, "(deprecated in KubeRay, where it does nothing) accepted with a warning; Manta recreates pods only for a changed pod template")
}

// resolvedOperator is what the KubeRay flags, environment and configuration file settle beside operator.Options.
type resolvedOperator struct {
	gates   features.Gates
	outputs logging.Outputs
	// warnings are logged once the logger is set.
	warnings []string
}

// resolveOperator applies, over the parsed flags in o: KubeRay's environment (under the flags given), then the
// configuration file of --config (which refuses the flags it also sets), and reads the feature gates and log outputs.
func resolveOperator(fs *pflag.FlagSet, o *operator.Options, f *kubeRayFlags, getenv func(string) string, readFile func(string) ([]byte, error)) (resolvedOperator, error) {
	var r resolvedOperator
	gates, err := features.Parse(f.featureGates)
	if err != nil {
		return r, err
	}
	r.gates = gates
	if r.warnings, err = applyKubeRayEnv(fs, o, getenv); err != nil {
		return r, err
	}
	o.NoKubeRayMetrics = !f.enableMetrics
	r.outputs = logging.Outputs{StdoutEncoder: f.logStdoutEnc, File: f.logFile, FileEncoder: f.logFileEnc}
	if f.config != "" {
		data, err := readFile(f.config)
		if err != nil {
			return r, fmt.Errorf("--config: %w", err)
		}
		c, err := operator.ReadKubeRayConfig(data)
		if err != nil {
			return r, fmt.Errorf("--config %s: %w", f.config, err)
		}
		if err := operator.ApplyKubeRayConfig(c, o, fs.Changed, getenv(operator.EnvDeleteRayJobAfterJobFinishes)); err != nil {
			return r, err
		}
		r.outputs = logging.Outputs{StdoutEncoder: c.LogStdoutEncoder, File: c.LogFile, FileEncoder: c.LogFileEncoder}
	}
	for _, e := range []struct{ flag, v string }{{"--log-stdout-encoder", r.outputs.StdoutEncoder}, {"--log-file-encoder", r.outputs.FileEncoder}} {
		if e.v != "" && !slices.Contains(logging.Encoders, e.v) {
			return r, fmt.Errorf("%s %q: must be json or console", e.flag, e.v)
		}
	}
	// Both encoder settings given and different: one would be dropped.
	if z := fs.Lookup("zap-encoder"); z != nil && z.Changed && r.outputs.StdoutEncoder != "" && z.Value.String() != r.outputs.StdoutEncoder {
		return r, fmt.Errorf("--zap-encoder=%s and the stdout encoder %s (--log-stdout-encoder or logStdoutEncoder) disagree: give one", z.Value.String(), r.outputs.StdoutEncoder)
	}
	if o.MetricsAsKubeRay {
		if !fs.Changed("metrics-secure") {
			o.MetricsInsecure = true
		}
		r.warnings = append(r.warnings, "/metrics is served as KubeRay serves it, plain HTTP to anyone who reaches "+o.MetricsAddr+
			" (--metrics-as-kuberay, the default under KubeRay's command name /manager); --metrics-secure serves it over HTTPS to authorised callers only")
	}
	if f.forcedUpgrade {
		r.warnings = append(r.warnings, "--forced-cluster-upgrade is deprecated in KubeRay, where it does nothing; in Manta too it changes nothing: "+
			"a Ray pod is recreated only when its group's pod template changes (spec.upgradeStrategy)")
	}
	return r, nil
}

// kubeRayCommand is the name KubeRay's chart and manifests run the operator by (values.yaml operatorCommand, the
// image's /manager): invoked under it, the manta binary is `manta operator`.
const kubeRayCommand = "manager"

// commandArgs is what the root command parses, given the program's name and arguments. Under KubeRay's command name
// the arguments are the operator's. The operator's arguments may also be written as Go's flag package takes them
// (KubeRay parses with it), with one dash: -name or -name=value becomes --name[=value]. One-letter flags (-h) and
// negative numbers are left alone, and nothing after "--".
func commandArgs(argv0 string, args []string) []string {
	if filepath.Base(argv0) == kubeRayCommand {
		// KubeRay's chart probes :8080/metrics over plain HTTP with no credentials; Manta's HTTPS metrics would fail
		// those probes and restart the pod. So under KubeRay's name metrics are served as KubeRay serves them, unless
		// the arguments choose.
		lead := []string{"operator"}
		if !slices.ContainsFunc(args, choosesMetrics) {
			lead = append(lead, "--metrics-as-kuberay")
		}
		args = append(lead, args...)
	}
	if len(args) == 0 || args[0] != "operator" {
		return args
	}
	out := []string{args[0]}
	for i, a := range args[1:] {
		if a == "--" {
			return append(out, args[1+i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && (a[1] < '0' || a[1] > '9') {
			a = "-" + a
		}
		out = append(out, a)
	}
	return out
}

// choosesMetrics says whether an argument sets how metrics are served (--metrics-secure, --metrics-as-kuberay, with
// one dash or two).
func choosesMetrics(arg string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return strings.HasPrefix(arg, "-") && (name == "metrics-secure" || name == "metrics-as-kuberay")
}
