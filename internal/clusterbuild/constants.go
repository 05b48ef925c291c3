// Package clusterbuild turns a RayCluster spec into the objects the operator creates: head and worker pods, Services,
// the autoscaler's ServiceAccount/Role/RoleBinding, the `ray start` command, the template hash. Every function here
// is pure: no client, no clock, no randomness, so the controllers stay thin and the builders are table-tested.
// The name says what it builds (a Ray cluster's objects), and keeps it apart from controller-runtime's builder.
package clusterbuild

// Annotation keys.
const (
	// AnnotationPodTemplateHash is stamped on every pod: the hash of its group's template it was built from (see Hashes).
	AnnotationPodTemplateHash = "ray.io/pod-template-hash"
	AnnotationFTEnabled       = "ray.io/ft-enabled"
	// AnnotationOverwriteContainerCmd set to "true" keeps the user's command untouched.
	AnnotationOverwriteContainerCmd = "ray.io/overwrite-container-cmd"
	// AnnotationEnableServeService set to "true" on a RayCluster asks for <cluster>-serve-svc.
	AnnotationEnableServeService = "ray.io/enable-serve-service"
	// AnnotationGangScheduling asks a batch scheduler for gang scheduling.
	AnnotationGangScheduling = "ray.io/gang-scheduling-enabled"
	// AnnotationExternalStorageNamespace belongs to GCS fault tolerance.
	AnnotationExternalStorageNamespace = "ray.io/external-storage-namespace"
)

// FinalizerGCSFTRedisCleanup is the finalizer KubeRay puts on clusters with GCS fault tolerance, to clean their keys
// out of Redis on deletion. Clusters adopted from KubeRay carry it.
const FinalizerGCSFTRedisCleanup = "ray.io/gcs-ft-redis-cleanup-finalizer"

// Default ports and port names (kuberay-compat.md §2–3).
const (
	DefaultGCSPort            = 6379
	DefaultDashboardPort      = 8265
	DefaultClientPort         = 10001
	DefaultServePort          = 8000
	DefaultMetricsPort        = 8080
	DefaultDashboardAgentPort = 52365

	GCSPortName       = "gcs-server"
	DashboardPortName = "dashboard"
	ClientPortName    = "client"
	ServePortName     = "serve"
	MetricsPortName   = "metrics"
)

// Container and volume names the builders add.
const (
	RayContainerIndex        = 0
	AutoscalerContainerName  = "autoscaler"
	WaitGCSInitContainerName = "wait-gcs-ready"
	SharedMemVolumeName      = "shared-mem"
	SharedMemMountPath       = "/dev/shm"
	RayLogsVolumeName        = "ray-logs"
	RayLogsMountPath         = "/tmp/ray"
)

// Values written into the pods' environment.
const (
	// EnvAutoscalerV2 in the head's Ray container switches Ray between autoscaler v1 and v2.
	EnvAutoscalerV2 = "RAY_enable_autoscaler_v2"
	// EnvAutoscalerStartCmd on the autoscaler container holds the command the operator generates for it.
	EnvAutoscalerStartCmd = "KUBERAY_GEN_AUTOSCALER_START_CMD"

	OperatorVersion = "manta"
	CRDVersion      = "v1"
)

// Kinds that may own a RayCluster.
const (
	KindRayCluster = "RayCluster"
	KindRayJob     = "RayJob"
	KindRayService = "RayService"
)
