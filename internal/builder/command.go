package builder

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

// addResourceParams fills num-cpus, memory, num-gpus and resources from the container's resources (limits first)
// unless rayStartParams already say them; the group's `resources` map overrides both.
func addResourceParams(params map[string]string, res corev1.ResourceRequirements, overrides map[string]string) {
	get := func(name corev1.ResourceName) (resource.Quantity, bool) {
		if q, ok := res.Limits[name]; ok && !q.IsZero() {
			return q, true
		}
		if name == corev1.ResourceCPU {
			if q, ok := res.Requests[name]; ok && !q.IsZero() {
				return q, true
			}
		}
		return resource.Quantity{}, false
	}
	if _, ok := params["num-cpus"]; !ok {
		if q, ok := get(corev1.ResourceCPU); ok {
			params["num-cpus"] = strconv.FormatInt(q.Value(), 10)
		}
	}
	if _, ok := params["memory"]; !ok {
		if q, ok := get(corev1.ResourceMemory); ok {
			params["memory"] = strconv.FormatInt(q.Value(), 10)
		}
	}
	if _, ok := params["num-gpus"]; !ok {
		for _, name := range sortedKeys(res.Limits) {
			if IsGPUResource(string(name)) {
				if q := res.Limits[name]; !q.IsZero() {
					params["num-gpus"] = strconv.FormatInt(q.Value(), 10)
					break
				}
			}
		}
	}
	custom := map[string]float64{}
	if _, ok := params["resources"]; !ok {
		for _, m := range []struct {
			k8s corev1.ResourceName
			ray string
		}{{"aws.amazon.com/neuroncore", "neuron_cores"}, {"google.com/tpu", "TPU"}} {
			if q, ok := res.Limits[m.k8s]; ok && !q.IsZero() {
				custom[m.ray] = float64(q.Value())
				break
			}
		}
	}
	for _, k := range sortedKeys(overrides) {
		v := overrides[k]
		switch {
		case strings.EqualFold(k, "cpu"):
			params["num-cpus"] = v
		case strings.EqualFold(k, "memory"):
			params["memory"] = v
		case IsGPUResource(k):
			params["num-gpus"] = v
		default:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				if q, qerr := resource.ParseQuantity(v); qerr == nil {
					f = q.AsApproximateFloat64()
				}
			}
			custom[k] = f
		}
	}
	if len(custom) > 0 {
		js, _ := json.Marshal(custom) // map keys are sorted by encoding/json
		params["resources"] = "'" + string(js) + "'"
	}
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
	script := "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; "
	if user != "" {
		script += user + " && "
	}
	return []string{"/bin/bash", "-c", "--"}, []string{script + rayStart}
}

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
