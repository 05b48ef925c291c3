// Package rayjob is the RayJob controller: it creates (or selects) a RayCluster, submits the Ray job in the chosen
// submission mode, follows it to a terminal state through internal/ray, and cleans up as the spec says. observe.go
// reads; pure functions decide (plan.go and its steps in initializing.go, running.go and finished.go; validate.go,
// build.go); write.go writes; controller.go ties them together and writes the status.
package rayjob

import "time"

const (
	// Finalizer stops the Ray job when the RayJob is deleted while the job still runs.
	Finalizer = "ray.io/rayjob-finalizer"

	// SubmitterContainerName is the container that submits the job (submitter Job, or head sidecar).
	SubmitterContainerName = "ray-job-submitter"

	// MaxNameLength is KubeRay's limit on RayJob names (the cluster and Job names derive from it).
	MaxNameLength = 47

	// DefaultSubmitterBackoffLimit is the submitter Job's backoffLimit when submitterConfig does not set one.
	DefaultSubmitterBackoffLimit int32 = 2

	// DefaultStatusCheckTimeout is how long the Ray job's status may stay unreadable before the RayJob fails
	// (KubeRay's RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS default).
	DefaultStatusCheckTimeout = 300 * time.Second
	// DefaultTransitionGracePeriod is how long a K8sJobMode RayJob waits for its submitter once the Ray job is
	// terminal, or for the Ray job once the submitter failed (KubeRay's default, 300 s).
	DefaultTransitionGracePeriod = 300 * time.Second
	// DefaultSubmitterFinishedTimeout is how long a K8sJobMode RayJob waits, once its submitter Job finished, for
	// Ray to report the job terminal before failing it (KubeRay's fixed 30 s).
	DefaultSubmitterFinishedTimeout = 30 * time.Second
	// DefaultPollInterval is how often a running job is polled (KubeRay requeues RayJobs every 3 s).
	DefaultPollInterval = 3 * time.Second
)

// Event reasons: stable, one per transition or action.
const (
	ReasonInvalidSpec           = "InvalidRayJobSpec"
	ReasonCreatedCluster        = "CreatedRayCluster"
	ReasonFailedCreateCluster   = "FailedToCreateRayCluster"
	ReasonDeletedCluster        = "DeletedRayCluster"
	ReasonFailedDeleteCluster   = "FailedToDeleteRayCluster"
	ReasonSuspendedWorkers      = "UpdatedRayCluster"
	ReasonFailedSuspendWorkers  = "FailedToUpdateRayCluster"
	ReasonCreatedSubmitter      = "CreatedRayJobSubmitter"
	ReasonFailedSubmitter       = "FailedToCreateRayJobSubmitter"
	ReasonDeletedSubmitter      = "DeletedRayJobSubmitter"
	ReasonFailedDeleteSubmitter = "FailedToDeleteRayJobSubmitter"
	ReasonSubmittedJob          = "SubmittedRayJob"
	ReasonFailedSubmitJob       = "FailedToSubmitRayJob"
	ReasonStoppedJob            = "StoppedRayJob"
	ReasonFailedStopJob         = "FailedToStopRayJob"
	ReasonDeletedSelf           = "DeletedRayJob"
	ReasonStatusChanged         = "JobDeploymentStatusChanged"
	ReasonJobStatusChanged      = "JobStatusChanged"
	ReasonStatusCheckFailed     = "RayJobStatusCheckFailed"
	ReasonCreatedService        = "CreatedService"
	ReasonFailedCreateService   = "FailedToCreateService"
	ReasonUpdatedService        = "UpdatedService"
	ReasonFailedUpdateService   = "FailedToUpdateService"
	ReasonClusterNotFound       = "RayClusterNotFound"
	// ReasonResumedIdleCluster: a selected cluster suspended for idleness (internal/controller/idle) was resumed.
	ReasonResumedIdleCluster = "ResumedIdleCluster"
)
