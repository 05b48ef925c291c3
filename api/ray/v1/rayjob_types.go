package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// JobStatus is the status of the Ray job as the Ray Jobs API reports it.
type JobStatus string

const (
	JobStatusNew       JobStatus = ""
	JobStatusPending   JobStatus = "PENDING"
	JobStatusRunning   JobStatus = "RUNNING"
	JobStatusStopped   JobStatus = "STOPPED"
	JobStatusSucceeded JobStatus = "SUCCEEDED"
	JobStatusFailed    JobStatus = "FAILED"
)

// IsJobTerminal reports whether a Ray job in this status can no longer change.
func IsJobTerminal(status JobStatus) bool {
	return status == JobStatusStopped || status == JobStatusSucceeded || status == JobStatusFailed
}

// JobDeploymentStatus is the operator's view of a RayJob's lifecycle.
type JobDeploymentStatus string

const (
	JobDeploymentStatusNew              JobDeploymentStatus = ""
	JobDeploymentStatusInitializing     JobDeploymentStatus = "Initializing"
	JobDeploymentStatusRunning          JobDeploymentStatus = "Running"
	JobDeploymentStatusComplete         JobDeploymentStatus = "Complete"
	JobDeploymentStatusFailed           JobDeploymentStatus = "Failed"
	JobDeploymentStatusValidationFailed JobDeploymentStatus = "ValidationFailed"
	JobDeploymentStatusSuspending       JobDeploymentStatus = "Suspending"
	JobDeploymentStatusSuspended        JobDeploymentStatus = "Suspended"
	JobDeploymentStatusRetrying         JobDeploymentStatus = "Retrying"
	JobDeploymentStatusWaiting          JobDeploymentStatus = "Waiting"
)

// IsJobDeploymentTerminal reports whether a RayJob in this deployment status is finished.
func IsJobDeploymentTerminal(status JobDeploymentStatus) bool {
	return status == JobDeploymentStatusComplete || status == JobDeploymentStatusFailed
}

// JobFailedReason says why a RayJob failed (status.reason).
type JobFailedReason string

const (
	SubmissionFailed                                 JobFailedReason = "SubmissionFailed"
	DeadlineExceeded                                 JobFailedReason = "DeadlineExceeded"
	PreRunningDeadlineExceeded                       JobFailedReason = "PreRunningDeadlineExceeded"
	AppFailed                                        JobFailedReason = "AppFailed"
	JobDeploymentStatusTransitionGracePeriodExceeded JobFailedReason = "JobDeploymentStatusTransitionGracePeriodExceeded"
	JobStatusCheckTimeoutExceeded                    JobFailedReason = "JobStatusCheckTimeoutExceeded"
	ValidationFailed                                 JobFailedReason = "ValidationFailed"
)

// JobSubmissionMode says how the operator submits the Ray job.
// +kubebuilder:validation:Enum=K8sJobMode;HTTPMode;InteractiveMode;SidecarMode
type JobSubmissionMode string

const (
	// K8sJobMode submits with a Kubernetes Job running `ray job submit`.
	K8sJobMode JobSubmissionMode = "K8sJobMode"
	// HTTPMode submits with an HTTP request from the operator.
	HTTPMode JobSubmissionMode = "HTTPMode"
	// InteractiveMode waits for the user to submit and set spec.jobId.
	InteractiveMode JobSubmissionMode = "InteractiveMode"
	// SidecarMode submits from a sidecar container in the head pod.
	SidecarMode JobSubmissionMode = "SidecarMode"
)

// DeletionPolicyType says what to delete when a RayJob finishes.
type DeletionPolicyType string

const (
	DeleteCluster DeletionPolicyType = "DeleteCluster"
	DeleteWorkers DeletionPolicyType = "DeleteWorkers"
	DeleteSelf    DeletionPolicyType = "DeleteSelf"
	DeleteNone    DeletionPolicyType = "DeleteNone"
)

// DeletionStrategy says what to delete when a RayJob finishes: either onSuccess and onFailure, or deletionRules.
// +kubebuilder:validation:XValidation:rule="!((has(self.onSuccess) || has(self.onFailure)) && has(self.deletionRules))",message="legacy policies (onSuccess/onFailure) and deletionRules cannot be used together within the same deletionStrategy"
// +kubebuilder:validation:XValidation:rule="((has(self.onSuccess) && has(self.onFailure)) || has(self.deletionRules))",message="deletionStrategy requires either BOTH onSuccess and onFailure, OR the deletionRules field (cannot be empty)"
type DeletionStrategy struct {
	// OnSuccess is the policy when the job succeeds (legacy).
	// +optional
	OnSuccess *DeletionPolicy `json:"onSuccess,omitempty"`
	// OnFailure is the policy when the job fails (legacy).
	// +optional
	OnFailure *DeletionPolicy `json:"onFailure,omitempty"`
	// DeletionRules are applied in order once their condition holds and its TTL has passed.
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +optional
	DeletionRules []DeletionRule `json:"deletionRules,omitempty"`
}

