package operator

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/manta-dev/manta/internal/clusterbuild"
)

// A Configuration with every field of KubeRay v1.7.0's type.
const fullConfig = `apiVersion: config.ray.io/v1alpha1
kind: Configuration
qps: 42.5
burst: 84
enableLeaderElection: false
leaderElectionNamespace: ops
logStdoutEncoder: console
logFile: /var/log/kuberay/op.log
logFileEncoder: json
probeAddr: ":9082"
metricsAddr: ":9080"
batchScheduler: volcano
enableBatchScheduler: false
watchNamespace: "a, b"
headSidecarContainers:
- name: head-agent
  image: agent:1
workerSidecarContainers:
- name: shipper
  image: shipper:2
defaultContainerEnvs:
- name: TEAM
  value: ml
defaultPodAnnotations:
  cost-center: "42"
defaultPodLabels:
  team: ml
reconcileConcurrency: 4
useKubernetesProxy: true
deleteRayJobAfterJobFinishes: true
enableMetrics: false
`

func TestReadKubeRayConfig(t *testing.T) {
	c, err := ReadKubeRayConfig([]byte(fullConfig))
	if err != nil {
		t.Fatal(err)
	}
	o := Options{QPS: 100, Burst: 200, LeaderElection: true, ReconcileConcurrency: 8, MetricsAddr: ":8080", HealthProbeAddr: ":8082"}
	if err := ApplyKubeRayConfig(c, &o, func(string) bool { return false }, ""); err != nil {
		t.Fatal(err)
	}
	want := Options{QPS: 42.5, Burst: 84, LeaderElection: false, LeaderElectionNS: "ops", HealthProbeAddr: ":9082", MetricsAddr: ":9080",
		BatchScheduler: "volcano", WatchNamespaces: []string{"a", "b"}, ReconcileConcurrency: 4, UseKubernetesProxy: true,
		DeleteRayJobAfterJobFinishes: true, NoKubeRayMetrics: true,
		PodDefaults: &clusterbuild.PodDefaults{
			HeadSidecars:   []corev1.Container{{Name: "head-agent", Image: "agent:1"}},
			WorkerSidecars: []corev1.Container{{Name: "shipper", Image: "shipper:2"}},
			Env:            []corev1.EnvVar{{Name: "TEAM", Value: "ml"}},
			Annotations:    map[string]string{"cost-center": "42"},
			Labels:         map[string]string{"team": "ml"},
		}}
	if d := cmp.Diff(want, o, cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "Optimizations" || p.String() == "RayClients" }, cmp.Ignore())); d != "" {
		t.Errorf("options (-want +got):\n%s", d)
	}
	if c.LogStdoutEncoder != "console" || c.LogFile != "/var/log/kuberay/op.log" || c.LogFileEncoder != "json" {
		t.Errorf("log fields %q %q %q", c.LogStdoutEncoder, c.LogFile, c.LogFileEncoder)
	}

	// A file that sets little leaves Manta's defaults.
	c, err = ReadKubeRayConfig([]byte("apiVersion: config.ray.io/v1alpha1\nkind: Configuration\n"))
	if err != nil {
		t.Fatal(err)
	}
	o = Options{QPS: 100, Burst: 200, LeaderElection: true, ReconcileConcurrency: 8, MetricsAddr: ":8080", HealthProbeAddr: ":8082"}
	if err := ApplyKubeRayConfig(c, &o, func(string) bool { return false }, ""); err != nil {
		t.Fatal(err)
	}
	if o.QPS != 100 || o.Burst != 200 || !o.LeaderElection || o.ReconcileConcurrency != 8 || o.MetricsAddr != ":8080" || o.NoKubeRayMetrics || o.PodDefaults != nil {
		t.Errorf("an empty file changed defaults: %+v", o)
	}
}

// The file is read strictly: each mistake is an error naming the field.
func TestReadKubeRayConfigRefuses(t *testing.T) {
	head := "apiVersion: config.ray.io/v1alpha1\nkind: Configuration\n"
	for _, c := range []struct{ file, want string }{
		{head + "featureGates: {RayCronJob: true}\n", `unknown field "featureGates"`},
		{head + "qps: fast\n", "qps"},
		{head + "enableMetrics: \"yes\"\n", "enableMetrics"},
		{"apiVersion: config.ray.io/v1\nkind: Configuration\n", `apiVersion "config.ray.io/v1": must be config.ray.io/v1alpha1`},
		{"apiVersion: config.ray.io/v1alpha1\nkind: Config\n", `kind "Config": must be Configuration`},
		{"kind: Configuration\n", `apiVersion "": must be config.ray.io/v1alpha1`},
		{head + "logStdoutEncoder: text\n", `logStdoutEncoder: Unsupported value: "text"`},
		{head + "logFileEncoder: xml\n", `logFileEncoder: Unsupported value: "xml"`},
		{head + "qps: 0\n", "qps: Invalid value: 0: must be greater than 0"},
		{head + "reconcileConcurrency: -1\n", "reconcileConcurrency: Invalid value: -1"},
		{head + "headSidecarContainers: [{image: a}]\n", "headSidecarContainers[0].name: Required value"},
		{head + "workerSidecarContainers: [{name: a, image: b}, {name: a, image: c}]\n", `workerSidecarContainers[1].name: Duplicate value: "a"`},
		{head + "workerSidecarContainers: [{name: a}]\n", "workerSidecarContainers[0].image: Required value"},
		{head + "headSidecarContainers: [{name: a, image: b, imagePullPolicy: Always, bogus: 1}]\n", `unknown field "bogus"`},
		{head + "defaultContainerEnvs: [{value: x}]\n", "defaultContainerEnvs[0].name: Required value"},
		{head + "defaultPodLabels: {\"bad key!\": x}\n", "defaultPodLabels: Invalid value: \"bad key!\""},
		{head + "defaultPodAnnotations: {\"-bad\": x}\n", "defaultPodAnnotations: Invalid value: \"-bad\""},
	} {
		if _, err := ReadKubeRayConfig([]byte(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.file[len(head)-1:], err, c.want)
		}
	}
}
