// Package rayservice is the RayService controller: it keeps a RayCluster serving the service's Ray Serve
// applications, applies serveConfigV2 through the Serve REST API, points <rayservice>-head-svc and
// <rayservice>-serve-svc at the active cluster, and upgrades to a new cluster without downtime when the cluster
// spec changes. Each reconcile observes (Kubernetes objects, Ray's answers), plans (computePlan, pure) and writes.
package rayservice

// Finalizer holds a deleted RayService until its RayClusters are gone, as KubeRay does from v1.6.2: the garbage
// collector alone would let the RayService go first, and a RayService of the same name created meanwhile would find
// the old clusters (they carry its name in ray.io/originated-from-cr-name).
const Finalizer = "ray.io/rayservice-finalizer"

// annotationKubeRayVersion is the KubeRay release that created or last stamped a RayService's cluster. KubeRay
// re-stamps its spec hash in place on a cluster whose version is not its own, and judges the others by their hash:
// Manta drops it where it writes its own hash, so that KubeRay, started again, re-stamps the cluster instead of
// reading Manta's hash as a spec change and rolling the service to a new cluster.
const annotationKubeRayVersion = "ray.io/kuberay-version"

// Condition messages, KubeRay's (users and tools match on them).
const (
	msgInitializing          = "RayService is initializing"
	msgNonZeroServeEndpoints = "Number of serve endpoints is greater than 0"
	msgZeroServeEndpoints    = "Number of serve endpoints dropped to 0"
	msgBothClusters          = "Both active and pending Ray clusters exist"
	msgNoPendingCluster      = "Active Ray cluster exists and no pending Ray cluster"
	msgNoActiveCluster       = "No active Ray cluster exists, and the RayService is not initializing"
)

// Condition types Manta adds to KubeRay's.
const (
	// ConditionUnsupportedFeature is True while the spec uses fields Manta does not implement; the message names them.
	ConditionUnsupportedFeature = "UnsupportedFeature"
)

// Reasons of Manta's conditions.
const (
	ReasonUnsupportedFields = "UnsupportedFields"
)

// Event reasons (stable: users and tests select on them). The names follow KubeRay's where it has one.
const (
	EventCreatedRayCluster               = "CreatedRayCluster"
	EventFailedToCreateRayCluster        = "FailedToCreateRayCluster"
	EventUpdatedRayCluster               = "UpdatedRayCluster"
	EventFailedToUpdateRayCluster        = "FailedToUpdateRayCluster"
	EventDeletedRayCluster               = "DeletedRayCluster"
	EventFailedToDeleteRayCluster        = "FailedToDeleteRayCluster"
	EventUpdatedServeApplications        = "UpdatedServeApplications"
	EventFailedToUpdateServeApplications = "FailedToUpdateServeApplications"
	EventCreatedService                  = "CreatedService"
	EventUpdatedService                  = "UpdatedService"
	EventFailedToCreateService           = "FailedToCreateService"
	EventFailedToUpdateService           = "FailedToUpdateService"
	EventInvalidRayServiceSpec           = "InvalidRayServiceSpec"
	EventUnsupportedFeature              = "UnsupportedFeature"
	EventPromotedPendingCluster          = "PromotedPendingCluster"
	EventUpgradeStarted                  = "UpgradeStarted"
	EventUpdatedHeadPodServeLabel        = "UpdatedHeadPodServeLabel"
	EventFailedToUpdateHeadPodServeLabel = "FailedToUpdateHeadPodServeLabel"
)

// MaxNameLength is KubeRay's limit on a RayService name: the cluster name <rayservice>-<5> and the Services built
// from it must still fit.
const MaxNameLength = 47

// DefaultClusterDeletionDelaySeconds is how long an old cluster lives after traffic left it, when unset.
const DefaultClusterDeletionDelaySeconds = 60

// AnnotationInitializingTimeout is KubeRay's annotation bounding how long a RayService may take to become Ready.
const AnnotationInitializingTimeout = "ray.io/initializing-timeout"

// Event reasons of the incremental upgrade (KubeRay's where it has one).
const (
	EventCreatedGateway               = "CreatedGateway"
	EventUpdatedGateway               = "UpdatedGateway"
	EventFailedToCreateGateway        = "FailedToCreateGateway"
	EventFailedToUpdateGateway        = "FailedToUpdateGateway"
	EventDeletedGateway               = "DeletedGateway"
	EventDeletedHTTPRoute             = "DeletedHTTPRoute"
	EventCreatedHTTPRoute             = "CreatedHTTPRoute"
	EventUpdatedHTTPRoute             = "UpdatedHTTPRoute"
	EventFailedToCreateHTTPRoute      = "FailedToCreateHTTPRoute"
	EventFailedToUpdateHTTPRoute      = "FailedToUpdateHTTPRoute"
	EventUpdatedServeTargetCapacity   = "UpdatedServeTargetCapacity"
	EventFailedToUpdateTargetCapacity = "FailedToUpdateTargetCapacity"
	EventUpgradeRollbackStarted       = "UpgradeRollbackStarted"
	EventUpgradeResumed               = "UpgradeResumed"
	EventUpgradeRolledBack            = "UpgradeRolledBack"
)
