package clusterbuild

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// defaultHeadPorts are the head Service's ports when the Ray container names none.
var defaultHeadPorts = []corev1.ContainerPort{
	{Name: ClientPortName, ContainerPort: DefaultClientPort},
	{Name: GCSPortName, ContainerPort: DefaultGCSPort},
	{Name: DashboardPortName, ContainerPort: DefaultDashboardPort},
	{Name: MetricsPortName, ContainerPort: DefaultMetricsPort},
	{Name: ServePortName, ContainerPort: DefaultServePort},
}

// HeadService is <cluster>-head-svc: the container's named ports (or the defaults), headless unless a type is
// asked for, with the user's headService merged on top.
func HeadService(c *rayv1.RayCluster) *corev1.Service {
	h := &c.Spec.HeadGroupSpec
	var ports []corev1.ContainerPort
	if cs := h.Template.Spec.Containers; len(cs) > 0 {
		ports = cs[RayContainerIndex].Ports
	}
	if len(ports) == 0 {
		ports = defaultHeadPorts
	}
	svcPorts := servicePorts(ports, func(string) bool { return true })
	if !slices.ContainsFunc(svcPorts, func(p corev1.ServicePort) bool { return p.Name == MetricsPortName }) {
		svcPorts = append(svcPorts, servicePort(MetricsPortName, DefaultMetricsPort, corev1.ProtocolTCP))
	}
	sortPorts(svcPorts)

	// A head template that names its app (app.kubernetes.io/name) keeps that label on the head pod, so the selector
	// must say the same or the Service selects nothing.
	labels := SelectorLabels(c, rayv1.NodeTypeHead)
	if v, ok := h.Template.Labels[rayv1.LabelAppName]; ok {
		labels[rayv1.LabelAppName] = v
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: HeadServiceName(c), Namespace: c.Namespace,
			Labels: copyMap(labels), Annotations: Stamp(copyMap(c.Spec.HeadServiceAnnotations)),
			OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
		},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: svcPorts, Type: h.ServiceType},
	}
	if user := h.HeadService; user != nil {
		// The user's Service is the base: its labels and annotations under ours, its ports first and then the
		// defaults whose name or number it does not already use, its type unless it says none.
		u := user.DeepCopy()
		for k, v := range u.Labels {
			if _, ok := svc.Labels[k]; !ok {
				svc.Labels[k] = v
			}
		}
		if len(u.Annotations) > 0 {
			ann := copyMap(u.Annotations)
			for k, v := range svc.Annotations {
				ann[k] = v
			}
			svc.Annotations = ann
		}
		spec := u.Spec
		for _, p := range svcPorts {
			if !slices.ContainsFunc(spec.Ports, func(q corev1.ServicePort) bool { return q.Name == p.Name || q.Port == p.Port }) {
				spec.Ports = append(spec.Ports, p)
			}
		}
		if spec.Type == "" {
			spec.Type = svc.Spec.Type
		}
		spec.Selector = svc.Spec.Selector
		svc.Spec = spec
		return svc
	}
	if svc.Spec.Type == "" || svc.Spec.Type == corev1.ServiceTypeClusterIP {
		// Headless: clients resolve the head pod directly, and the GCS is reachable before the pod is Ready.
		svc.Spec.ClusterIP = corev1.ClusterIPNone
		svc.Spec.PublishNotReadyAddresses = true
	}
	return svc
}

// ServeService is <cluster>-serve-svc over the Ray container's serve ports, selecting every pod of the cluster.
func ServeService(c *rayv1.RayCluster) *corev1.Service {
	ports := headServePorts(c)
	if len(ports) == 0 {
		ports = []corev1.ServicePort{serveServicePort(ServePortName, DefaultServePort)}
	}
	sel := map[string]string{rayv1.LabelCluster: c.Name}
	if originCRD(c) == KindRayService {
		sel[rayv1.LabelServe] = "true"
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: ServeServiceName(c), Namespace: c.Namespace,
			Labels: map[string]string{
				rayv1.LabelCluster: c.Name, rayv1.LabelServe: fitName(c.Name+"-serve", maxNameLen),
				rayv1.LabelAppName: rayv1.AppNameValue, rayv1.LabelCreatedBy: rayv1.CreatedByValue,
			},
			Annotations:     Stamp(nil),
			OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
		},
		// The serve Service is exposed like the head: headGroupSpec.serviceType (a NodePort or LoadBalancer head means
		// Serve is wanted from outside too).
		Spec: corev1.ServiceSpec{Selector: sel, Ports: ports, Type: c.Spec.HeadGroupSpec.ServiceType},
	}
}

