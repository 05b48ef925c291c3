package testutil

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// RayClusterWrapper builds RayClusters for tests: MakeRayCluster("ns", "name").Workers("small", 2).Obj().
type RayClusterWrapper struct{ rayv1.RayCluster }

// MakeRayCluster is a RayCluster with a one-container head (1 CPU, 2Gi) running rayproject/ray:2.52.0.
func MakeRayCluster(ns, name string) *RayClusterWrapper {
	return &RayClusterWrapper{rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: rayv1.RayClusterSpec{
			RayVersion: "2.52.0",
			HeadGroupSpec: rayv1.HeadGroupSpec{
				RayStartParams: map[string]string{},
				Template:       RayPodTemplate("ray-head", "1", "2Gi"),
			},
		},
	}}
}

// RayPodTemplate is a pod template with one Ray container of the given CPU and memory (requests = limits).
func RayPodTemplate(container, cpu, mem string) corev1.PodTemplateSpec {
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: container, Image: "rayproject/ray:2.52.0",
		Resources: corev1.ResourceRequirements{Limits: rl, Requests: rl.DeepCopy()},
	}}}}
}

// Workers adds a worker group of replicas pods (min 0, max 10).
func (w *RayClusterWrapper) Workers(group string, replicas int32) *RayClusterWrapper {
	w.Spec.WorkerGroupSpecs = append(w.Spec.WorkerGroupSpecs, rayv1.WorkerGroupSpec{
		GroupName: group, Replicas: ptr.To(replicas), MinReplicas: ptr.To[int32](0), MaxReplicas: ptr.To[int32](10),
		NumOfHosts: 1, RayStartParams: map[string]string{}, Template: RayPodTemplate("ray-worker", "1", "1Gi"),
	})
	return w
}

// Recreate sets upgradeStrategy Recreate.
func (w *RayClusterWrapper) Recreate() *RayClusterWrapper {
	w.Spec.UpgradeStrategy = &rayv1.RayClusterUpgradeStrategy{Type: ptr.To(rayv1.RayClusterRecreate)}
	return w
}

// Autoscaling turns on the in-tree autoscaler.
func (w *RayClusterWrapper) Autoscaling() *RayClusterWrapper {
	w.Spec.EnableInTreeAutoscaling = ptr.To(true)
	return w
}

// Label sets a label on the RayCluster.
func (w *RayClusterWrapper) Label(k, v string) *RayClusterWrapper {
	metav1.SetMetaDataLabel(&w.ObjectMeta, k, v)
	return w
}

// Obj returns the RayCluster.
func (w *RayClusterWrapper) Obj() *rayv1.RayCluster { return w.RayCluster.DeepCopy() }
