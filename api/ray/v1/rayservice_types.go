package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RayServiceUpgradeType says how a RayService moves to a new cluster spec.
// +kubebuilder:validation:Enum=NewCluster;NewClusterWithIncrementalUpgrade;None
type RayServiceUpgradeType string

const (
	// NewCluster creates a new cluster, then switches all traffic to it (zero-downtime upgrade).
	NewCluster RayServiceUpgradeType = "NewCluster"
	// NewClusterWithIncrementalUpgrade moves traffic step by step through the Gateway API.
	NewClusterWithIncrementalUpgrade RayServiceUpgradeType = "NewClusterWithIncrementalUpgrade"
	// RayServiceUpgradeNone never creates a new cluster for a spec change.
	RayServiceUpgradeNone RayServiceUpgradeType = "None"
)

// RayServiceUpgradeStrategy is the upgrade strategy of a RayService.
type RayServiceUpgradeStrategy struct {
	// Type is NewCluster (default), NewClusterWithIncrementalUpgrade or None.
	// +optional
	Type *RayServiceUpgradeType `json:"type,omitempty"`
	// ClusterUpgradeOptions configures NewClusterWithIncrementalUpgrade.
	// +optional
	ClusterUpgradeOptions *ClusterUpgradeOptions `json:"clusterUpgradeOptions,omitempty"`
}

// ClusterUpgradeOptions configures an incremental upgrade.
type ClusterUpgradeOptions struct {
	// MaxSurgePercent is the capacity the new cluster may add per step, in percent.
	// +kubebuilder:default:=100
	// +optional
	MaxSurgePercent *int32 `json:"maxSurgePercent,omitempty"`
	// StepSizePercent is the traffic moved per step, in percent.
	StepSizePercent *int32 `json:"stepSizePercent"`
	// IntervalSeconds is the time between steps.
	IntervalSeconds *int32 `json:"intervalSeconds"`
	// GatewayClassName is the Gateway API class of the Gateway the operator creates.
	GatewayClassName string `json:"gatewayClassName"`
}

