package clusterbuild

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// PodOptions are the inputs of a pod that do not come from the RayCluster.
type PodOptions struct {
	// ClusterDomain is the DNS domain of Services; empty means cluster.local.
	ClusterDomain string
	// DefaultTemplate is merged under the user's template (see MergePodTemplate); nil means none.
	DefaultTemplate *corev1.PodTemplateSpec
	// TemplateHash is stamped on the pod as ray.io/pod-template-hash: its group's hash, see Hashes.
	TemplateHash string
	// BatchScheduler is the operator's batch scheduler (one of BatchSchedulers; empty: none), which the pod is
	// handed to (AddSchedulerMetadata).
	BatchScheduler string
	// Defaults are the operator's sidecars, env, labels and annotations for Ray pods (nil: none).
	Defaults *PodDefaults
	// NoReplicaLabels leaves out the replica labels of WorkerPodForReplica, as KubeRay does with its
	// RayMultiHostIndexing gate off.
	NoReplicaLabels bool
}

// HeadPod builds the head pod of c from the user's head template.
func HeadPod(c *rayv1.RayCluster, o PodOptions) *corev1.Pod {
	h := &c.Spec.HeadGroupSpec
	pod := podFromTemplate(c, h.Template, h.Labels, o, rayv1.NodeTypeHead, rayv1.HeadGroupName, HeadPodGenerateName(c))
	if pod == nil {
		return nil
	}
	if originCRD(c) == KindRayService {
		pod.Labels[rayv1.LabelServe] = "false"
	}
	ray := &pod.Spec.Containers[RayContainerIndex]
	setServiceEnv(c, ray)
	port := headPort(c)
	autoscaling := AutoscalingEnabled(c)
	params := headGCSFaultTolerance(c, pod, ray, h.RayStartParams)

	startCmd := RayStartCommand(StartParams{
		Head: true, Params: params, Resources: ray.Resources, Overrides: h.Resources, Labels: h.Labels,
		NoMonitor: autoscaling,
	})
	setRayContainer(ray, pod, startCmd)
	setEnv(ray, "RAY_PORT", strconv.Itoa(port))
	setEnv(ray, "RAY_ADDRESS", "127.0.0.1:"+strconv.Itoa(port))
	setEnv(ray, "RAY_USAGE_STATS_EXTRA_TAGS", "kuberay_version="+OperatorVersion+";kuberay_crd="+originCRDOr(c, KindRayCluster))
	if v := autoscalerVersion(c); v == rayv1.AutoscalerVersionV2 {
		setEnv(ray, EnvAutoscalerV2, "true")
	} else if v == rayv1.AutoscalerVersionV1 {
		setEnv(ray, EnvAutoscalerV2, "false")
	}
	setProbes(ray, c.Spec.RayVersion, h.RayStartParams, true, false)
	if autoscaling {
		addRayLogsVolume(pod)
		pod.Spec.Containers = append(pod.Spec.Containers, AutoscalerContainer(c, ray.Image))
		pod.Spec.ServiceAccountName = AutoscalerServiceAccountName(c)
		// The autoscaler calls the GCS, which checks the token.
		AddAuthEnv(&pod.Spec.Containers[len(pod.Spec.Containers)-1], c)
	}
	addPodAuth(pod, c)
	configureTLS(c, pod, rayv1.NodeTypeHead)
	addHistoryCollector(c, pod, rayv1.NodeTypeHead, HeadServiceFQDN(c, o.ClusterDomain))
	addClusterSchedulerMetadata(c, pod, rayv1.HeadGroupName, o.BatchScheduler)
	o.Defaults.sidecars(pod, rayv1.NodeTypeHead)
	return pod
}

