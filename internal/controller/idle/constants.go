// Package idle suspends RayClusters that asked for it (manta.dev/idle-timeout) once their Ray head has reported no
// activity for that long: no Ray job that is not finished, no Serve application, no actor that is not dead and no
// task that is pending or running. It writes only spec.suspend and one annotation, so the RayCluster controller's
// existing suspend path deletes the pods and keeps the spec; a RayJob that selects the cluster, or a user, resumes it.
package idle

import "time"

const (
	// AnnotationIdleTimeout on a RayCluster (a Go duration, at least MinTimeout) opts it in: the cluster is suspended
	// once its head has shown no activity for that long.
	AnnotationIdleTimeout = "manta.dev/idle-timeout"
	// AnnotationIdleSuspendedAt is written with spec.suspend: true when this controller suspends a cluster (RFC 3339).
	// It tells a suspension for idleness from one a user asked for: only the former is undone by a RayJob that
	// selects the cluster. It is removed when the cluster resumes.
	AnnotationIdleSuspendedAt = "manta.dev/idle-suspended-at"

	// ConditionIdleSuspended is True while the cluster is suspended for idleness (its lastTransitionTime the
	// marker's time), False (reason Resumed) once it runs again; derived from the marker and spec.suspend.
	ConditionIdleSuspended = "IdleSuspended"

	// Event and condition reasons.
	ReasonIdleSuspended      = "IdleSuspended"
	ReasonResumed            = "Resumed"
	ReasonInvalidIdleTimeout = "InvalidIdleTimeout"
	ReasonIdleCheckFailed    = "IdleCheckFailed"

	// MinTimeout is the shortest idle timeout accepted: a shorter one would suspend a cluster between the steps of
	// one interactive session. Ten seconds keeps end-to-end tests short; production timeouts are minutes or hours.
	MinTimeout = 10 * time.Second
	// DefaultCheckInterval is how often one cluster's head is read (--idle-check-interval).
	DefaultCheckInterval = time.Minute
	// MinCheckInterval bounds --idle-check-interval from below: each check costs up to four requests to the head.
	MinCheckInterval = time.Second
)
