package clusterbuild

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// falseFlags keep an explicit --flag=false: Ray turns them on by default.
var falseFlags = map[string]bool{"log-color": true, "include-dashboard": true, "include-log-monitor": true}

// StartParams holds what goes into `ray start` for one group.
type StartParams struct {
	Head bool
	// Params are the group's rayStartParams.
	Params map[string]string
	// Resources is the Ray container's resources; Overrides is the group's `resources` map; Labels its Ray labels.
	Resources corev1.ResourceRequirements
	Overrides map[string]string
	Labels    map[string]string
	// HeadAddress is <fqdn>:<port>, used by workers.
	HeadAddress string
	// NoMonitor is set on the head when the autoscaler sidecar runs.
	NoMonitor bool
}

// RayStartCommand renders `ray start ...` with KubeRay's defaults: flags sorted, "true" as a bare flag, "false"
// dropped (except flags Ray defaults to on), block forced, resources derived from the container's limits.
func RayStartCommand(p StartParams) string {
	params := map[string]string{}
	for k, v := range p.Params {
		params[k] = v
	}
	setDefault := func(k, v string) {
		if _, ok := params[k]; !ok {
			params[k] = v
		}
	}
	if p.Head {
		setDefault("dashboard-host", "0.0.0.0")
		if p.NoMonitor {
			setDefault("no-monitor", "true")
		}
	} else {
		setDefault("address", p.HeadAddress)
	}
	setDefault("metrics-export-port", strconv.Itoa(DefaultMetricsPort))
	setDefault("dashboard-agent-listen-port", strconv.Itoa(DefaultDashboardAgentPort))
	params["block"] = "true"
	addResourceParams(params, p.Resources, p.Overrides)
	if len(p.Labels) > 0 {
		keys := sortedKeys(p.Labels)
		kv := make([]string, 0, len(keys))
		for _, k := range keys {
			kv = append(kv, k+"="+p.Labels[k])
		}
		params["labels"] = strings.Join(kv, ",")
	}

	var b strings.Builder
	b.WriteString("ray start")
	if p.Head {
		b.WriteString(" --head")
	}
	for _, k := range sortedKeys(params) {
		v := params[k]
		switch {
		case v == "true":
			fmt.Fprintf(&b, " --%s", k)
		case v == "false" && !falseFlags[k]:
		default:
			fmt.Fprintf(&b, " --%s=%s", k, v)
		}
	}
	return b.String()
}

// addResourceParams turns resources into flags the way KubeRay does. The group's `resources` map comes first, each
// value a Kubernetes quantity converted to what Ray expects (cpu and GPUs as whole numbers rounded up, memory in bytes,
// anything else as a float in the --resources JSON). Then what rayStartParams and the map left unsaid is taken from the
// Ray container: num-cpus from the CPU limit (else request), memory from the memory limit, num-gpus from the first GPU
// limit, and the first well-known accelerator limit (Neuron cores, TPUs) added to the --resources JSON unless that
// JSON already names an accelerator.
func addResourceParams(params map[string]string, res corev1.ResourceRequirements, overrides map[string]string) {
	custom := map[string]float64{}
	for _, k := range sortedKeys(overrides) {
		q, err := resource.ParseQuantity(overrides[k])
		if err != nil {
			continue // refused by validation.ClusterSpec before a pod is built
		}
		switch n := strings.ToLower(k); {
		case n == string(corev1.ResourceCPU):
			params["num-cpus"] = strconv.FormatInt(q.Value(), 10)
		case n == string(corev1.ResourceMemory):
			params["memory"] = strconv.FormatInt(q.Value(), 10)
		case IsGPUResource(n):
			params["num-gpus"] = strconv.FormatInt(q.Value(), 10)
		default:
			custom[k] = q.AsApproximateFloat64()
		}
	}
	if len(custom) > 0 {
		params["resources"] = resourcesJSON(custom)
	}

	if _, ok := params["num-cpus"]; !ok {
		if q := res.Limits[corev1.ResourceCPU]; !q.IsZero() {
			params["num-cpus"] = strconv.FormatInt(q.Value(), 10)
		} else if q := res.Requests[corev1.ResourceCPU]; !q.IsZero() {
			params["num-cpus"] = strconv.FormatInt(q.Value(), 10)
		}
	}
	if _, ok := params["memory"]; !ok {
		if q := res.Limits[corev1.ResourceMemory]; !q.IsZero() {
			params["memory"] = strconv.FormatInt(q.Value(), 10)
		}
	}
	if _, ok := params["num-gpus"]; !ok {
		for _, name := range sortedKeys(res.Limits) {
			if q := res.Limits[name]; IsGPUResource(string(name)) && !q.IsZero() {
				params["num-gpus"] = strconv.FormatInt(q.Value(), 10)
				break
			}
		}
	}
	addAcceleratorResource(params, res.Limits)
}

// acceleratorRayResources maps the accelerators Ray knows by another name to that name.
var acceleratorRayResources = map[corev1.ResourceName]string{
	"aws.amazon.com/neuroncore": "neuron_cores",
	"google.com/tpu":            "TPU",
}

// addAcceleratorResource adds the first accelerator limit (in name order) to the --resources JSON, keeping what the
// JSON already says; nothing is added when it already names an accelerator or cannot be read.
func addAcceleratorResource(params map[string]string, limits corev1.ResourceList) {
	existing := map[string]float64{}
	if s, ok := params["resources"]; ok {
		if err := json.Unmarshal([]byte(strings.Trim(s, "'\"` ")), &existing); err != nil {
			return
		}
	}
	for _, ray := range acceleratorRayResources {
		if _, ok := existing[ray]; ok {
			return
		}
	}
	for _, name := range sortedKeys(limits) {
		ray, ok := acceleratorRayResources[name]
		if q := limits[name]; ok && !q.IsZero() {
			existing[ray] = q.AsApproximateFloat64()
			params["resources"] = resourcesJSON(existing)
			return
		}
	}
}

// resourcesJSON renders Ray's --resources value: JSON (keys sorted by encoding/json) in single quotes for the shell.
func resourcesJSON(m map[string]float64) string {
	js, _ := json.Marshal(m)
	return "'" + string(js) + "'"
}

// IsGPUResource says whether a resource name counts as a GPU: it ends in "gpu" or is a MIG slice.
func IsGPUResource(name string) bool {
	n := strings.ToLower(name)
	return strings.HasSuffix(n, "gpu") || strings.HasPrefix(n, "nvidia.com/mig-")
}

// ContainerCommand wraps the ray start command the way KubeRay does: bash -c with a raised open-files limit, after
// the user's own command when there is one.
func ContainerCommand(c *corev1.Container, rayStart string) (command, args []string) {
	user := strings.Join(append(slices.Clone(c.Command), c.Args...), " ")
	script := "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; " + rayStart
	if user != "" {
		script = user + " && " + script
	}
	return ShellCommand(), []string{script}
}

// ShellCommand runs the generated scripts: a plain (not login) bash, so the PATH of a custom image is the one its
// author set, not whatever its profile scripts reset it to.
func ShellCommand() []string { return []string{"/bin/bash", "-c", "--"} }

// keepsUserCommand reports whether the user's command must be left as it is.
func keepsUserCommand(c *corev1.Container, annotations map[string]string) bool {
	if annotations[AnnotationOverwriteContainerCmd] == "true" {
		return true
	}
	all := strings.Join(append(slices.Clone(c.Command), c.Args...), " ")
	return strings.Contains(all, "ray start")
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