// WorkerPod builds one worker pod of group g of c from the user's worker template.
func WorkerPod(c *rayv1.RayCluster, g *rayv1.WorkerGroupSpec, o PodOptions) *corev1.Pod {
	pod := podFromTemplate(c, g.Template, g.Labels, o, rayv1.NodeTypeWorker, g.GroupName, WorkerPodGenerateName(c, g.GroupName))
	if pod == nil {
		return nil
	}
	if originCRD(c) == KindRayService {
		pod.Labels[rayv1.LabelServe] = "true"
	}
	ray := &pod.Spec.Containers[RayContainerIndex]
	setServiceEnv(c, ray)
	port := headPort(c)
	fqdn := HeadServiceFQDN(c, o.ClusterDomain)
	addr := fqdn + ":" + strconv.Itoa(port)

	workerGCSFaultTolerance(c, ray)
	startCmd := RayStartCommand(StartParams{
		Params: g.RayStartParams, Resources: ray.Resources, Overrides: g.Resources, Labels: g.Labels, HeadAddress: addr,
	})
	setRayContainer(ray, pod, startCmd)
	setEnv(ray, "FQ_RAY_IP", fqdn)
	setEnv(ray, "RAY_IP", HeadServiceName(c))
	setEnv(ray, "RAY_PORT", strconv.Itoa(port))
	setEnv(ray, "RAY_ADDRESS", addr)
	setProbes(ray, c.Spec.RayVersion, g.RayStartParams, false, originCRD(c) == KindRayService)
	addPodAuth(pod, c)
	configureTLS(c, pod, rayv1.NodeTypeWorker)
	addHistoryCollector(c, pod, rayv1.NodeTypeWorker, fqdn)
	addClusterSchedulerMetadata(c, pod, g.GroupName, o.BatchScheduler)
	o.Defaults.sidecars(pod, rayv1.NodeTypeWorker)
	return pod
}

// podFromTemplate does what head and worker pods share: merge the default template, copy the user's template
// whole, then add the labels (the group's Ray labels are pod labels too), annotations, owner, env, ports, command
// and /dev/shm KubeRay adds.
func podFromTemplate(c *rayv1.RayCluster, tmpl corev1.PodTemplateSpec, groupLabels map[string]string, o PodOptions, nodeType, group, generateName string) *corev1.Pod {
	t := tmpl.DeepCopy()
	if o.DefaultTemplate != nil {
		// The controller has checked the merge (CheckDefaultTemplate) and reported a failure instead of passing
		// the template; an error here cannot happen.
		if merged, err := MergePodTemplate(o.DefaultTemplate, t); err == nil {
			t = merged
		}
	}
	if len(t.Spec.Containers) == 0 {
		return nil
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    generateName,
			Namespace:       c.Namespace,
			Labels:          podLabels(c, mergeMaps(t.Labels, groupLabels), nodeType, group),
			Annotations:     map[string]string{},
			OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
		},
		Spec: t.Spec,
	}
	for k, v := range t.Annotations {
		pod.Annotations[k] = v
	}
	if v := c.Annotations[AnnotationOverwriteContainerCmd]; v != "" {
		pod.Annotations[AnnotationOverwriteContainerCmd] = v
	}
	if o.TemplateHash != "" {
		pod.Annotations[AnnotationPodTemplateHash] = o.TemplateHash
	}
	Stamp(pod.Annotations)
	if autoscalerVersion(c) == rayv1.AutoscalerVersionV2 && pod.Spec.RestartPolicy == "" {
		// Autoscaler v2 replaces dead Ray nodes itself; a restarted container would rejoin as a stranger.
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	// The user's init containers may need to reach the head (a TLS certificate for its name, a wait of their own).
	fqdn := HeadServiceFQDN(c, o.ClusterDomain)
	if nodeType == rayv1.NodeTypeWorker {
		// Built from the user's Ray container (its env and mounts may carry TLS settings), before Manta adds its own.
		addr := fqdn + ":" + strconv.Itoa(headPort(c))
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, waitGCSContainer(&pod.Spec.Containers[RayContainerIndex], addr))
	}
	for i := range pod.Spec.InitContainers {
		setEnv(&pod.Spec.InitContainers[i], "FQ_RAY_IP", fqdn)
		setEnv(&pod.Spec.InitContainers[i], "RAY_IP", HeadServiceName(c))
	}
	addSharedMemory(pod, c, group)
	o.Defaults.meta(pod)
	return pod
}