// DeletionPolicy is a legacy deletion policy.
type DeletionPolicy struct {
	// +kubebuilder:validation:Enum=DeleteCluster;DeleteWorkers;DeleteSelf;DeleteNone
	// +optional
	Policy *DeletionPolicyType `json:"policy,omitempty"`
}

// DeletionRule deletes something once a condition has held for a while.
type DeletionRule struct {
	// +kubebuilder:validation:Enum=DeleteCluster;DeleteWorkers;DeleteSelf;DeleteNone
	Policy    DeletionPolicyType `json:"policy"`
	Condition DeletionCondition  `json:"condition"`
}

// DeletionCondition is a job status or job deployment status, plus a delay.
// +kubebuilder:validation:XValidation:rule="!(has(self.jobStatus) && has(self.jobDeploymentStatus))",message="JobStatus and JobDeploymentStatus cannot be used together within the same deletion condition."
// +kubebuilder:validation:XValidation:rule="has(self.jobStatus) || has(self.jobDeploymentStatus)",message="the deletion condition requires either the JobStatus or the JobDeploymentStatus field."
type DeletionCondition struct {
	// +kubebuilder:validation:Enum=SUCCEEDED;FAILED
	// +optional
	JobStatus *JobStatus `json:"jobStatus,omitempty"`
	// +kubebuilder:validation:Enum=Failed
	// +optional
	JobDeploymentStatus *JobDeploymentStatus `json:"jobDeploymentStatus,omitempty"`
	// TTLSeconds is how long to wait after the condition holds.
	// +kubebuilder:default:=0
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSeconds int32 `json:"ttlSeconds,omitempty"`
}

