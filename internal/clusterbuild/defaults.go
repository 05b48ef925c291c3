package clusterbuild

import (
	corev1 "k8s.io/api/core/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// PodDefaults are what the operator's configuration adds to every Ray head and worker pod it builds: KubeRay's
// Configuration file fields headSidecarContainers, workerSidecarContainers, defaultContainerEnvs,
// defaultPodAnnotations and defaultPodLabels, with KubeRay v1.7's semantics (raycluster_controller.go buildHeadPod
// and buildWorkerPod, common.BuildPod):
//   - the sidecars are appended after the containers the pod already has;
//   - a default env var is added to the Ray container only when it has none of that name, before the operator's
//     own env (so the user's value wins, and a default wins over the operator's);
//   - a default label or annotation is added only when the pod has none of that key (the user's template and the
//     operator's own labels win).
//
// They are not part of the pod template hash (Hashes reads only the RayCluster spec), so changing them, or
// restarting the operator with other ones, recreates no pod: they reach the pods created afterwards, as in KubeRay.
type PodDefaults struct {
	HeadSidecars   []corev1.Container
	WorkerSidecars []corev1.Container
	Env            []corev1.EnvVar
	Annotations    map[string]string
	Labels         map[string]string
}

// meta adds the default labels and annotations the pod lacks, and the default env the Ray container lacks.
func (d *PodDefaults) meta(pod *corev1.Pod) {
	if d == nil {
		return
	}
	for k, v := range d.Labels {
		if _, ok := pod.Labels[k]; !ok {
			pod.Labels[k] = v
		}
	}
	for k, v := range d.Annotations {
		if _, ok := pod.Annotations[k]; !ok {
			pod.Annotations[k] = v
		}
	}
	ray := &pod.Spec.Containers[RayContainerIndex]
	for _, e := range d.Env {
		if !hasEnvVar(ray, e.Name) {
			ray.Env = append(ray.Env, *e.DeepCopy())
		}
	}
}

// sidecars appends the sidecars of the pod's node type.
func (d *PodDefaults) sidecars(pod *corev1.Pod, nodeType string) {
	if d == nil {
		return
	}
	s := d.WorkerSidecars
	if nodeType == rayv1.NodeTypeHead {
		s = d.HeadSidecars
	}
	for i := range s {
		pod.Spec.Containers = append(pod.Spec.Containers, *s[i].DeepCopy())
	}
}