// mergeMaps returns a copy of a with b's entries on top.
func mergeMaps(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// OwnerReference makes c the controller of an object, so garbage collection removes it with c.
func OwnerReference(c *rayv1.RayCluster) *metav1.OwnerReference {
	return metav1.NewControllerRef(c, rayv1.GroupVersion.WithKind(KindRayCluster))
}

// podLabels are KubeRay's labels; the template's labels are kept but cannot override the three the operator and
// its clients select on.
func podLabels(c *rayv1.RayCluster, tmpl map[string]string, nodeType, group string) map[string]string {
	identifier := c.Name + "-" + nodeType
	l := map[string]string{
		rayv1.LabelIsRayNode:  "yes",
		rayv1.LabelIdentifier: fitName(identifier, maxNameLen),
		rayv1.LabelAppName:    rayv1.AppNameValue,
		rayv1.LabelCreatedBy:  rayv1.CreatedByValue,
	}
	for k, v := range tmpl {
		l[k] = v
	}
	l[rayv1.LabelCluster] = c.Name
	l[rayv1.LabelNodeType] = nodeType
	l[rayv1.LabelGroup] = validLabelValue(group)
	return l
}

// validLabelValue keeps a group name usable as a label value (group names are not constrained by the CRD).
func validLabelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	return fitName(sanitize(v), maxNameLen)
}

// SelectorLabels select the pods of one node type of c.
func SelectorLabels(c *rayv1.RayCluster, nodeType string) map[string]string {
	return map[string]string{
		rayv1.LabelCluster:    c.Name,
		rayv1.LabelNodeType:   nodeType,
		rayv1.LabelIdentifier: fitName(c.Name+"-"+nodeType, maxNameLen),
		rayv1.LabelAppName:    rayv1.AppNameValue,
		rayv1.LabelCreatedBy:  rayv1.CreatedByValue,
	}
}