// SubmitterConfig configures the submitter Kubernetes Job.
type SubmitterConfig struct {
	// BackoffLimit of the submitter Job (2 when unset).
	// +optional
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`
}

// RayJobSpec is the desired state of a RayJob.
// +kubebuilder:validation:XValidation:rule="!has(self.rayClusterSpec) || !has(self.rayClusterSpec.upgradeStrategy)",message="upgradeStrategy cannot be set on a RayCluster owned by a RayJob",fieldPath=".rayClusterSpec.upgradeStrategy"
// +kubebuilder:validation:XValidation:rule="has(self.managedBy) == has(oldSelf.managedBy)",message="the managedBy field is immutable",fieldPath=".managedBy"
type RayJobSpec struct {
	// ActiveDeadlineSeconds bounds the job's running time; the RayJob fails after it.
	// +optional
	ActiveDeadlineSeconds *int32 `json:"activeDeadlineSeconds,omitempty"`
	// BackoffLimit is the number of retries, each with a new RayCluster.
	// +kubebuilder:default:=0
	// +optional
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`
	// RayClusterSpec is the cluster to create for the job (or use clusterSelector).
	// +optional
	RayClusterSpec *RayClusterSpec `json:"rayClusterSpec,omitempty"`
	// SubmitterPodTemplate is the pod template of the submitter Job (K8sJobMode).
	// +optional
	SubmitterPodTemplate *corev1.PodTemplateSpec `json:"submitterPodTemplate,omitempty"`
	// Metadata is passed to the Ray job.
	// +optional
	Metadata map[string]string `json:"metadata,omitempty"`
	// ClusterSelector selects an existing RayCluster (label ray.io/cluster) instead of creating one.
	// +optional
	ClusterSelector map[string]string `json:"clusterSelector,omitempty"`
	// SubmitterConfig configures the submitter Job.
	// +optional
	SubmitterConfig *SubmitterConfig `json:"submitterConfig,omitempty"`
	// ManagedBy names the controller that reconciles this object; see RayClusterSpec.ManagedBy.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="the managedBy field is immutable"
	// +kubebuilder:validation:XValidation:rule="self in ['ray.io/kuberay-operator', 'kueue.x-k8s.io/multikueue']",message="the managedBy field value must be either 'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue'"
	// +optional
	ManagedBy *string `json:"managedBy,omitempty"`
	// DeletionStrategy says what to delete when the job finishes.
	// +optional
	DeletionStrategy *DeletionStrategy `json:"deletionStrategy,omitempty"`
	// Entrypoint is the command of the Ray job.
	// +optional
	Entrypoint string `json:"entrypoint,omitempty"`
	// RuntimeEnvYAML is the Ray runtime environment, as YAML.
	// +optional
	RuntimeEnvYAML string `json:"runtimeEnvYAML,omitempty"`
	// JobId is the Ray submission ID (generated when unset).
	// +optional
	JobId string `json:"jobId,omitempty"` //nolint:revive // JSON name fixed by KubeRay
	// SubmissionMode is how the job is submitted.
	// +kubebuilder:default:=K8sJobMode
	// +optional
	SubmissionMode JobSubmissionMode `json:"submissionMode,omitempty"`
	// EntrypointResources are custom resources for the entrypoint, as a JSON object.
	// +optional
	EntrypointResources string `json:"entrypointResources,omitempty"`
	// EntrypointNumCpus is the number of CPUs reserved for the entrypoint.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=number
	// +optional
	EntrypointNumCpus float32 `json:"entrypointNumCpus,omitempty"`
	// EntrypointNumGpus is the number of GPUs reserved for the entrypoint.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=number
	// +optional
	EntrypointNumGpus float32 `json:"entrypointNumGpus,omitempty"`
	// TTLSecondsAfterFinished is how long to keep the cluster after the job finishes (needs shutdownAfterJobFinishes).
	// +kubebuilder:default:=0
	// +optional
	TTLSecondsAfterFinished int32 `json:"ttlSecondsAfterFinished,omitempty"`
	// PreRunningDeadlineSeconds bounds the time before the job runs.
	// +kubebuilder:validation:Minimum=1
	// +optional
	PreRunningDeadlineSeconds *int32 `json:"preRunningDeadlineSeconds,omitempty"`
	// ShutdownAfterJobFinishes deletes the cluster when the job finishes.
	// +optional
	ShutdownAfterJobFinishes bool `json:"shutdownAfterJobFinishes,omitempty"`
	// Suspend deletes the cluster and stops the job while true.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// RayJobStatusInfo holds times reported by Ray.
type RayJobStatusInfo struct {
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
}

// RayJobStatus is the observed state of a RayJob.
type RayJobStatus struct {
	// +optional
	RayJobStatusInfo RayJobStatusInfo `json:"rayJobInfo,omitempty"`
	// +optional
	JobId string `json:"jobId,omitempty"` //nolint:revive // JSON name fixed by KubeRay
	// +optional
	RayClusterName string `json:"rayClusterName,omitempty"`
	// +optional
	DashboardURL string `json:"dashboardURL,omitempty"`
	// +optional
	JobStatus JobStatus `json:"jobStatus,omitempty"`
	// +optional
	JobDeploymentStatus JobDeploymentStatus `json:"jobDeploymentStatus,omitempty"`
	// +optional
	Reason JobFailedReason `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// StartTime is when the RayJob started initializing.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// EndTime is when the RayJob reached a terminal deployment status.
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
	// Succeeded is the number of successful attempts.
	// +kubebuilder:default:=0
	// +optional
	Succeeded *int32 `json:"succeeded,omitempty"`
	// Failed is the number of failed attempts.
	// +kubebuilder:default:=0
	// +optional
	Failed *int32 `json:"failed,omitempty"`
	// RayClusterStatus is the status of the job's cluster.
	// +optional
	RayClusterStatus RayClusterStatus `json:"rayClusterStatus,omitempty"`
	// JobStatusCheckFailureStartTime is when querying the job status started failing.
	// +optional
	JobStatusCheckFailureStartTime *metav1.Time `json:"jobStatusCheckFailureStartTime,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// RayJob runs a Ray job on a new or an existing RayCluster.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=all
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="job status",type=string,JSONPath=".status.jobStatus",priority=0
// +kubebuilder:printcolumn:name="deployment status",type=string,JSONPath=".status.jobDeploymentStatus",priority=0
// +kubebuilder:printcolumn:name="ray cluster name",type=string,JSONPath=".status.rayClusterName",priority=0
// +kubebuilder:printcolumn:name="start time",type=string,JSONPath=".status.startTime",priority=0
// +kubebuilder:printcolumn:name="end time",type=string,JSONPath=".status.endTime",priority=0
// +kubebuilder:printcolumn:name="age",type="date",JSONPath=".metadata.creationTimestamp",priority=0
// +kubebuilder:validation:XValidation:rule="has(self.spec) && (has(self.spec.rayClusterSpec) || (has(self.spec.clusterSelector) && size(self.spec.clusterSelector) > 0))",message="spec.rayClusterSpec or spec.clusterSelector must be set"
// +genclient
type RayJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec RayJobSpec `json:"spec,omitempty"`
	// +optional
	Status RayJobStatus `json:"status,omitempty"`
}

// RayJobList is a list of RayJobs.
// +kubebuilder:object:root=true
type RayJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RayJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RayJob{}, &RayJobList{})
}
