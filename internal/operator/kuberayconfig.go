package operator

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	fieldpath "k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/manta-dev/manta/internal/clusterbuild"
)

// KubeRay's operator configuration file (--config): config.ray.io/v1alpha1 Configuration, as KubeRay v1.7.0
// defines it (ray-operator/apis/config/v1alpha1).
const (
	KubeRayConfigAPIVersion = "config.ray.io/v1alpha1"
	KubeRayConfigKind       = "Configuration"
)

// KubeRayConfig is KubeRay v1.7.0's Configuration, field for field. Pointers mark the fields whose absence means
// "Manta's default" where a zero value would mean something else.
type KubeRayConfig struct {
	metav1.TypeMeta `json:",inline"`

	QPS                     *float64 `json:"qps,omitempty"`
	Burst                   *int     `json:"burst,omitempty"`
	EnableLeaderElection    *bool    `json:"enableLeaderElection,omitempty"`
	LeaderElectionNamespace string   `json:"leaderElectionNamespace,omitempty"`
	LogStdoutEncoder        string   `json:"logStdoutEncoder,omitempty"`
	LogFile                 string   `json:"logFile,omitempty"`
	LogFileEncoder          string   `json:"logFileEncoder,omitempty"`
	ProbeAddr               string   `json:"probeAddr,omitempty"`
	MetricsAddr             string   `json:"metricsAddr,omitempty"`
	BatchScheduler          string   `json:"batchScheduler,omitempty"`
	EnableBatchScheduler    bool     `json:"enableBatchScheduler,omitempty"`
	// WatchNamespace is comma-separated, as KubeRay's --watch-namespace.
	WatchNamespace               string             `json:"watchNamespace,omitempty"`
	HeadSidecarContainers        []corev1.Container `json:"headSidecarContainers,omitempty"`
	WorkerSidecarContainers      []corev1.Container `json:"workerSidecarContainers,omitempty"`
	DefaultContainerEnvs         []corev1.EnvVar    `json:"defaultContainerEnvs,omitempty"`
	DefaultPodAnnotations        map[string]string  `json:"defaultPodAnnotations,omitempty"`
	DefaultPodLabels             map[string]string  `json:"defaultPodLabels,omitempty"`
	ReconcileConcurrency         int                `json:"reconcileConcurrency,omitempty"`
	UseKubernetesProxy           bool               `json:"useKubernetesProxy,omitempty"`
	DeleteRayJobAfterJobFinishes bool               `json:"deleteRayJobAfterJobFinishes,omitempty"`
	// EnableMetrics: absent keeps Manta's default (on), see --enable-metrics.
	EnableMetrics *bool `json:"enableMetrics,omitempty"`
}

