package operator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStripPod(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "head", Labels: map[string]string{"ray.io/node-type": "head"},
			Annotations:   map[string]string{lastApplied: "{}", "ray.io/pod-template-hash": "abc"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "manta"}}},
		Spec: corev1.PodSpec{
			NodeName: "n1", RestartPolicy: corev1.RestartPolicyAlways,
			Volumes: []corev1.Volume{{Name: "logs"}},
			Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray:2.52.0",
				Command: []string{"/bin/bash"}, Args: []string{"-c", "ray start"}, Env: []corev1.EnvVar{{Name: "RAY_X"}},
				ReadinessProbe: &corev1.Probe{}, Ports: []corev1.ContainerPort{{ContainerPort: 6379}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", HostIP: "192.168.0.1",
			ContainerStatuses: []corev1.ContainerStatus{{Name: "ray-head", Ready: true, RestartCount: 2, ImageID: "sha256:1", ContainerID: "containerd://1",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	p.Spec.Tolerations = []corev1.Toleration{{Key: "k"}}
	out, err := stripPod(p)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	c := got.Spec.Containers[0]
	switch {
	case got.ManagedFields != nil, got.Annotations[lastApplied] != "", got.Spec.Volumes != nil,
		c.Command != nil, c.Args != nil, c.Env != nil, c.ReadinessProbe != nil, c.Resources.Requests != nil, c.Ports != nil,
		got.Spec.Tolerations != nil, got.Status.HostIP != "", got.Status.ContainerStatuses[0].ImageID != "", got.Status.ContainerStatuses[0].ContainerID != "":
		t.Errorf("unread fields kept: %+v", got)
	case got.Annotations["ray.io/pod-template-hash"] != "abc", got.Labels["ray.io/node-type"] != "head",
		got.Spec.NodeName != "n1", got.Spec.RestartPolicy != corev1.RestartPolicyAlways,
		c.Name != "ray-head", c.Image == "", got.Status.PodIP != "10.0.0.1",
		got.Status.ContainerStatuses[0].State.Running == nil, !got.Status.ContainerStatuses[0].Ready, got.Status.ContainerStatuses[0].RestartCount != 2:
		t.Errorf("read fields dropped: %+v", got)
	}
}
