package apiserver

import (
	"encoding/json"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and keys shared with KubeRay's API server, so objects created by either are visible to both.
const (
	labelConfigType       = "ray.io/config-type"
	labelComputeTemplate  = "ray.io/compute-template"
	configTypeTemplate    = "compute-template"
	labelClusterName      = "ray.io/cluster-name"
	labelUser             = "ray.io/user"
	labelVersion          = "ray.io/version"
	labelEnvironment      = "ray.io/environment"
	labelAppName          = "app.kubernetes.io/name"
	labelManagedBy        = "app.kubernetes.io/managed-by"
	appNameKubeRay        = "kuberay"
	managedByAPIServer    = "kuberay-apiserver"
	annotationTemplate    = "ray.io/compute-template"
	annotationImage       = "ray.io/compute-image"
	annotationEnableServe = "ray.io/enable-serve-service"

	defaultGPUResource = "nvidia.com/gpu"
	defaultMemoryUnit  = "Gi"
)

func (t *ComputeTemplate) gpuResource() string {
	if t.GPUAccelerator != "" {
		return t.GPUAccelerator
	}
	return defaultGPUResource
}

func (t *ComputeTemplate) memoryUnit() string {
	if t.MemoryUnit != "" {
		return t.MemoryUnit
	}
	return defaultMemoryUnit
}

// resources is the template as container requests (= limits).
func (t *ComputeTemplate) resources() corev1.ResourceList {
	rl := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(t.CPU), resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse(strconv.FormatUint(uint64(t.Memory), 10) + t.memoryUnit()),
	}
	if t.GPU > 0 {
		rl[corev1.ResourceName(t.gpuResource())] = *resource.NewQuantity(int64(t.GPU), resource.DecimalSI)
	}
	for k, n := range t.ExtendedResources {
		rl[corev1.ResourceName(k)] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	}
	return rl
}

func (t *ComputeTemplate) k8sTolerations() []corev1.Toleration {
	var out []corev1.Toleration
	for _, tol := range t.Tolerations {
		out = append(out, corev1.Toleration{
			Key: tol.Key, Operator: corev1.TolerationOperator(tol.Operator), Value: tol.Value, Effect: corev1.TaintEffect(tol.Effect),
		})
	}
	return out
}

// templateToConfigMap stores a template the way KubeRay's API server does.
func templateToConfigMap(t *ComputeTemplate) *corev1.ConfigMap {
	ext, _ := json.Marshal(t.ExtendedResources)
	tols, _ := json.Marshal(t.Tolerations)
	if t.ExtendedResources == nil {
		ext = []byte("{}")
	}
	if t.Tolerations == nil {
		tols = []byte("[]")
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      t.Name,
			Namespace: t.Namespace,
			Labels: map[string]string{
				labelConfigType:      configTypeTemplate,
				labelComputeTemplate: t.Name,
			},
		},
		Data: map[string]string{
			"name":               t.Name,
			"namespace":          t.Namespace,
			"cpu":                strconv.FormatUint(uint64(t.CPU), 10),
			"memory":             strconv.FormatUint(uint64(t.Memory), 10),
			"memory_unit":        t.memoryUnit(),
			"gpu":                strconv.FormatUint(uint64(t.GPU), 10),
			"gpu_accelerator":    t.GPUAccelerator,
			"extended_resources": string(ext),
			"tolerations":        string(tols),
		},
	}
}

// templateFromConfigMap reads a stored template. It is lenient: a ConfigMap edited by hand still reads, with
// unreadable values left at zero.
func templateFromConfigMap(cm *corev1.ConfigMap) ComputeTemplate {
	d := cm.Data
	u32 := func(k string) uint32 {
		n, _ := strconv.ParseUint(d[k], 10, 32)
		return uint32(n)
	}
	t := ComputeTemplate{
		Name:           cm.Name,
		Namespace:      cm.Namespace,
		CPU:            u32("cpu"),
		Memory:         u32("memory"),
		GPU:            u32("gpu"),
		GPUAccelerator: d["gpu_accelerator"],
		MemoryUnit:     d["memory_unit"],
	}
	if s := d["extended_resources"]; s != "" {
		var m map[string]uint32
		if json.Unmarshal([]byte(s), &m) == nil && len(m) > 0 {
			t.ExtendedResources = m
		}
	}
	if s := d["tolerations"]; s != "" {
		var ts []PodToleration
		if json.Unmarshal([]byte(s), &ts) == nil && len(ts) > 0 {
			t.Tolerations = ts
		}
	}
	return t
}

func isComputeTemplate(cm *corev1.ConfigMap) bool {
	return cm.Labels[labelConfigType] == configTypeTemplate
}
