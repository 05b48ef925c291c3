// Package raycronjob is the RayCronJob controller: at each time of a RayCronJob's cron schedule it creates a
// RayJob from spec.jobTemplate, named <cronjob>-<minutes since the epoch> so a repeated create for the same run
// cannot make a second RayJob. Pure functions (schedule.go, build.go) decide; controller.go reads, writes and
// reports.
//
// KubeRay v1.7's RayCronJob has no concurrency policy, history limits or starting deadline, and neither has this
// controller: every run gets its RayJob whether or not earlier ones still run, RayJobs are never pruned (they go
// with their own deletion settings or with the RayCronJob, which owns them), and runs missed while the operator
// was down or the RayCronJob suspended are each created, oldest first, when it reconciles again.
package raycronjob

const (
	// LabelCronJobName is on every RayJob the controller creates: the RayCronJob's name.
	LabelCronJobName = "ray.io/cronjob-name"
	// AnnotationScheduledTimestamp is on every RayJob the controller creates: the run's scheduled time, UTC RFC 3339.
	AnnotationScheduledTimestamp = "ray.io/cronjob-scheduled-timestamp"
)

// Event reasons: KubeRay's for an invalid spec and a suspended RayCronJob, and Manta's for what it creates.
const (
	ReasonInvalidSpec     = "InvalidRayCronJobSpec"
	ReasonSuspended       = "SuspendedRayCronJob"
	ReasonCreatedJob      = "CreatedRayJob"
	ReasonFailedCreateJob = "FailedToCreateRayJob"
	// ReasonNameTaken: the run's RayJob name is held by a RayJob this RayCronJob does not own; the run is skipped.
	ReasonNameTaken = "RayJobNameTaken"
)

// Event actions.
const (
	actionValidate = "Validate"
	actionSuspend  = "Suspend"
	actionCreate   = "Create"
)