// RayServiceSpec is the desired state of a RayService.
// +kubebuilder:validation:XValidation:rule="!has(self.rayClusterConfig) || !has(self.rayClusterConfig.upgradeStrategy)",message="upgradeStrategy cannot be set on a RayCluster owned by a RayService",fieldPath=".rayClusterConfig.upgradeStrategy"
// +kubebuilder:validation:XValidation:rule="has(self.managedBy) == has(oldSelf.managedBy)",message="the managedBy field is immutable",fieldPath=".managedBy"
type RayServiceSpec struct {
	// RayClusterDeletionDelaySeconds is how long an old cluster lives after traffic left it (60 when unset).
	// +kubebuilder:validation:Minimum=0
	// +optional
	RayClusterDeletionDelaySeconds *int32 `json:"rayClusterDeletionDelaySeconds,omitempty"`
	// Deprecated: unused.
	// +optional
	ServiceUnhealthySecondThreshold *int32 `json:"serviceUnhealthySecondThreshold,omitempty"`
	// Deprecated: unused.
	// +optional
	DeploymentUnhealthySecondThreshold *int32 `json:"deploymentUnhealthySecondThreshold,omitempty"`
	// ServeService overrides parts of the Serve Service.
	// +optional
	ServeService *corev1.Service `json:"serveService,omitempty"`
	// UpgradeStrategy says how the service moves to a new cluster spec.
	// +optional
	UpgradeStrategy *RayServiceUpgradeStrategy `json:"upgradeStrategy,omitempty"`
	// ManagedBy names the controller that reconciles this object; see RayClusterSpec.ManagedBy.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="the managedBy field is immutable"
	// +kubebuilder:validation:XValidation:rule="self in ['ray.io/kuberay-operator', 'kueue.x-k8s.io/multikueue']",message="the managedBy field value must be either 'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue'"
	// +optional
	ManagedBy *string `json:"managedBy,omitempty"`
	// ServeConfigV2 is the Ray Serve config, as YAML.
	// +optional
	ServeConfigV2 string `json:"serveConfigV2,omitempty"`
	// RayClusterConfig is the spec of the service's cluster.
	RayClusterSpec RayClusterSpec `json:"rayClusterConfig"`
	// ExcludeHeadPodFromServeSvc keeps the head pod out of the Serve Service.
	// +optional
	ExcludeHeadPodFromServeSvc bool `json:"excludeHeadPodFromServeSvc,omitempty"`
	// Suspend deletes the service's clusters while true.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// ServiceStatus is the deprecated summary status of a RayService.
type ServiceStatus string

const (
	// Running means the service is ready (deprecated: use the Ready condition).
	Running ServiceStatus = "Running"
)

// RayServiceConditionType is a condition type in RayServiceStatuses.Conditions.
type RayServiceConditionType string

const (
	// RayServiceReady is true when the Serve Service has endpoints.
	RayServiceReady RayServiceConditionType = "Ready"
	// UpgradeInProgress is true while a pending cluster is being prepared.
	UpgradeInProgress RayServiceConditionType = "UpgradeInProgress"
	// RollbackInProgress is true while an incremental upgrade is rolled back.
	RollbackInProgress RayServiceConditionType = "RollbackInProgress"
	// RayServiceSuspending is true while a suspended service's clusters are being deleted.
	RayServiceSuspending RayServiceConditionType = "Suspending"
	// RayServiceSuspended is true when a suspended service has no clusters.
	RayServiceSuspended RayServiceConditionType = "Suspended"
)

// RayServiceConditionReason is a reason of a RayService condition.
type RayServiceConditionReason string

const (
	RayServiceInitializing         RayServiceConditionReason = "Initializing"
	RayServiceInitializingTimeout  RayServiceConditionReason = "InitializingTimeout"
	ZeroServeEndpoints             RayServiceConditionReason = "ZeroServeEndpoints"
	NonZeroServeEndpoints          RayServiceConditionReason = "NonZeroServeEndpoints"
	BothActivePendingClustersExist RayServiceConditionReason = "BothActivePendingClustersExist"
	NoPendingCluster               RayServiceConditionReason = "NoPendingCluster"
	NoActiveCluster                RayServiceConditionReason = "NoActiveCluster"
	RayServiceValidationFailed     RayServiceConditionReason = "ValidationFailed"
	DesiredClusterSpecChanged      RayServiceConditionReason = "DesiredClusterSpecChanged"
	RayServiceSuspendRequested     RayServiceConditionReason = "SuspendRequested"
	RayServiceSuspendInProgress    RayServiceConditionReason = "SuspendInProgress"
	RayServiceSuspendComplete      RayServiceConditionReason = "SuspendComplete"
	RayServiceResumed              RayServiceConditionReason = "RayServiceResumed"
)

// Serve application statuses, as Ray Serve reports them.
const (
	ApplicationStatusNotStarted   = "NOT_STARTED"
	ApplicationStatusDeploying    = "DEPLOYING"
	ApplicationStatusRunning      = "RUNNING"
	ApplicationStatusDeployFailed = "DEPLOY_FAILED"
	ApplicationStatusDeleting     = "DELETING"
	ApplicationStatusUnhealthy    = "UNHEALTHY"
)

// Serve deployment statuses, as Ray Serve reports them.
const (
	DeploymentStatusUpdating  = "UPDATING"
	DeploymentStatusHealthy   = "HEALTHY"
	DeploymentStatusUnhealthy = "UNHEALTHY"
)

// RayServiceStatuses is the observed state of a RayService.
type RayServiceStatuses struct {
	// Conditions of the service.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastUpdateTime is when the status was last written.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`
	// ServiceStatus is deprecated: use Conditions.
	// +optional
	ServiceStatus ServiceStatus `json:"serviceStatus,omitempty"`
	// ActiveServiceStatus is the status of the cluster serving traffic.
	// +optional
	ActiveServiceStatus RayServiceStatus `json:"activeServiceStatus,omitempty"`
	// PendingServiceStatus is the status of the cluster being prepared by an upgrade.
	// +optional
	PendingServiceStatus RayServiceStatus `json:"pendingServiceStatus,omitempty"`
	// NumServeEndpoints is the number of endpoints of the Serve Service.
	// +optional
	NumServeEndpoints int32 `json:"numServeEndpoints,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// RayServiceStatus is the status of one of a RayService's clusters.
type RayServiceStatus struct {
	// ApplicationStatuses maps Serve application names to their status.
	// +optional
	Applications map[string]AppStatus `json:"applicationStatuses,omitempty"`
	// TargetCapacity is the Serve target capacity in percent (incremental upgrade).
	// +optional
	TargetCapacity *int32 `json:"targetCapacity,omitempty"`
	// TrafficRoutedPercent is the share of traffic sent to this cluster (incremental upgrade).
	// +optional
	TrafficRoutedPercent *int32 `json:"trafficRoutedPercent,omitempty"`
	// LastTrafficMigratedTime is when traffic last moved (incremental upgrade).
	// +optional
	LastTrafficMigratedTime *metav1.Time `json:"lastTrafficMigratedTime,omitempty"`
	// +optional
	RayClusterName string `json:"rayClusterName,omitempty"`
	// +optional
	RayClusterStatus RayClusterStatus `json:"rayClusterStatus,omitempty"`
}

// AppStatus is the status of a Serve application.
type AppStatus struct {
	// +optional
	Deployments map[string]ServeDeploymentStatus `json:"serveDeploymentStatuses,omitempty"`
	// +optional
	Status string `json:"status,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// ServeDeploymentStatus is the status of a Serve deployment.
type ServeDeploymentStatus struct {
	// +optional
	Status string `json:"status,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// RayService serves Ray Serve applications with zero-downtime upgrades of the cluster.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=all
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="service status",type=string,JSONPath=".status.serviceStatus",priority=0
// +kubebuilder:printcolumn:name="num serve endpoints",type=string,JSONPath=".status.numServeEndpoints",priority=0
// +genclient
type RayService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec RayServiceSpec `json:"spec,omitempty"`
	// +optional
	Status RayServiceStatuses `json:"status,omitempty"`
}

// RayServiceList is a list of RayServices.
// +kubebuilder:object:root=true
type RayServiceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RayService `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RayService{}, &RayServiceList{})
}
