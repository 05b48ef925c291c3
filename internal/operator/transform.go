package operator

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// lastApplied is kubectl apply's copy of the whole object, which no controller reads.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// stripUnread is the informer caches' transform for every type: managedFields and kubectl's last-applied copy are
// most of a small object's size and nothing in the operator reads them. Cached objects are only read, and
// written back only through patches computed against the cached copy, so what is dropped here is never lost.
func stripUnread(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
		if a := m.GetAnnotations(); a[lastApplied] != "" {
			delete(a, lastApplied)
			m.SetAnnotations(a)
		}
	}
	return obj, nil
}

// stripPod also drops the parts of a cached Ray pod the controllers never read: the controllers read its labels,
// annotations, owner, restart policy, node, container names and images, and its status. Env vars, commands, probes,
// mounts, volumes and resources (the bulk of a Ray pod: the ray start command, its environment, and requests and
// limits, whose quantities were the largest item of the heap with 4,000 pods cached) are dropped.
func stripPod(obj any) (any, error) {
	obj, _ = stripUnread(obj)
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	p.Spec.Volumes = nil
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			c := &cs[i]
			c.Command, c.Args, c.Env, c.EnvFrom, c.VolumeMounts = nil, nil, nil, nil, nil
			c.LivenessProbe, c.ReadinessProbe, c.StartupProbe, c.Lifecycle = nil, nil, nil, nil
			c.Resources = corev1.ResourceRequirements{}
		}
	}
	return p, nil
}
