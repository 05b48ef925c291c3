package clusterbuild

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The history server collector (historyServerOptions.collectorOptions) is a sidecar on every Ray pod that reads the
// Ray logs in /tmp/ray and receives the Ray events the node exports to it, and uploads both to the storage its env
// names, for a history server to show after the cluster is gone. Names, port and defaults are KubeRay's.
const (
	CollectorContainerName = "ray-history-collector"
	// CollectorEventsPort is where the collector listens for the events Ray's aggregator agent publishes.
	CollectorEventsPort = "8084"
	// CollectorDashboardAddress is where the head's collector reads the dashboard.
	CollectorDashboardAddress = "http://localhost:8265"
	// CollectorEventTypes are the Ray event types exported to the collector.
	CollectorEventTypes = "TASK_DEFINITION_EVENT,TASK_LIFECYCLE_EVENT,ACTOR_TASK_DEFINITION_EVENT,TASK_PROFILE_EVENT,DRIVER_JOB_DEFINITION_EVENT,DRIVER_JOB_LIFECYCLE_EVENT,ACTOR_DEFINITION_EVENT,ACTOR_LIFECYCLE_EVENT,NODE_DEFINITION_EVENT,NODE_LIFECYCLE_EVENT"
)

// CollectorManagedEnv are the collector's env vars the operator sets; collectorOptions.env may not name them.
var CollectorManagedEnv = []string{"POD_IP", "FQ_RAY_IP", "RAY_CLUSTER_NAME", "RAY_CLUSTER_NAMESPACE", "RAY_ROLE", "OWNER_KIND", "OWNER_NAME", "EVENTS_PORT"}

// HistoryCollector says whether the cluster's pods get the collector sidecar.
func HistoryCollector(c *rayv1.RayCluster) bool {
	o := c.Spec.HistoryServerOptions
	return o != nil && o.CollectorOptions != nil
}

// CollectorContainer is the collector sidecar of a pod of nodeType; fqdn is the head Service's name, which the
// collector reports the cluster by.
func CollectorContainer(c *rayv1.RayCluster, nodeType, fqdn string) corev1.Container {
	o := c.Spec.HistoryServerOptions.CollectorOptions
	pull := o.ImagePullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	q := resource.MustParse
	res := corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceCPU: q("200m"), corev1.ResourceMemory: q("256Mi")},
		Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("64Mi")},
	}
	if o.Resources != nil {
		res = *o.Resources.DeepCopy()
	}
	role := "Worker"
	if nodeType == rayv1.NodeTypeHead {
		role = "Head"
	}
	env := []corev1.EnvVar{
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "RAY_CLUSTER_NAME", Value: c.Name},
		{Name: "RAY_CLUSTER_NAMESPACE", Value: c.Namespace},
		{Name: "RAY_ROLE", Value: role},
		{Name: "EVENTS_PORT", Value: CollectorEventsPort},
		{Name: "FQ_RAY_IP", Value: fqdn},
	}
	// The collector files what it collects under the RayJob or RayService that made the cluster.
	if v := c.Labels[rayv1.LabelOriginCRD]; v != "" {
		env = append(env, corev1.EnvVar{Name: "OWNER_KIND", Value: v})
	}
	if v := c.Labels[rayv1.LabelOriginCRName]; v != "" {
		env = append(env, corev1.EnvVar{Name: "OWNER_NAME", Value: v})
	}
	if nodeType == rayv1.NodeTypeHead && !slices.ContainsFunc(o.Env, func(e corev1.EnvVar) bool { return e.Name == EnvDashboardAddress }) {
		env = append(env, corev1.EnvVar{Name: EnvDashboardAddress, Value: CollectorDashboardAddress})
	}
	for _, e := range o.Env {
		env = append(env, *e.DeepCopy())
	}
	ctr := corev1.Container{Name: CollectorContainerName, Image: o.Image, ImagePullPolicy: pull, Resources: res, Env: env}
	// It reads the dashboard, which checks the token.
	AddAuthEnv(&ctr, c)
	return ctr
}

// EnvDashboardAddress is the dashboard's address for the head's collector.
const EnvDashboardAddress = "RAY_DASHBOARD_ADDRESS"

// addHistoryCollector adds the collector sidecar to pod, shares /tmp/ray between it and the Ray container, and has
// Ray export its events to it (each setting only where the user did not make it).
func addHistoryCollector(c *rayv1.RayCluster, pod *corev1.Pod, nodeType, fqdn string) {
	if !HistoryCollector(c) {
		return
	}
	ctr := CollectorContainer(c, nodeType, fqdn)
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: RayLogsVolumeName, MountPath: RayLogsMountPath})
	pod.Spec.Containers = append(pod.Spec.Containers, ctr)
	addRayLogsVolume(pod)
	ray := &pod.Spec.Containers[RayContainerIndex]
	setEnv(ray, "RAY_enable_ray_event", "true")
	setEnv(ray, "RAY_enable_core_worker_ray_event_to_aggregator", "true")
	setEnv(ray, "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR", "http://localhost:"+CollectorEventsPort+"/v1/events")
	setEnv(ray, "RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES", CollectorEventTypes)
	setEnv(ray, "RAY_DASHBOARD_AGGREGATOR_AGENT_PUBLISHER_HTTP_ENDPOINT_EXPOSABLE_EVENT_TYPES", CollectorEventTypes)
}