// headServePorts are the serve ports (serve, serve-*) of the head's Ray container, or of the head Service's default
// ports when the container names none; none when it names ports but no serve port. Without appProtocol, as
// KubeRay's serve Services: the port may carry HTTP or gRPC.
func headServePorts(c *rayv1.RayCluster) []corev1.ServicePort {
	var ports []corev1.ContainerPort
	if cs := c.Spec.HeadGroupSpec.Template.Spec.Containers; len(cs) > 0 {
		ports = cs[RayContainerIndex].Ports
	}
	if len(ports) == 0 {
		ports = defaultHeadPorts
	}
	var out []corev1.ServicePort
	for _, p := range servicePorts(ports, isServePort) {
		out = append(out, serveServicePort(p.Name, p.Port))
		out[len(out)-1].Protocol = p.Protocol
	}
	sortPorts(out)
	return out
}

func isServePort(name string) bool {
	return name == ServePortName || strings.HasPrefix(name, ServePortName+"-")
}

func serveServicePort(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, Protocol: corev1.ProtocolTCP}
}

// HeadlessWorkerService lets the hosts of a multi-host replica find each other by name.
func HeadlessWorkerService(c *rayv1.RayCluster) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: HeadlessWorkerServiceName(c), Namespace: c.Namespace,
			Labels:          map[string]string{rayv1.LabelHeadlessWorkerService: c.Name},
			Annotations:     Stamp(nil),
			OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 map[string]string{rayv1.LabelCluster: c.Name, rayv1.LabelNodeType: rayv1.NodeTypeWorker},
			PublishNotReadyAddresses: true,
		},
	}
}

// WantsServeService says whether the cluster asked for <cluster>-serve-svc.
func WantsServeService(c *rayv1.RayCluster) bool {
	return c.Annotations[AnnotationEnableServeService] == "true"
}

// WantsHeadlessWorkerService says whether any worker group is multi-host.
func WantsHeadlessWorkerService(c *rayv1.RayCluster) bool {
	for i := range c.Spec.WorkerGroupSpecs {
		if c.Spec.WorkerGroupSpecs[i].NumOfHosts > 1 {
			return true
		}
	}
	return false
}

func servicePorts(ports []corev1.ContainerPort, keep func(string) bool) []corev1.ServicePort {
	var out []corev1.ServicePort
	for _, p := range ports {
		name := p.Name
		if name == "" {
			name = strconv.Itoa(int(p.ContainerPort)) + "-port"
		}
		if !keep(name) {
			continue
		}
		out = append(out, servicePort(name, p.ContainerPort, p.Protocol))
	}
	return out
}

func servicePort(name string, port int32, proto corev1.Protocol) corev1.ServicePort {
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	return corev1.ServicePort{Name: name, Port: port, Protocol: proto, AppProtocol: ptr.To("tcp")}
}