// ReadKubeRayConfig decodes a Configuration strictly: a field KubeRay v1.7.0 does not define, a field of the wrong
// type, another apiVersion or kind, or a sidecar, env var, label or annotation Kubernetes would refuse on a pod, is an
// error naming it.
func ReadKubeRayConfig(data []byte) (*KubeRayConfig, error) {
	var c KubeRayConfig
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, err
	}
	if c.APIVersion != KubeRayConfigAPIVersion {
		return nil, fmt.Errorf("apiVersion %q: must be %s", c.APIVersion, KubeRayConfigAPIVersion)
	}
	if c.Kind != KubeRayConfigKind {
		return nil, fmt.Errorf("kind %q: must be %s", c.Kind, KubeRayConfigKind)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *KubeRayConfig) validate() error {
	var errs fieldpath.ErrorList
	if c.QPS != nil && *c.QPS <= 0 {
		errs = append(errs, fieldpath.Invalid(fieldpath.NewPath("qps"), *c.QPS, "must be greater than 0"))
	}
	if c.Burst != nil && *c.Burst < 0 {
		errs = append(errs, fieldpath.Invalid(fieldpath.NewPath("burst"), *c.Burst, "must not be negative"))
	}
	if c.ReconcileConcurrency < 0 {
		errs = append(errs, fieldpath.Invalid(fieldpath.NewPath("reconcileConcurrency"), c.ReconcileConcurrency, "must not be negative"))
	}
	for _, e := range []struct{ name, v string }{{"logStdoutEncoder", c.LogStdoutEncoder}, {"logFileEncoder", c.LogFileEncoder}} {
		if e.v != "" && e.v != "json" && e.v != "console" {
			errs = append(errs, fieldpath.NotSupported(fieldpath.NewPath(e.name), e.v, []string{"json", "console"}))
		}
	}
	for _, s := range []struct {
		name string
		cs   []corev1.Container
	}{{"headSidecarContainers", c.HeadSidecarContainers}, {"workerSidecarContainers", c.WorkerSidecarContainers}} {
		seen := map[string]bool{}
		for i, ct := range s.cs {
			p := fieldpath.NewPath(s.name).Index(i)
			switch {
			case ct.Name == "":
				errs = append(errs, fieldpath.Required(p.Child("name"), "a sidecar needs a name"))
			case seen[ct.Name]:
				errs = append(errs, fieldpath.Duplicate(p.Child("name"), ct.Name))
			}
			seen[ct.Name] = true
			if ct.Image == "" {
				errs = append(errs, fieldpath.Required(p.Child("image"), "a sidecar needs an image"))
			}
		}
	}
	for i, e := range c.DefaultContainerEnvs {
		if e.Name == "" {
			errs = append(errs, fieldpath.Required(fieldpath.NewPath("defaultContainerEnvs").Index(i).Child("name"), ""))
		}
	}
	errs = append(errs, metav1validation.ValidateLabels(c.DefaultPodLabels, fieldpath.NewPath("defaultPodLabels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(c.DefaultPodAnnotations, fieldpath.NewPath("defaultPodAnnotations"))...)
	return errs.ToAggregate()
}

// PodDefaults are the file's sidecars, env, labels and annotations (nil when it sets none).
func (c *KubeRayConfig) PodDefaults() *clusterbuild.PodDefaults {
	if len(c.HeadSidecarContainers)+len(c.WorkerSidecarContainers)+len(c.DefaultContainerEnvs)+len(c.DefaultPodAnnotations)+len(c.DefaultPodLabels) == 0 {
		return nil
	}
	return &clusterbuild.PodDefaults{HeadSidecars: c.HeadSidecarContainers, WorkerSidecars: c.WorkerSidecarContainers,
		Env: c.DefaultContainerEnvs, Annotations: c.DefaultPodAnnotations, Labels: c.DefaultPodLabels}
}

// ConfigFlags are the flags of KubeRay's operator that the Configuration file also sets. KubeRay ignores them when
// --config is given; Manta refuses them instead (ApplyKubeRayConfig), so no value given is silently dropped.
var ConfigFlags = []string{"qps", "burst", "enable-leader-election", "leader-election-namespace", "log-stdout-encoder",
	"log-file-path", "log-file-encoder", "health-probe-bind-address", "metrics-addr", "batch-scheduler",
	"enable-batch-scheduler", "watch-namespace", "reconcile-concurrency", "use-kubernetes-proxy", "enable-metrics"}

// ApplyKubeRayConfig sets o from c. A field c leaves out keeps o's value (Manta's default). changed says whether a
// flag was given on the command line: one of ConfigFlags given with the file is an error naming it.
// deleteAfterFinishesEnv is KubeRay's DELETE_RAYJOB_CR_AFTER_JOB_FINISHES, which KubeRay does not read with --config:
// set to true while the file does not say so, it is an error rather than a switch Manta would drop.
func ApplyKubeRayConfig(c *KubeRayConfig, o *Options, changed func(flag string) bool, deleteAfterFinishesEnv string) error {
	var given []string
	for _, f := range ConfigFlags {
		if changed(f) {
			given = append(given, "--"+f)
		}
	}
	if len(given) > 0 {
		return fmt.Errorf("--config is given, so %s must be set in the configuration file, not as flags (KubeRay ignores these flags with --config)",
			strings.Join(given, ", "))
	}
	if strings.EqualFold(deleteAfterFinishesEnv, "true") && !c.DeleteRayJobAfterJobFinishes {
		return errors.New("environment variable " + EnvDeleteRayJobAfterJobFinishes + "=true is not read with --config (as in KubeRay): set deleteRayJobAfterJobFinishes: true in the configuration file, or remove the variable")
	}
	if c.QPS != nil {
		o.QPS = float32(*c.QPS)
	}
	if c.Burst != nil {
		o.Burst = *c.Burst
	}
	if c.EnableLeaderElection != nil {
		o.LeaderElection = *c.EnableLeaderElection
	}
	if c.LeaderElectionNamespace != "" {
		o.LeaderElectionNS = c.LeaderElectionNamespace
	}
	if c.ProbeAddr != "" {
		o.HealthProbeAddr = c.ProbeAddr
	}
	if c.MetricsAddr != "" {
		o.MetricsAddr = c.MetricsAddr
	}
	o.BatchScheduler, o.EnableBatchScheduler = c.BatchScheduler, c.EnableBatchScheduler
	o.WatchNamespaces = SplitNamespaces(c.WatchNamespace)
	if c.ReconcileConcurrency > 0 {
		o.ReconcileConcurrency = c.ReconcileConcurrency
	}
	o.UseKubernetesProxy = c.UseKubernetesProxy
	o.DeleteRayJobAfterJobFinishes = c.DeleteRayJobAfterJobFinishes
	if c.EnableMetrics != nil {
		o.NoKubeRayMetrics = !*c.EnableMetrics
	}
	o.PodDefaults = c.PodDefaults()
	return nil
}

// SplitNamespaces reads KubeRay's comma-separated namespace list (empty: all namespaces).
func SplitNamespaces(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}