// setRayContainer applies what head and worker Ray containers share.
func setRayContainer(ray *corev1.Container, pod *corev1.Pod, startCmd string) {
	if !keepsUserCommand(ray, pod.Annotations) {
		ray.Command, ray.Args = ContainerCommand(ray, startCmd)
	}
	if !hasPort(ray, MetricsPortName, DefaultMetricsPort) {
		ray.Ports = append(ray.Ports, corev1.ContainerPort{Name: MetricsPortName, ContainerPort: DefaultMetricsPort, Protocol: corev1.ProtocolTCP})
	}
	setEnv(ray, "KUBERAY_GEN_RAY_START_CMD", startCmd)
	setEnvFrom(ray, "RAY_CLUSTER_NAME", "metadata.labels['"+rayv1.LabelCluster+"']")
	setEnvFrom(ray, "RAY_CLUSTER_NAMESPACE", "metadata.namespace")
	setEnvFrom(ray, "RAY_CLOUD_INSTANCE_ID", "metadata.name")
	setEnvFrom(ray, "RAY_NODE_TYPE_NAME", "metadata.labels['"+rayv1.LabelGroup+"']")
	setEnv(ray, "RAY_USAGE_STATS_KUBERAY_IN_USE", "1")
	setEnv(ray, "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "1")
}

func hasPort(c *corev1.Container, name string, port int32) bool {
	for _, p := range c.Ports {
		if p.Name == name || p.ContainerPort == port {
			return true
		}
	}
	return false
}

// setEnv adds an env var unless the user already set one with that name: the user's template wins.
// setServiceEnv gives the Ray container of a RayService's cluster the timeouts KubeRay sets there (unless the user
// set them): a dead worker's tasks fail at once and GCS and Serve KV calls give up after 5 s, so a failing node
// costs requests seconds rather than minutes.
func setServiceEnv(c *rayv1.RayCluster, ray *corev1.Container) {
	if originCRD(c) != KindRayService {
		return
	}
	setEnv(ray, "RAY_timeout_ms_task_wait_for_death_info", "0")
	setEnv(ray, "RAY_gcs_server_request_timeout_seconds", "5")
	setEnv(ray, "RAY_SERVE_KV_TIMEOUT_S", "5")
}

func setEnv(c *corev1.Container, name, value string) {
	for _, e := range c.Env {
		if e.Name == name {
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}

func setEnvFrom(c *corev1.Container, name, fieldPath string) {
	for _, e := range c.Env {
		if e.Name == name {
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fieldPath},
	}})
}

// headPort is the GCS port: rayStartParams port, or 6379.
func headPort(c *rayv1.RayCluster) int {
	if p, err := strconv.Atoi(c.Spec.HeadGroupSpec.RayStartParams["port"]); err == nil && p > 0 {
		return p
	}
	return DefaultGCSPort
}

// addSharedMemory mounts a memory-backed emptyDir at /dev/shm sized to the Ray container's memory, unless Ray was
// told to put its object store elsewhere or the user mounted something there.
func addSharedMemory(pod *corev1.Pod, c *rayv1.RayCluster, group string) {
	params := c.Spec.HeadGroupSpec.RayStartParams
	if group != rayv1.HeadGroupName {
		for i := range c.Spec.WorkerGroupSpecs {
			if c.Spec.WorkerGroupSpecs[i].GroupName == group {
				params = c.Spec.WorkerGroupSpecs[i].RayStartParams
			}
		}
	}
	if _, ok := params["plasma-directory"]; ok {
		return
	}
	ray := &pod.Spec.Containers[RayContainerIndex]
	for _, m := range ray.VolumeMounts {
		if m.MountPath == SharedMemMountPath {
			return
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == SharedMemVolumeName {
			return
		}
	}
	size := ray.Resources.Limits.Memory()
	if size.IsZero() {
		size = ray.Resources.Requests.Memory()
	}
	ed := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}
	if !size.IsZero() {
		ed.SizeLimit = ptr.To(size.DeepCopy())
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: SharedMemVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: ed}})
	ray.VolumeMounts = append(ray.VolumeMounts, corev1.VolumeMount{Name: SharedMemVolumeName, MountPath: SharedMemMountPath})
}

// addRayLogsVolume shares /tmp/ray between the Ray container and the autoscaler, which reads Ray's logs.
func addRayLogsVolume(pod *corev1.Pod) {
	ray := &pod.Spec.Containers[RayContainerIndex]
	for _, m := range ray.VolumeMounts {
		if m.MountPath == RayLogsMountPath {
			return
		}
	}
	hasVolume := false
	for _, v := range pod.Spec.Volumes {
		if v.Name == RayLogsVolumeName {
			hasVolume = true
		}
	}
	if !hasVolume {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: RayLogsVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	ray.VolumeMounts = append(ray.VolumeMounts, corev1.VolumeMount{Name: RayLogsVolumeName, MountPath: RayLogsMountPath})
}

// setProbes adds liveness and readiness probes the user did not set (kuberay-compat.md §3). They ask the ports the
// group's rayStartParams give the dashboard agent and the dashboard, so a cluster that moved them stays healthy.
func setProbes(ray *corev1.Container, rayVersion string, params map[string]string, head, serveWorker bool) {
	agentPort := paramPort(params, "dashboard-agent-listen-port", DefaultDashboardAgentPort)
	dashboardPort := paramPort(params, "dashboard-port", DefaultDashboardPort)
	timeout := int32(2)
	if head {
		timeout = 5
	}
	handler := func(readiness bool) corev1.ProbeHandler {
		if versionAtLeast(rayVersion, 2, 53, 0) && !(readiness && serveWorker) {
			return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/api/healthz", Port: intstr.FromInt32(agentPort)}}
		}
		checks := []string{fmt.Sprintf("wget --tries 1 -T 2 -q -O- http://localhost:%d/api/local_raylet_healthz | grep success", agentPort)}
		if head {
			checks = append(checks, fmt.Sprintf("wget --tries 1 -T 10 -q -O- http://localhost:%d/api/gcs_healthz | grep success", dashboardPort))
		}
		if readiness && serveWorker {
			// KubeRay's text, whose -T is its probe's initial delay (10); the probe's timeout (2 s) ends it first.
			checks = append(checks, fmt.Sprintf("wget --tries 1 -T 10 -q -O- http://localhost:%d/-/healthz | grep success", servePort(ray)))
		}
		return corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"bash", "-c", strings.Join(checks, " && ")}}}
	}
	if ray.LivenessProbe == nil {
		ray.LivenessProbe = &corev1.Probe{ProbeHandler: handler(false), InitialDelaySeconds: 30, TimeoutSeconds: timeout, PeriodSeconds: 5, SuccessThreshold: 1, FailureThreshold: 120}
	}
	if ray.ReadinessProbe == nil {
		failures := int32(10)
		if serveWorker {
			failures = 1
		}
		ray.ReadinessProbe = &corev1.Probe{ProbeHandler: handler(true), InitialDelaySeconds: 10, TimeoutSeconds: timeout, PeriodSeconds: 5, SuccessThreshold: 1, FailureThreshold: failures}
	}
}

