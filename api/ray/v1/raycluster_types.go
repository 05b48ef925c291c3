package v1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Values accepted by spec.managedBy (the same as KubeRay's CRD).
const (
	// KubeRayController is the managedBy value of objects this operator reconciles (KubeRay's name, kept for
	// compatibility with Kueue and existing manifests).
	KubeRayController = "ray.io/kuberay-operator"
	// MultiKueueController is the managedBy value of objects that Kueue's MultiKueue dispatches to a worker cluster.
	MultiKueueController = "kueue.x-k8s.io/multikueue"
)

// RayClusterSpec is the desired state of a Ray cluster: one head group and any number of worker groups.
// +kubebuilder:validation:XValidation:rule="has(self.managedBy) == has(oldSelf.managedBy)",message="the managedBy field is immutable",fieldPath=".managedBy"
type RayClusterSpec struct {
	// UpgradeStrategy says what happens to the pods when the spec changes. Only for standalone RayClusters: a
	// RayJob or RayService manages the upgrades of the clusters it owns.
	// +optional
	UpgradeStrategy *RayClusterUpgradeStrategy `json:"upgradeStrategy,omitempty"`
	// AuthOptions configures authentication for the Ray cluster.
	// +optional
	AuthOptions *AuthOptions `json:"authOptions,omitempty"`
	// Suspend deletes all the pods of the cluster while true.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`
	// ManagedBy names the controller that reconciles this object. Unset or ray.io/kuberay-operator means this
	// operator; any other value means another controller (MultiKueue) does, and this operator leaves it alone.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="the managedBy field is immutable"
	// +kubebuilder:validation:XValidation:rule="self in ['ray.io/kuberay-operator', 'kueue.x-k8s.io/multikueue']",message="the managedBy field value must be either 'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue'"
	// +optional
	ManagedBy *string `json:"managedBy,omitempty"`
	// AutoscalerOptions configures the Ray autoscaler sidecar.
	// +optional
	AutoscalerOptions *AutoscalerOptions `json:"autoscalerOptions,omitempty"`
	// HeadServiceAnnotations are added to the head Service.
	// +optional
	HeadServiceAnnotations map[string]string `json:"headServiceAnnotations,omitempty"`
	// EnableInTreeAutoscaling adds the Ray autoscaler sidecar to the head pod.
	// +optional
	EnableInTreeAutoscaling *bool `json:"enableInTreeAutoscaling,omitempty"`
	// GcsFaultToleranceOptions configures GCS fault tolerance.
	// +optional
	GcsFaultToleranceOptions *GcsFaultToleranceOptions `json:"gcsFaultToleranceOptions,omitempty"`
	// HistoryServerOptions configures the Ray history server collector.
	// +optional
	HistoryServerOptions *HistoryServerOptions `json:"historyServerOptions,omitempty"`
	// NetworkPolicy isolates the cluster's pods with NetworkPolicies.
	// +optional
	NetworkPolicy *NetworkPolicyConfig `json:"networkPolicy,omitempty"`
	// TLSOptions configures mutual TLS between Ray processes.
	// +optional
	TLSOptions *TLSOptions `json:"tlsOptions,omitempty"`
	// HeadGroupSpec is the spec of the head pod.
	HeadGroupSpec HeadGroupSpec `json:"headGroupSpec"`
	// RayVersion is the version of Ray the cluster runs; some behaviour depends on it.
	// +optional
	RayVersion string `json:"rayVersion,omitempty"`
	// WorkerGroupSpecs are the worker groups. Group names are unique.
	// +listType=map
	// +listMapKey=groupName
	// +optional
	WorkerGroupSpecs []WorkerGroupSpec `json:"workerGroupSpecs,omitempty"`
}

// RayClusterUpgradeType says how a standalone RayCluster reacts to spec changes.
// +kubebuilder:validation:Enum=Recreate;None
type RayClusterUpgradeType string

const (
	// RayClusterRecreate deletes and recreates all pods when the pod templates change.
	RayClusterRecreate RayClusterUpgradeType = "Recreate"
	// RayClusterUpgradeNone leaves existing pods alone when the spec changes.
	RayClusterUpgradeNone RayClusterUpgradeType = "None"
)

// RayClusterUpgradeStrategy is the upgrade strategy of a standalone RayCluster.
type RayClusterUpgradeStrategy struct {
	// Type is Recreate or None.
	// +optional
	Type *RayClusterUpgradeType `json:"type,omitempty"`
}

// AuthMode is the authentication mode of a Ray cluster.
// +kubebuilder:validation:Enum=disabled;token
type AuthMode string

const (
	AuthModeDisabled AuthMode = "disabled"
	AuthModeToken    AuthMode = "token"
)

// AuthOptions configures authentication for a Ray cluster.
type AuthOptions struct {
	// EnableK8sTokenAuth lets clients authenticate with Kubernetes service account tokens.
	// +optional
	EnableK8sTokenAuth *bool `json:"enableK8sTokenAuth,omitempty"`
	// SecretName names a Secret holding the auth token; unset means the operator creates one.
	// +optional
	SecretName *string `json:"secretName,omitempty"`
	// Mode is disabled or token.
	// +optional
	Mode AuthMode `json:"mode,omitempty"`
}

// TLSOptions configures mutual TLS for a Ray cluster.
type TLSOptions struct {
	// Enabled turns on mutual TLS.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// GcsFaultToleranceBackend is where the GCS keeps its state.
// +kubebuilder:validation:Enum=redis;rocksdb
type GcsFaultToleranceBackend string

const (
	GcsFaultToleranceBackendRedis   GcsFaultToleranceBackend = "redis"
	GcsFaultToleranceBackendRocksDB GcsFaultToleranceBackend = "rocksdb"
)

// GcsFaultToleranceOptions configures GCS fault tolerance.
type GcsFaultToleranceOptions struct {
	// Backend is redis (default) or rocksdb.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="gcsFaultToleranceOptions.backend is immutable"
	// +optional
	Backend GcsFaultToleranceBackend `json:"backend,omitempty"`
	// RedisUsername is the Redis user name.
	// +optional
	RedisUsername *RedisCredential `json:"redisUsername,omitempty"`
	// RedisPassword is the Redis password.
	// +optional
	RedisPassword *RedisCredential `json:"redisPassword,omitempty"`
	// ExternalStorageNamespace isolates this cluster's data in the external storage.
	// +optional
	ExternalStorageNamespace string `json:"externalStorageNamespace,omitempty"`
	// RedisAddress is the address of the Redis server.
	// +optional
	RedisAddress string `json:"redisAddress,omitempty"`
	// Storage is the volume of the embedded (rocksdb) backend.
	// +optional
	Storage *GcsEmbeddedStorage `json:"storage,omitempty"`
}

// RedisCredential is a literal value or a reference to one.
type RedisCredential struct {
	// ValueFrom reads the value from a Secret, ConfigMap or field.
	// +optional
	ValueFrom *corev1.EnvVarSource `json:"valueFrom,omitempty"`
	// Value is the literal value.
	// +optional
	Value string `json:"value,omitempty"`
}

// GcsStorageDeletionPolicy says what happens to the GCS volume when the cluster is deleted.
// +kubebuilder:validation:Enum=DeleteWithCluster;Retain
type GcsStorageDeletionPolicy string

const (
	GcsStorageDeleteWithCluster GcsStorageDeletionPolicy = "DeleteWithCluster"
	GcsStorageRetain            GcsStorageDeletionPolicy = "Retain"
)

// GcsEmbeddedStorage is the persistent volume of the embedded GCS backend.
type GcsEmbeddedStorage struct {
	// ClaimName names an existing PersistentVolumeClaim; unset means the operator creates one.
	// +optional
	ClaimName string `json:"claimName,omitempty"`
	// Size of the created claim (1Gi when unset).
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`
	// StorageClassName of the created claim.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
	// AccessModes of the created claim (ReadWriteOnce when unset).
	// +optional
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`
	// SubPath inside the volume.
	// +optional
	SubPath string `json:"subPath,omitempty"`
	// DeletionPolicy of the created claim.
	// +optional
	DeletionPolicy GcsStorageDeletionPolicy `json:"deletionPolicy,omitempty"`
}

// HistoryServerOptions configures the Ray history server.
type HistoryServerOptions struct {
	// CollectorOptions configures the collector sidecar.
	// +optional
	CollectorOptions *CollectorOptions `json:"collectorOptions,omitempty"`
}

// CollectorOptions configures the history server collector container.
type CollectorOptions struct {
	// +optional
	Image string `json:"image,omitempty"`
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
}

// NetworkPolicyMode says which traffic the generated NetworkPolicies deny.
// +kubebuilder:validation:Enum=DenyAll;DenyAllIngress;DenyAllEgress
type NetworkPolicyMode string

const (
	NetworkPolicyDenyAll        NetworkPolicyMode = "DenyAll"
	NetworkPolicyDenyAllIngress NetworkPolicyMode = "DenyAllIngress"
	NetworkPolicyDenyAllEgress  NetworkPolicyMode = "DenyAllEgress"
)

// NetworkPolicyConfig isolates a cluster's pods.
type NetworkPolicyConfig struct {
	// Mode is DenyAll (default), DenyAllIngress or DenyAllEgress.
	// +kubebuilder:default=DenyAll
	// +optional
	Mode NetworkPolicyMode `json:"mode,omitempty"`
	// Head are extra rules for the head pod.
	// +optional
	Head *NetworkPolicyRules `json:"head,omitempty"`
	// Worker are extra rules for every worker pod.
	// +optional
	Worker *NetworkPolicyRules `json:"worker,omitempty"`
	// WorkerGroups are extra rules for the pods of one worker group.
	// +listType=map
	// +listMapKey=groupName
	// +optional
	WorkerGroups []WorkerGroupNetworkPolicyRules `json:"workerGroups,omitempty"`
}

// NetworkPolicyRules are extra allowed traffic.
type NetworkPolicyRules struct {
	// +optional
	IngressRules []networkingv1.NetworkPolicyIngressRule `json:"ingressRules,omitempty"`
	// +optional
	EgressRules []networkingv1.NetworkPolicyEgressRule `json:"egressRules,omitempty"`
}

// WorkerGroupNetworkPolicyRules are extra allowed traffic for one worker group.
type WorkerGroupNetworkPolicyRules struct {
	// GroupName names the worker group.
	GroupName string `json:"groupName"`
	// +optional
	IngressRules []networkingv1.NetworkPolicyIngressRule `json:"ingressRules,omitempty"`
	// +optional
	EgressRules []networkingv1.NetworkPolicyEgressRule `json:"egressRules,omitempty"`
}

// UpscalingMode is the Ray autoscaler's upscaling speed.
// +kubebuilder:validation:Enum=Default;Aggressive;Conservative
type UpscalingMode string

const (
	UpscalingModeDefault      UpscalingMode = "Default"
	UpscalingModeAggressive   UpscalingMode = "Aggressive"
	UpscalingModeConservative UpscalingMode = "Conservative"
)

// AutoscalerVersion is the Ray autoscaler version.
// +kubebuilder:validation:Enum=v1;v2
type AutoscalerVersion string

const (
	AutoscalerVersionV1 AutoscalerVersion = "v1"
	AutoscalerVersionV2 AutoscalerVersion = "v2"
)

// AutoscalerOptions configures the Ray autoscaler sidecar container.
type AutoscalerOptions struct {
	// Resources of the autoscaler container (500m CPU, 512Mi memory when unset).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// Image of the autoscaler container (the head container's image when unset).
	// +optional
	Image *string `json:"image,omitempty"`
	// +optional
	ImagePullPolicy *corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// +optional
	SecurityContext *corev1.SecurityContext `json:"securityContext,omitempty"`
	// IdleTimeoutSeconds is how long a worker may idle before the autoscaler removes it (60 when unset).
	// +optional
	IdleTimeoutSeconds *int32 `json:"idleTimeoutSeconds,omitempty"`
	// UpscalingMode is Default, Aggressive or Conservative.
	// +optional
	UpscalingMode *UpscalingMode `json:"upscalingMode,omitempty"`
	// Version is v1 or v2; unset means the Ray version decides.
	// +optional
	Version *AutoscalerVersion `json:"version,omitempty"`
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
	// +optional
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`
	// +optional
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`
	// +optional
	Command []string `json:"command,omitempty"`
	// +optional
	Args []string `json:"args,omitempty"`
}

// HeadGroupSpec is the spec of the head pod and its Service.
// The head Service's name becomes a host name and an API server path segment where clients reach the dashboard, so
// it must be a DNS-1035 label, as Kubernetes requires of Service names; refused here, before any client builds a URL
// from it.
// +kubebuilder:validation:XValidation:rule="!has(self.headService) || !has(self.headService.metadata) || !has(self.headService.metadata.name) || size(self.headService.metadata.name) == 0 || (size(self.headService.metadata.name) <= 63 && self.headService.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$'))",message="headGroupSpec.headService.metadata.name must be a DNS-1035 label: at most 63 lower-case letters, digits or '-', starting with a letter and ending with a letter or digit",fieldPath=".headService.metadata.name"
type HeadGroupSpec struct {
	// Template is the head pod's template.
	Template corev1.PodTemplateSpec `json:"template"`
	// HeadService overrides parts of the head Service.
	// +optional
	HeadService *corev1.Service `json:"headService,omitempty"`
	// EnableIngress creates an Ingress for the dashboard.
	// +optional
	EnableIngress *bool `json:"enableIngress,omitempty"`
	// IngressOptions configures that Ingress.
	// +optional
	IngressOptions *IngressOptions `json:"ingressOptions,omitempty"`
	// Resources overrides the resources Ray advertises for the head (--resources).
	// +optional
	Resources map[string]string `json:"resources,omitempty"`
	// Labels are Ray node labels of the head (--labels).
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// RayStartParams are extra `ray start` parameters.
	// +optional
	RayStartParams map[string]string `json:"rayStartParams,omitempty"`
	// ServiceType is the type of the head Service.
	// +optional
	ServiceType corev1.ServiceType `json:"serviceType,omitempty"`
}

// IngressOptions configures the dashboard Ingress.
type IngressOptions struct {
	// +optional
	Host *string `json:"host,omitempty"`
	// Path of the Ingress rule ("/" when unset).
	// +optional
	Path *string `json:"path,omitempty"`
	// PathType of the Ingress rule (Prefix when unset).
	// +kubebuilder:validation:Enum=Exact;Prefix;ImplementationSpecific
	// +optional
	PathType *networkingv1.PathType `json:"pathType,omitempty"`
	// +optional
	TLS []networkingv1.IngressTLS `json:"tls,omitempty"`
}

// WorkerGroupSpec is the spec of one group of identical worker pods.
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",message="minReplicas must be less than or equal to maxReplicas",fieldPath=".minReplicas"
type WorkerGroupSpec struct {
	// Suspend deletes the group's pods while true (for RayJob deletion rules; not with autoscaling).
	// +optional
	Suspend *bool `json:"suspend,omitempty"`
	// GroupName is unique within the cluster.
	GroupName string `json:"groupName"`
	// Replicas is the desired number of replicas (of numOfHosts pods each), clamped to [minReplicas, maxReplicas].
	// +kubebuilder:default:=0
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// MinReplicas is the lower bound for the autoscaler.
	// +kubebuilder:default:=0
	// +kubebuilder:validation:Minimum=0
	MinReplicas *int32 `json:"minReplicas"`
	// MaxReplicas is the upper bound for the autoscaler.
	// +kubebuilder:default:=2147483647
	// +kubebuilder:validation:Minimum=0
	MaxReplicas *int32 `json:"maxReplicas"`
	// IdleTimeoutSeconds overrides the autoscaler's idle timeout for this group (autoscaler v2).
	// +optional
	IdleTimeoutSeconds *int32 `json:"idleTimeoutSeconds,omitempty"`
	// Priority orders groups for the autoscaler (autoscaler v2).
	// +kubebuilder:default:=0
	// +optional
	Priority *int32 `json:"priority,omitempty"`
	// Resources overrides the resources Ray advertises for these workers (--resources).
	// +optional
	Resources map[string]string `json:"resources,omitempty"`
	// Labels are Ray node labels of these workers (--labels).
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// RayStartParams are extra `ray start` parameters.
	// +optional
	RayStartParams map[string]string `json:"rayStartParams,omitempty"`
	// Template is the worker pods' template.
	Template corev1.PodTemplateSpec `json:"template"`
	// ScaleStrategy names pods to delete when scaling down.
	// +optional
	ScaleStrategy ScaleStrategy `json:"scaleStrategy,omitempty"`
	// NumOfHosts is the number of pods per replica (multi-host TPU slices).
	// +kubebuilder:default:=1
	// +optional
	NumOfHosts int32 `json:"numOfHosts,omitempty"`
}

// ScaleStrategy names the worker pods to delete first.
type ScaleStrategy struct {
	// +optional
	WorkersToDelete []string `json:"workersToDelete,omitempty"`
}

// ClusterState is the deprecated summary state of a RayCluster (use conditions).
type ClusterState string

const (
	Ready     ClusterState = "ready"
	Suspended ClusterState = "suspended"
	// Failed is deprecated: the operator no longer sets it.
	Failed ClusterState = "failed"
)

// RayClusterConditionType is a condition type in RayClusterStatus.Conditions.
type RayClusterConditionType string

const (
	// RayClusterProvisioned is true once all the pods have been Running and Ready at least once.
	RayClusterProvisioned RayClusterConditionType = "RayClusterProvisioned"
	// HeadPodReady says whether the head pod is Running and Ready.
	HeadPodReady RayClusterConditionType = "HeadPodReady"
	// RayClusterReplicaFailure is true when creating or deleting a pod failed.
	RayClusterReplicaFailure RayClusterConditionType = "ReplicaFailure"
	// RayClusterSuspending is true while the pods of a suspended cluster are being deleted.
	RayClusterSuspending RayClusterConditionType = "RayClusterSuspending"
	// RayClusterSuspended is true when a suspended cluster has no pods left.
	RayClusterSuspended RayClusterConditionType = "RayClusterSuspended"
)

// Reasons of RayCluster conditions.
const (
	AllPodRunningAndReadyFirstTime = "AllPodRunningAndReadyFirstTime"
	RayClusterPodsProvisioning     = "RayClusterPodsProvisioning"
	HeadPodNotFound                = "HeadPodNotFound"
	HeadPodRunningAndReady         = "HeadPodRunningAndReady"
	FailedDeleteAllPods            = "FailedDeleteAllPods"
	FailedDeleteHeadPod            = "FailedDeleteHeadPod"
	FailedCreateHeadPod            = "FailedCreateHeadPod"
	FailedDeleteWorkerPod          = "FailedDeleteWorkerPod"
	FailedCreateWorkerPod          = "FailedCreateWorkerPod"
)

// RayClusterStatus is the observed state of a RayCluster.
type RayClusterStatus struct {
	// State is deprecated: use Conditions.
	// +optional
	State ClusterState `json:"state,omitempty"`
	// DesiredCPU is the sum of the CPU requests of the desired pods.
	// +optional
	DesiredCPU resource.Quantity `json:"desiredCPU,omitempty"`
	// DesiredMemory is the sum of the memory requests of the desired pods.
	// +optional
	DesiredMemory resource.Quantity `json:"desiredMemory,omitempty"`
	// DesiredGPU is the sum of the GPU requests of the desired pods.
	// +optional
	DesiredGPU resource.Quantity `json:"desiredGPU,omitempty"`
	// DesiredTPU is the sum of the TPU requests of the desired pods.
	// +optional
	DesiredTPU resource.Quantity `json:"desiredTPU,omitempty"`
	// LastUpdateTime is when the status was last written.
	// +nullable
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`
	// StateTransitionTimes records when the cluster entered each state.
	// +optional
	StateTransitionTimes map[ClusterState]*metav1.Time `json:"stateTransitionTimes,omitempty"`
	// Endpoints maps head Service port names to ports.
	// +optional
	Endpoints map[string]string `json:"endpoints,omitempty"`
	// Head is where the head pod and Service are.
	// +optional
	Head HeadInfo `json:"head,omitempty"`
	// Reason explains the state.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Conditions of the cluster.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ReadyWorkerReplicas is the number of worker pods that are Running and Ready.
	// +optional
	ReadyWorkerReplicas int32 `json:"readyWorkerReplicas,omitempty"`
	// AvailableWorkerReplicas is the number of worker pods that are Running.
	// +optional
	AvailableWorkerReplicas int32 `json:"availableWorkerReplicas,omitempty"`
	// DesiredWorkerReplicas is the number of worker pods wanted.
	// +optional
	DesiredWorkerReplicas int32 `json:"desiredWorkerReplicas,omitempty"`
	// MinWorkerReplicas is the sum of minReplicas x numOfHosts.
	// +optional
	MinWorkerReplicas int32 `json:"minWorkerReplicas,omitempty"`
	// MaxWorkerReplicas is the sum of maxReplicas x numOfHosts.
	// +optional
	MaxWorkerReplicas int32 `json:"maxWorkerReplicas,omitempty"`
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// HeadInfo says where the head pod and Service are.
type HeadInfo struct {
	// +optional
	PodIP string `json:"podIP,omitempty"`
	// ServiceIP is the head Service's cluster IP (the head pod IP when the Service is headless).
	// +optional
	ServiceIP string `json:"serviceIP,omitempty"`
	// +optional
	PodName string `json:"podName,omitempty"`
	// +optional
	ServiceName string `json:"serviceName,omitempty"`
}

// RayCluster is a Ray cluster: a head pod and groups of worker pods.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=all
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="desired workers",type=integer,JSONPath=".status.desiredWorkerReplicas",priority=0
// +kubebuilder:printcolumn:name="available workers",type=integer,JSONPath=".status.availableWorkerReplicas",priority=0
// +kubebuilder:printcolumn:name="cpus",type=string,JSONPath=".status.desiredCPU",priority=0
// +kubebuilder:printcolumn:name="memory",type=string,JSONPath=".status.desiredMemory",priority=0
// +kubebuilder:printcolumn:name="gpus",type=string,JSONPath=".status.desiredGPU",priority=0
// +kubebuilder:printcolumn:name="tpus",type=string,JSONPath=".status.desiredTPU",priority=1
// +kubebuilder:printcolumn:name="status",type="string",JSONPath=".status.state",priority=0
// +kubebuilder:printcolumn:name="age",type="date",JSONPath=".metadata.creationTimestamp",priority=0
// +kubebuilder:printcolumn:name="head pod IP",type="string",JSONPath=".status.head.podIP",priority=1
// +kubebuilder:printcolumn:name="head service IP",type="string",JSONPath=".status.head.serviceIP",priority=1
// +genclient
type RayCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec RayClusterSpec `json:"spec,omitempty"`
	// +optional
	Status RayClusterStatus `json:"status,omitempty"`
}

// RayClusterList is a list of RayClusters.
// +kubebuilder:object:root=true
type RayClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RayCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RayCluster{}, &RayClusterList{})
}