func sortPorts(p []corev1.ServicePort) {
	slices.SortFunc(p, func(a, b corev1.ServicePort) int { return strings.Compare(a.Name, b.Name) })
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// UpdateService lays the fields Manta owns on a Service that already exists: its labels and annotations (only the
// keys Manta sets; others' keys are kept), selector, ports, type and publishNotReadyAddresses. Everything else
// (the allocated clusterIP and nodePorts, fields other controllers or users set) is left as it is. It returns the
// updated copy and whether anything changed. recreate is true when the change cannot be made in place: a Service
// cannot switch between headless and not, so it must be deleted and created again.
func UpdateService(existing, desired *corev1.Service) (updated *corev1.Service, changed, recreate bool) {
	if (existing.Spec.ClusterIP == corev1.ClusterIPNone) != (desired.Spec.ClusterIP == corev1.ClusterIPNone) {
		return existing, true, true
	}
	typ := desired.Spec.Type
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	ports := desiredPorts(existing, desired, typ)
	// Nothing is copied unless something differs: the existing Service is usually the cache's own, read on every
	// reconcile, and already as wanted.
	if !missingKeys(existing.Labels, desired.Labels) && !missingKeys(existing.Annotations, desired.Annotations) &&
		maps.Equal(existing.Spec.Selector, desired.Spec.Selector) && existing.Spec.Type == typ &&
		existing.Spec.PublishNotReadyAddresses == desired.Spec.PublishNotReadyAddresses && portsEqual(existing.Spec.Ports, ports) {
		return existing, false, false
	}
	out := existing.DeepCopy()
	out.Labels = withKeys(out.Labels, desired.Labels)
	out.Annotations = withKeys(out.Annotations, desired.Annotations)
	if !maps.Equal(out.Spec.Selector, desired.Spec.Selector) {
		out.Spec.Selector = copyMap(desired.Spec.Selector)
	}
	out.Spec.Type = typ
	out.Spec.PublishNotReadyAddresses = desired.Spec.PublishNotReadyAddresses
	out.Spec.Ports = ports
	return out, true, false
}

// missingKeys says whether want has a key that m lacks or holds with another value. The stamp is not compared: it
// says which Manta created the Service, and a newer one has no reason to write it.
func missingKeys(m, want map[string]string) bool {
	for k, v := range want {
		if isStampKey(k) {
			continue
		}
		if have, ok := m[k]; !ok || have != v {
			return true
		}
	}
	return false
}

// withKeys sets want's keys but the stamp's in m (made when nil and there is something to set), keeping m's other
// keys.
func withKeys(m, want map[string]string) map[string]string {
	for k, v := range want {
		if isStampKey(k) {
			continue
		}
		if m == nil {
			m = make(map[string]string, len(want))
		}
		m[k] = v
	}
	return m
}

// desiredPorts is desired's ports as the API server would store them: protocol and targetPort defaulted, and the
// node ports the API server allocated kept.
func desiredPorts(existing, desired *corev1.Service, typ corev1.ServiceType) []corev1.ServicePort {
	ports := make([]corev1.ServicePort, len(desired.Spec.Ports))
	for i, p := range desired.Spec.Ports {
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort.IntVal == 0 && p.TargetPort.StrVal == "" {
			// The API server defaults targetPort to port; say it here so an unchanged port is not a change.
			p.TargetPort = intstr.FromInt32(p.Port)
		}
		if p.NodePort == 0 && typ != corev1.ServiceTypeClusterIP {
			// Keep the node port the API server allocated, so clients that use it keep working.
			for _, old := range existing.Spec.Ports {
				if old.Name == p.Name || (old.Port == p.Port && old.Protocol == p.Protocol) {
					p.NodePort = old.NodePort
					break
				}
			}
		}
		ports[i] = p
	}
	return ports
}

// portsEqual compares Service ports field by field (appProtocol by value); no ports and nil are equal.
func portsEqual(a, b []corev1.ServicePort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if (x.AppProtocol == nil) != (y.AppProtocol == nil) || (x.AppProtocol != nil && *x.AppProtocol != *y.AppProtocol) {
			return false
		}
		x.AppProtocol, y.AppProtocol = nil, nil
		if x != y {
			return false
		}
	}
	return true
}

// OwnerHeadService is the head Service a RayJob keeps for the cluster it runs on, <owner>-head-svc: the cluster's
// head Service under a name that outlives the cluster (a retried job gets a new cluster, the name stays), labelled
// for its owner rather than for the cluster.
func OwnerHeadService(c *rayv1.RayCluster, ownerKind, ownerName string) *corev1.Service {
	svc := HeadService(c)
	svc.Name = ownerName + "-head-svc"
	svc.Labels = map[string]string{
		rayv1.LabelOriginCRName: ownerName,
		rayv1.LabelOriginCRD:    ownerKind,
		rayv1.LabelNodeType:     rayv1.NodeTypeHead,
		rayv1.LabelIdentifier:   fitName(ownerName+"-"+rayv1.NodeTypeHead, maxNameLen),
	}
	svc.OwnerReferences = nil
	return svc
}
