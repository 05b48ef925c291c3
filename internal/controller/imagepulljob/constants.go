// Package imagepulljob implements the ImagePullJob controller: it pre-pulls an image onto nodes with one
// short-lived puller pod per (node, attempt), and the RayCluster prepull integration.
package imagepulljob

import "time"

const (
	// LabelImagePuller marks every puller pod; the controller's pod informer only holds pods with this label.
	LabelImagePuller = "manta.dev/image-puller"
	// LabelJobUID holds the UID of the ImagePullJob that owns a puller pod (job names may exceed 63 characters).
	LabelJobUID = "manta.dev/image-pull-job-uid"
	// AnnotationAttempt is the 1-based attempt number of a puller pod on its node.
	AnnotationAttempt = "manta.dev/attempt"
	// AnnotationPrepullImages on a RayCluster ("true") asks for its images to be pre-pulled.
	AnnotationPrepullImages = "manta.dev/prepull-images"
	// AnnotationPrepullParallelism on a RayCluster overrides the parallelism of its prepull jobs.
	AnnotationPrepullParallelism = "manta.dev/prepull-parallelism"
	// AnnotationPrepullImage on a prepull ImagePullJob records the image it was created for.
	AnnotationPrepullImage = "manta.dev/prepull-image"
	// LabelPrepullCluster on a prepull ImagePullJob names the RayCluster it belongs to (when the name fits a label).
	LabelPrepullCluster = "manta.dev/prepull-cluster"

	// PullerContainerName is the main container of a puller pod: it runs the target image.
	PullerContainerName = "puller"
	// InstallContainerName is the init container that copies the puller binary into the shared volume.
	InstallContainerName = "install-puller"
	pullerVolumeName     = "manta-puller"
	pullerMountPath      = "/manta-puller"
	pullerBinary         = pullerMountPath + "/puller"

	// ConditionComplete is True once the job finished.
	ConditionComplete = "Complete"
	// ConditionNodesExcluded is True while the operator's policy (Policy) keeps pullers off nodes the job selects;
	// its message says how many, and why.
	ConditionNodesExcluded = "NodesExcluded"
	// ConditionPriorityClassNotUsed is True while spec.priorityClassName names a class the operator does not give
	// pullers (Policy.PriorityClassName decides it).
	ConditionPriorityClassNotUsed = "PriorityClassNotUsed"
	// ReasonOperatorPolicy is the reason of ConditionNodesExcluded and of its event.
	ReasonOperatorPolicy = "OperatorPolicy"

	// Reasons recorded for failed nodes and on the Complete condition.
	ReasonImageNotFound    = "ImageNotFound"
	ReasonUnauthorized     = "Unauthorized"
	ReasonTimeout          = "Timeout"
	ReasonDeadlineExceeded = "DeadlineExceeded"
	ReasonPodFailed        = "PodFailed"
	ReasonCompleted        = "Completed"
	// ReasonInvalidSpec is the event of a spec the schema let through and the controller cannot act on.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonFailedCreate is the event of puller creates the API server refused (the Job controller's reason).
	ReasonFailedCreate = "FailedCreate"

	// Messages, the same strings as OpenKruise's ImagePullJob.
	MessageCompleted        = "job has completed"
	MessageNoProgress       = "job is running, no progress"
	MessageDeadlineExceeded = "job exceeds activeDeadlineSeconds"

	// DefaultPullerImage is Manta's own image, which carries the puller binary.
	DefaultPullerImage = "ghcr.io/manta-dev/manta:latest"
	// DefaultPullerBinaryPath is where the puller binary lives in Manta's image.
	DefaultPullerBinaryPath = "/puller"

	// pullerUID runs puller containers as "nobody": the puller binary needs nothing from the image, so a fixed
	// non-root user works for images whose USER is root and for images with no /etc/passwd.
	pullerUID int64 = 65534

	defaultRetryBackoff    = 10 * time.Second
	maxRetryBackoff        = 5 * time.Minute
	maxMessageLength       = 256
	createParallelism      = 16
	expectationsTimeout    = 2 * time.Minute
	defaultSelectorResync  = 30 * time.Second
	defaultPrepullParallel = 10
)
