package clusterbuild

import (
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// Annotations a RayService controller puts on the RayClusters it creates. The first two are KubeRay's keys, so
// tools that read them keep working; the values are Manta's own hashes.
const (
	// AnnotationClusterSpecHash is RayServiceClusterHash of the spec the cluster was created or last updated from.
	AnnotationClusterSpecHash = "ray.io/hash-without-replicas-and-workers-to-delete"
	// AnnotationNumWorkerGroups is how many worker groups that hash covers: groups appended later are added in place.
	AnnotationNumWorkerGroups = "ray.io/num-worker-groups"
	// AnnotationServeConfigHash is ServeConfigHash of the serveConfigV2 last applied to the cluster.
	AnnotationServeConfigHash = "manta.dev/serve-config-hash"
	// AnnotationServeConfigHead identifies the head (pod UID and Ray container restarts) the config was applied to:
	// a head that restarted without GCS fault tolerance has lost its applications, and they are applied again.
	AnnotationServeConfigHead = "manta.dev/serve-config-head"
	// AnnotationDeleteAfter is set on a RayService's cluster that no longer serves: it is deleted after this time
	// (RFC 3339), rayClusterDeletionDelaySeconds after traffic left it.
	AnnotationDeleteAfter = "manta.dev/delete-after"
)

// RayServiceHeadServiceName is <rayservice>-head-svc.
func RayServiceHeadServiceName(s *rayv1.RayService) string {
	return fitName(s.Name+"-head-svc", maxNameLen)
}

// RayServiceServeServiceName is spec.serveService.metadata.name, or <rayservice>-serve-svc.
func RayServiceServeServiceName(s *rayv1.RayService) string {
	if u := s.Spec.ServeService; u != nil && u.Name != "" {
		return u.Name
	}
	return fitName(s.Name+"-serve-svc", maxNameLen)
}

// RayServiceOwnerReference makes the RayService the controller of what it creates.
func RayServiceOwnerReference(s *rayv1.RayService) *metav1.OwnerReference {
	return metav1.NewControllerRef(s, rayv1.GroupVersion.WithKind(KindRayService))
}

// originLabels are the labels KubeRay puts on what a RayService creates.
func originLabels(s *rayv1.RayService) map[string]string {
	return map[string]string{rayv1.LabelOriginCRName: s.Name, rayv1.LabelOriginCRD: KindRayService}
}

// RayServiceCluster is the RayCluster named name that serves s: the service's rayClusterConfig, its labels and
// annotations, the origin labels, and the spec hash annotations that tell later reconciles whether a spec change
// can be made in place.
func RayServiceCluster(s *rayv1.RayService, name string) *rayv1.RayCluster {
	labels := maps.Clone(s.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, originLabels(s))
	annotations := map[string]string{}
	for k, v := range s.Annotations {
		if k != "kubectl.kubernetes.io/last-applied-configuration" {
			annotations[k] = v
		}
	}
	spec := s.Spec.RayClusterSpec.DeepCopy()
	annotations[AnnotationClusterSpecHash] = RayServiceClusterHash(spec, len(spec.WorkerGroupSpecs))
	annotations[AnnotationNumWorkerGroups] = strconv.Itoa(len(spec.WorkerGroupSpecs))
	Stamp(annotations)
	return &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: s.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{*RayServiceOwnerReference(s)},
		},
		Spec: *spec,
	}
}

// RayServiceClusterHash hashes what a RayService cannot change on a running cluster: the spec of its first groups
// worker groups, without the scaling fields (replicas, minReplicas, maxReplicas, workersToDelete) and suspend.
// Two specs with the same hash differ at most in scaling and in worker groups appended after the first groups.
func RayServiceClusterHash(spec *rayv1.RayClusterSpec, groups int) string {
	c := spec.DeepCopy()
	c.Suspend = nil
	if groups < len(c.WorkerGroupSpecs) {
		c.WorkerGroupSpecs = c.WorkerGroupSpecs[:groups]
	}
	for i := range c.WorkerGroupSpecs {
		g := &c.WorkerGroupSpecs[i]
		g.Replicas, g.MinReplicas, g.MaxReplicas = nil, nil, nil
		g.ScaleStrategy.WorkersToDelete = nil
	}
	return hashJSON(c)
}

// ServeConfigHash identifies a serveConfigV2 text.
func ServeConfigHash(serveConfigV2 string) string { return hashJSON(serveConfigV2) }

// RayServiceHeadService is <rayservice>-head-svc: the active cluster's head Service under the RayService's name,
// owned by the RayService, so clients keep one address across cluster upgrades. It is labelled for the RayService
// (ray.io/identifier <rayservice>-head), not for the cluster it points at, as KubeRay labels it.
func RayServiceHeadService(s *rayv1.RayService, active *rayv1.RayCluster) *corev1.Service {
	svc := OwnerHeadService(active, KindRayService, s.Name)
	svc.Name = RayServiceHeadServiceName(s)
	svc.OwnerReferences = []metav1.OwnerReference{*RayServiceOwnerReference(s)}
	return svc
}

// RayServiceServeService is the Serve Service of s: it selects the active cluster's pods labelled ray.io/serve=true
// (pods whose Serve proxy answers), over the serve ports of the head's Ray container, labelled for the RayService.
// The user's serveService is the base (name, labels under ours, annotations, type, the rest of its spec), but the
// selector is always Manta's and the ports are the head's serve ports, as KubeRay does: a Service port the head
// does not listen on would carry no traffic. Only when the head names no serve port are the user's ports named
// serve kept.
func RayServiceServeService(s *rayv1.RayService, active *rayv1.RayCluster) *corev1.Service {
	sel := map[string]string{rayv1.LabelCluster: active.Name, rayv1.LabelServe: "true"}
	labels := originLabels(s)
	labels[rayv1.LabelServe] = fitName(s.Name+"-serve", maxNameLen)
	ports := headServePorts(active)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: RayServiceServeServiceName(s), Namespace: s.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*RayServiceOwnerReference(s)},
		},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: ports, Type: active.Spec.HeadGroupSpec.ServiceType},
	}
	if u := s.Spec.ServeService; u != nil {
		u = u.DeepCopy()
		for k, v := range u.Labels {
			if _, ok := svc.Labels[k]; !ok {
				svc.Labels[k] = v
			}
		}
		svc.Annotations = u.Annotations
		spec := u.Spec
		if len(ports) == 0 {
			for _, p := range spec.Ports {
				if p.Name == ServePortName {
					ports = append(ports, serveServicePort(p.Name, p.Port))
				}
			}
		}
		spec.Ports = ports
		if spec.Type == "" {
			spec.Type = svc.Spec.Type
		}
		spec.Selector = sel
		svc.Spec = spec
	}
	if len(svc.Spec.Ports) == 0 {
		// A Service needs a port: Ray Serve's default, where the proxy listens unless told otherwise.
		svc.Spec.Ports = []corev1.ServicePort{serveServicePort(ServePortName, DefaultServePort)}
	}
	svc.Annotations = Stamp(maps.Clone(svc.Annotations))
	return svc
}
