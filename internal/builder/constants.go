// Package builder turns a RayCluster spec into the objects the operator creates: head and worker pods, Services,
// the autoscaler's ServiceAccount/Role/RoleBinding, the `ray start` command, the template hash. Every function here
// is pure: no client, no clock, no randomness, so the controllers stay thin and the builders are table-tested.
package builder

// Label keys on Ray pods and Services (kuberay-compat.md §2). Real clients select on these.
const (
	LabelIsRayNode    = "ray.io/is-ray-node"
	LabelCluster      = "ray.io/cluster"
	LabelNodeType     = "ray.io/node-type"
	LabelGroup        = "ray.io/group"
	LabelIdentifier   = "ray.io/identifier"
	LabelServe        = "ray.io/serve"
	LabelAppName      = "app.kubernetes.io/name"
	LabelCreatedBy    = "app.kubernetes.io/created-by"
	LabelOriginCRD    = "ray.io/originated-from-crd"
	LabelOriginCRName = "ray.io/originated-from-cr-name"
	// LabelReplicaIndex numbers the replicas of a worker group (0, 1, ...; the lowest free index is reused).
	LabelReplicaIndex = "ray.io/worker-group-replica-index"
	// LabelReplicaName groups the numOfHosts pods of one multi-host replica.
	LabelReplicaName = "ray.io/worker-group-replica-name"
	// LabelHostIndex is a pod's host number within its multi-host replica.
	LabelHostIndex = "ray.io/replica-host-index"
	// LabelDisableProvisionedHeadRestart set to "true" on a RayCluster (SidecarMode RayJobs set it): once the
	// cluster has been provisioned, a head pod that terminates is not replaced.
	LabelDisableProvisionedHeadRestart = "ray.io/disable-provisioned-head-restart"
	// LabelHeadlessWorkerService marks the headless Service of a cluster's multi-host workers; its value is the cluster.
	LabelHeadlessWorkerService = "ray.io/headless-worker-svc"
	// LabelSchedulerName selects a KubeRay batch-scheduler plugin (volcano, yunikorn, kai-scheduler).
	LabelSchedulerName = "ray.io/scheduler-name"

	AppNameValue   = "kuberay"
	CreatedByValue = "kuberay-operator"

	NodeTypeHead   = "head"
	NodeTypeWorker = "worker"
	HeadGroupName  = "headgroup"
)

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

	OperatorVersion = "manta"
	CRDVersion      = "v1"
)

// Kinds that may own a RayCluster.
const (
	KindRayCluster = "RayCluster"
	KindRayJob     = "RayJob"
	KindRayService = "RayService"
)