// paramPort reads a port from rayStartParams, def when it is absent or not a port.
func paramPort(params map[string]string, key string, def int32) int32 {
	if p, err := strconv.ParseInt(params[key], 10, 32); err == nil && p > 0 && p < 65536 {
		return int32(p)
	}
	return def
}

func servePort(c *corev1.Container) int32 {
	for _, p := range c.Ports {
		if p.Name == ServePortName {
			return p.ContainerPort
		}
	}
	return DefaultServePort
}

// versionAtLeast compares a Ray version such as "2.53.0"; an empty or unparsable version is old.
func versionAtLeast(v string, major, minor, patch int) bool {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	nums := [3]int{}
	for i := range parts {
		digits := parts[i]
		if j := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
			digits = digits[:j]
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			return false
		}
		nums[i] = n
	}
	want := [3]int{major, minor, patch}
	for i := range nums {
		if nums[i] != want[i] {
			return nums[i] > want[i]
		}
	}
	return true
}

// waitGCSContainer holds a worker back until the head's GCS answers, so Ray does not burn its connect retries. The
// first two minutes are quiet (a head takes that long to start); after that each failed check prints its error, so
// a worker stuck here says why in its logs.
func waitGCSContainer(ray *corev1.Container, addr string) corev1.Container {
	script := fmt.Sprintf(`SECONDS=0
while true; do
  if (( SECONDS <= 120 )); then
    if ray health-check --address %[1]s > /dev/null 2>&1; then echo "GCS is ready."; break; fi
    echo "$SECONDS seconds elapsed: waiting for the GCS at %[1]s"
  else
    if ray health-check --address %[1]s; then echo "GCS is ready."; break; fi
    echo "$SECONDS seconds elapsed: still waiting for the GCS at %[1]s; the error is above"
  fi
  sleep 5
done`, addr)
	q := func(s string) resource.Quantity { return resource.MustParse(s) }
	return corev1.Container{
		Name:            WaitGCSInitContainerName,
		Image:           ray.Image,
		ImagePullPolicy: ray.ImagePullPolicy,
		Command:         ShellCommand(),
		Args:            []string{script},
		Env:             append([]corev1.EnvVar(nil), ray.Env...),
		VolumeMounts:    append([]corev1.VolumeMount(nil), ray.VolumeMounts...),
		SecurityContext: ray.SecurityContext.DeepCopy(),
		Resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceCPU: q("200m"), corev1.ResourceMemory: q("256Mi")},
			Requests: corev1.ResourceList{corev1.ResourceCPU: q("200m"), corev1.ResourceMemory: q("256Mi")},
		},
	}
}

