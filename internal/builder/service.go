package builder

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	labels := SelectorLabels(c, NodeTypeHead)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: HeadServiceName(c), Namespace: c.Namespace,
			Labels: copyMap(labels), Annotations: copyMap(c.Spec.HeadServiceAnnotations),
			OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
		},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: svcPorts, Type: h.ServiceType},
	}
	if user := h.HeadService; user != nil {
		u := user.DeepCopy()
		for k, v := range u.Labels {
			if _, ok := svc.Labels[k]; !ok {
				svc.Labels[k] = v
			}
		}
		for k, v := range u.Annotations {
			if svc.Annotations == nil {
				svc.Annotations = map[string]string{}
			}
			svc.Annotations[k] = v
		}
		spec := u.Spec
		if len(spec.Ports) == 0 {
			spec.Ports = svc.Spec.Ports
		}
		if spec.Type == "" {
			spec.Type = svc.Spec.Type
		}
		spec.Selector = svc.Spec.Selector
		svc.Spec = spec
	}
	if svc.Spec.Type == "" || svc.Spec.Type == corev1.ServiceTypeClusterIP {
		if svc.Spec.ClusterIP == "" {
			// Headless: clients resolve the head pod directly, and the GCS is reachable before the pod is Ready.
			svc.Spec.ClusterIP = corev1.ClusterIPNone
			svc.Spec.PublishNotReadyAddresses = true
		}
	}
	return svc
}

// ServeService is <cluster>-serve-svc over the Ray container's serve ports, selecting every pod of the cluster.
func ServeService(c *rayv1.RayCluster) *corev1.Service {
	var ports []corev1.ServicePort
	if cs := c.Spec.HeadGroupSpec.Template.Spec.Containers; len(cs) > 0 {
		ports = servicePorts(cs[RayContainerIndex].Ports, func(n string) bool {
			return n == ServePortName || strings.HasPrefix(n, ServePortName+"-")
		})
	}
	if len(ports) == 0 {
		ports = []corev1.ServicePort{servicePort(ServePortName, DefaultServePort, corev1.ProtocolTCP)}
	}
	sortPorts(ports)
	sel := map[string]string{LabelCluster: c.Name}
	if originCRD(c) == KindRayService {
		sel[LabelServe] = "true"
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: ServeServiceName(c), Namespace: c.Namespace,
			Labels: map[string]string{
				LabelCluster: c.Name, LabelServe: fitName(c.Name+"-serve", maxNameLen),
				LabelAppName: AppNameValue, LabelCreatedBy: CreatedByValue,
			},
			OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
		},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: ports},
	}
}

// HeadlessWorkerService lets the hosts of a multi-host replica find each other by name.
func HeadlessWorkerService(c *rayv1.RayCluster) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: HeadlessWorkerServiceName(c), Namespace: c.Namespace,
			Labels:          map[string]string{LabelCluster: c.Name, LabelAppName: AppNameValue, LabelCreatedBy: CreatedByValue},
			OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 map[string]string{LabelCluster: c.Name, LabelNodeType: NodeTypeWorker},
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
