package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImagePullPolicy says when a selected node pulls the image.
// +kubebuilder:validation:Enum=Always;IfNotPresent
type ImagePullPolicy string

const (
	// PullAlways pulls onto every selected node, even when the node reports the image.
	PullAlways ImagePullPolicy = "Always"
	// PullIfNotPresent counts a node that lists the image in status.images as succeeded without pulling.
	PullIfNotPresent ImagePullPolicy = "IfNotPresent"
)

// CompletionPolicyType says whether a job finishes.
// +kubebuilder:validation:Enum=Always;Never
type CompletionPolicyType string

const (
	// CompleteAlways finishes the job once every selected node is done, or when activeDeadlineSeconds passes.
	CompleteAlways CompletionPolicyType = "Always"
	// CompleteNever keeps the job active: nodes that match later are pulled too.
	CompleteNever CompletionPolicyType = "Never"
)

// Defaults applied by the CRD schema; the controller uses the same values when a field is missing.
const (
	DefaultParallelism    int32 = 1
	DefaultTimeoutSeconds int32 = 600
	DefaultBackoffLimit   int32 = 3
)

// ImagePullJobSpec describes which image to pull onto which nodes, and how.
// +kubebuilder:validation:XValidation:rule="!(has(self.selector) && has(self.podSelector))",message="spec.selector and spec.podSelector are mutually exclusive"
// +kubebuilder:validation:XValidation:rule="!has(self.completionPolicy) || !has(self.completionPolicy.activeDeadlineSeconds) || self.completionPolicy.activeDeadlineSeconds >= (has(self.pullPolicy) && has(self.pullPolicy.timeoutSeconds) ? self.pullPolicy.timeoutSeconds : 600)",message="spec.completionPolicy.activeDeadlineSeconds must be greater than or equal to spec.pullPolicy.timeoutSeconds"
type ImagePullJobSpec struct {
	// Image is the image reference to pull, e.g. rayproject/ray:2.9.0 or registry.example.com/team/app@sha256:....
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^(([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])([.]([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(:[0-9]+)?/)?[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*)*(:[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$')",message="spec.image must be a valid image reference such as registry.example.com/repo/name:tag"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.image is immutable"
	Image string `json:"image"`

	// ImagePullPolicy is Always (every selected node pulls) or IfNotPresent (nodes that report the image in
	// status.images are done without a pod).
	// +kubebuilder:default=IfNotPresent
	// +optional
	ImagePullPolicy ImagePullPolicy `json:"imagePullPolicy,omitempty"`

	// PullSecrets are names of secrets of type kubernetes.io/dockerconfigjson in the job's namespace.
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	PullSecrets []string `json:"pullSecrets,omitempty"`

	// Selector picks nodes by name or by label. Unset means every node.
	// +optional
	Selector *ImagePullJobNodeSelector `json:"selector,omitempty"`

	// PodSelector picks the nodes where pods of the job's namespace matching this selector run.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`

	// Parallelism is the most nodes pulling at once. 0 pauses the job.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	Parallelism *int32 `json:"parallelism,omitempty"`

	// PullPolicy bounds the pull on each node.
	// +kubebuilder:default={}
	// +optional
	PullPolicy *PullPolicy `json:"pullPolicy,omitempty"`

	// CompletionPolicy says when the job finishes.
	// +kubebuilder:default={}
	// +optional
	CompletionPolicy CompletionPolicy `json:"completionPolicy,omitempty"`

	// Tolerations narrow the taints puller pods tolerate: nodes with a NoSchedule or NoExecute taint that these
	// tolerations do not tolerate are not selected. Unset means every taint the operator allows. The operator bounds
	// them (--image-pull-tolerate-all-taints, --image-pull-tolerations): by default pullers tolerate no taint.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// PriorityClassName is not used: puller pods get the operator's --image-pull-priority-class, or none, so that
	// a namespace user cannot give them a class meant for system pods. Kept for compatibility; a value other than
	// the operator's class is reported in the PriorityClassNotUsed condition and a Warning event.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// Resources of the puller pods' containers. Unset means 10m CPU and 16Mi memory requested, 50m/64Mi limits.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// ImagePullJobNodeSelector picks nodes by name or by label, not both.
// +kubebuilder:validation:XValidation:rule="!(has(self.names) && size(self.names) > 0 && (has(self.matchLabels) || has(self.matchExpressions)))",message="spec.selector.names and a label selector (spec.selector.matchLabels, spec.selector.matchExpressions) are mutually exclusive"
type ImagePullJobNodeSelector struct {
	// Names of the nodes to pull onto.
	// +listType=set
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	Names []string `json:"names,omitempty"`

	metav1.LabelSelector `json:",inline"`
}

// PullPolicy bounds one node's pull.
type PullPolicy struct {
	// TimeoutSeconds bounds one attempt on a node.
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=1
	// +optional
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`

	// BackoffLimit is how many times a failed attempt is retried on a node before the node is listed in
	// status.failedNodes.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`
}

// CompletionPolicy says when a job finishes.
// +kubebuilder:validation:XValidation:rule="self.type == 'Always' || !has(self.activeDeadlineSeconds)",message="spec.completionPolicy.activeDeadlineSeconds can only be set when spec.completionPolicy.type is Always"
// +kubebuilder:validation:XValidation:rule="self.type == 'Always' || !has(self.ttlSecondsAfterFinished)",message="spec.completionPolicy.ttlSecondsAfterFinished can only be set when spec.completionPolicy.type is Always"
type CompletionPolicy struct {
	// Type is Always (finish when every node is done) or Never (stay active, pull onto nodes that join later).
	// +kubebuilder:default=Always
	// +optional
	Type CompletionPolicyType `json:"type,omitempty"`

	// ActiveDeadlineSeconds bounds the whole job from its start; nodes not done by then fail. Only with type Always,
	// and not shorter than pullPolicy.timeoutSeconds.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// TTLSecondsAfterFinished deletes the job this long after it completes. Only with type Always.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// FailedNode is a node where the image could not be pulled.
type FailedNode struct {
	// Name of the node.
	Name string `json:"name"`
	// Reason is a CamelCase word: ImageNotFound, Unauthorized, ErrImagePull, Timeout, DeadlineExceeded, ...
	Reason string `json:"reason"`
	// Message is the last error reported for the node, shortened.
	// +optional
	Message string `json:"message,omitempty"`
	// Attempts is how many puller pods ran on the node.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
}

// RetryingNode is a node whose last attempt failed and that gets another one. The failed attempt is recorded here
// before its puller pod is deleted, and the next attempt starts only once that pod is gone, so a node never has two
// puller pods and the attempt count survives the pods.
type RetryingNode struct {
	// Name of the node.
	Name string `json:"name"`
	// Attempts is how many attempts failed on the node so far; the next puller pod is attempt attempts+1.
	// +kubebuilder:validation:Minimum=1
	Attempts int32 `json:"attempts"`
	// Reason of the last failed attempt: ImageNotFound, Unauthorized, ErrImagePull, Timeout, ...
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is the last error reported for the node, shortened.
	// +optional
	Message string `json:"message,omitempty"`
	// NextAttemptAfter is the earliest time the next attempt may start (the retry backoff).
	NextAttemptAfter metav1.Time `json:"nextAttemptAfter"`
}

// ImagePullJobStatus is the observed state of an ImagePullJob.
type ImagePullJobStatus struct {
	// ObservedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// StartTime is when the controller first worked on the job.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// CompletionTime is when the job finished; unset while active.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// Desired is the number of nodes the image is pulled onto.
	Desired int32 `json:"desired"`
	// Active is the number of nodes pulling now.
	Active int32 `json:"active"`
	// Succeeded is the number of nodes that have the image.
	Succeeded int32 `json:"succeeded"`
	// Failed is the number of nodes where the pull failed.
	Failed int32 `json:"failed"`

	// Message summarizes progress: "job is running, progress 40.0%", "job has completed", ...
	// +optional
	Message string `json:"message,omitempty"`

	// FailedNodes lists the nodes where the pull failed, with the reason.
	// +listType=map
	// +listMapKey=name
	// +optional
	FailedNodes []FailedNode `json:"failedNodes,omitempty"`

	// RetryingNodes lists the nodes whose last attempt failed and that wait for their next attempt. A node leaves the
	// list when it succeeds or is listed in failedNodes.
	// +listType=map
	// +listMapKey=name
	// +optional
	RetryingNodes []RetryingNode `json:"retryingNodes,omitempty"`

	// SucceededNodes lists the nodes that have the image, so they are not pulled again while the job runs.
	// +listType=set
	// +optional
	SucceededNodes []string `json:"succeededNodes,omitempty"`

	// Conditions: Complete (True once the job finished; reason Completed or DeadlineExceeded).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ImagePullJob pre-pulls an image onto a set of nodes with short-lived puller pods.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ipj,categories=manta
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.desired`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.active`
// +kubebuilder:printcolumn:name="Succeed",type=integer,JSONPath=`.status.succeeded`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failed`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`
type ImagePullJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ImagePullJobSpec   `json:"spec"`
	Status ImagePullJobStatus `json:"status,omitempty"`
}

// ImagePullJobList is a list of ImagePullJobs.
// +kubebuilder:object:root=true
type ImagePullJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImagePullJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ImagePullJob{}, &ImagePullJobList{})
}