// AutoscalingEnabled says whether the autoscaler sidecar runs.
func AutoscalingEnabled(c *rayv1.RayCluster) bool {
	return ptr.Deref(c.Spec.EnableInTreeAutoscaling, false)
}

// autoscalerVersion is the explicitly requested autoscaler version (options, or RAY_enable_autoscaler_v2 in the
// head's Ray container), "" when Ray decides.
func autoscalerVersion(c *rayv1.RayCluster) rayv1.AutoscalerVersion {
	if !AutoscalingEnabled(c) {
		return ""
	}
	if o := c.Spec.AutoscalerOptions; o != nil && o.Version != nil {
		return *o.Version
	}
	if cs := c.Spec.HeadGroupSpec.Template.Spec.Containers; len(cs) > 0 {
		for _, e := range cs[RayContainerIndex].Env {
			if e.Name == EnvAutoscalerV2 {
				switch strings.ToLower(e.Value) {
				case "1", "true":
					return rayv1.AutoscalerVersionV2
				case "0", "false":
					return rayv1.AutoscalerVersionV1
				}
			}
		}
	}
	return ""
}

func originCRD(c *rayv1.RayCluster) string { return c.Labels[rayv1.LabelOriginCRD] }

func originCRDOr(c *rayv1.RayCluster, def string) string {
	if o := originCRD(c); o != "" {
		return o
	}
	return def
}

// Replica places a worker pod in its group: the replica's index and, for multi-host groups, the replica's name
// and the pod's host index.
type Replica struct {
	Index     int
	Name      string
	HostIndex int
}

// WorkerPodForReplica is WorkerPod with the replica labels KubeRay's multi-host indexing sets, so the hosts of a
// TPU slice can find each other and the autoscaler can tell replicas apart.
func WorkerPodForReplica(c *rayv1.RayCluster, g *rayv1.WorkerGroupSpec, o PodOptions, r Replica) *corev1.Pod {
	pod := WorkerPod(c, g, o)
	if pod != nil {
		setReplicaLabels(pod, g, o, r)
	}
	return pod
}

// ReplicaPod is WorkerPodForReplica(c, g, o, r) made from base, WorkerPod(c, g, o), which a caller creating many
// replicas of a group builds once: building every pod from the template again was most of what a burst of
// creates allocated. The pod has base's metadata copied, as it differs by replica and a create writes it back,
// and base's spec shared, not copied: its users must only read it (the pod creators encode it; a client that
// decodes the answer into the pod zeroes the pod first).
func ReplicaPod(base *corev1.Pod, g *rayv1.WorkerGroupSpec, o PodOptions, r Replica) *corev1.Pod {
	if base == nil {
		return nil
	}
	pod := &corev1.Pod{TypeMeta: base.TypeMeta, Spec: base.Spec}
	base.ObjectMeta.DeepCopyInto(&pod.ObjectMeta)
	setReplicaLabels(pod, g, o, r)
	return pod
}

// setReplicaLabels adds the replica labels of WorkerPodForReplica to pod.
func setReplicaLabels(pod *corev1.Pod, g *rayv1.WorkerGroupSpec, o PodOptions, r Replica) {
	if o.NoReplicaLabels {
		return
	}
	pod.Labels[rayv1.LabelReplicaIndex] = strconv.Itoa(r.Index)
	if g.NumOfHosts > 1 {
		pod.Labels[rayv1.LabelReplicaName] = validLabelValue(r.Name)
		pod.Labels[rayv1.LabelHostIndex] = strconv.Itoa(r.HostIndex)
	}
}

// ReplicaName names a multi-host replica: <group>-<suffix>, fit for a label value.
func ReplicaName(group, suffix string) string {
	return fitName(sanitize(group), maxNameLen-len(suffix)-1) + "-" + suffix
}

// GroupLabelValue is the value of ray.io/group on the pods of a worker group.
func GroupLabelValue(group string) string { return validLabelValue(group) }

// PodRunningAndReady reports whether the pod is Running with its Ready condition True.
func PodRunningAndReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
