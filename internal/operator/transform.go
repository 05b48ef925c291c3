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
// annotations, owner, restart policy, node, container names and images, and most of its status. Env vars,
// commands, probes, mounts, volumes and resources (the bulk of a Ray pod: the ray start command, its environment,
// and requests and limits, whose quantities were the largest item of the heap with 4,000 pods cached), scheduling
// constraints, security contexts, and the containers' image and runtime IDs are dropped.
func stripPod(obj any) (any, error) {
	obj, _ = stripUnread(obj)
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	s := &p.Spec
	s.Volumes, s.Tolerations, s.Affinity, s.NodeSelector, s.TopologySpreadConstraints = nil, nil, nil, nil, nil
	s.SecurityContext, s.ImagePullSecrets, s.DNSConfig, s.HostAliases, s.Overhead = nil, nil, nil, nil, nil
	for _, cs := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for i := range cs {
			c := &cs[i]
			c.Command, c.Args, c.Env, c.EnvFrom, c.VolumeMounts, c.Ports = nil, nil, nil, nil, nil, nil
			c.LivenessProbe, c.ReadinessProbe, c.StartupProbe, c.Lifecycle, c.SecurityContext = nil, nil, nil, nil, nil
			c.Resources = corev1.ResourceRequirements{}
		}
	}
	// Of the status the controllers read the phase, reason and message, the conditions, the pod IP and the
	// containers' names, states, readiness and restarts.
	st := &p.Status
	st.HostIP, st.HostIPs, st.PodIPs, st.ResourceClaimStatuses = "", nil, nil, nil
	for _, cs := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for i := range cs {
			c := &cs[i]
			c.ImageID, c.ContainerID, c.AllocatedResources, c.Resources = "", "", nil, nil
			c.VolumeMounts, c.User, c.AllocatedResourcesStatus = nil, nil, nil
		}
	}
	return p, nil
}
