package rayservice

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/validation"
)

// clusterObs is what one reconcile saw of one of the service's clusters.
type clusterObs struct {
	cluster *rayv1.RayCluster
	// pods are the cluster's pods that are not terminating.
	pods []corev1.Pod
	// head is the running head pod, nil while there is none.
	head *corev1.Pod
	// headReady: the head pod is Running and Ready, so its dashboard can be asked.
	headReady bool
	// details is Ray's answer to GET /api/serve/applications/; nil when it was not asked or did not answer.
	details    *ray.ServeDetails
	detailsErr error
	// proxyHealthy says whether the head's Serve proxy answered /-/healthz (by pod name); only the head is asked.
	proxyHealthy map[string]bool
	// recordUnwritten: this process applied the Serve config the cluster is taken to have (withApplied), but the
	// annotations that record it could not be written yet.
	recordUnwritten bool
}

// routeGrace is how long after its head turns Ready a cluster whose head Service routes nowhere yet is left to the
// endpoints controller before its Serve config is sent anyway (and its failure reported); routeRetry is how soon it
// is looked at again meanwhile. Reaching the head through the Kubernetes API server's Service proxy, a call made as
// soon as the head pod is Ready can beat the endpoints controller, and the proxy answers "no endpoints available";
// KubeRay v1.5.0 waits for its own RayCluster status write, which usually hides that race.
const (
	routeGrace = 30 * time.Second
	routeRetry = time.Second
)

// awaitingRoute: the head is Ready, but its Service did not route to any ready endpoint when it was asked
// (ray.ErrNoEndpoints), and the head turned Ready less than routeGrace ago.
func (c *clusterObs) awaitingRoute(now time.Time) bool {
	if c.head == nil || !errors.Is(c.detailsErr, ray.ErrNoEndpoints) {
		return false
	}
	for _, cond := range c.head.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && !cond.LastTransitionTime.IsZero() {
			return now.Sub(cond.LastTransitionTime.Time) < routeGrace
		}
	}
	return false
}

// observed is everything computePlan reads.
type observed struct {
	rs *rayv1.RayService
	// clusters are all RayClusters the service controls, including ones no longer in its status.
	clusters []rayv1.RayCluster
	// active and pending are the clusters named in the status; nil when none is named. A named cluster that does
	// not exist has a nil cluster field.
	active, pending *clusterObs
	now             time.Time
	// newName draws a fresh cluster name (random, so not part of the pure plan's inputs).
	newName func() string
	// noZeroDowntime: Options.NoZeroDowntime.
	noZeroDowntime bool
	// gatewayAPI: the API server serves the Gateway API's Gateways and HTTPRoutes. gateway and route are the
	// service's (nil when absent or not looked up).
	gatewayAPI bool
	gateway    *gwv1.Gateway
	route      *gwv1.HTTPRoute
}

// serveApply is one PUT of the Serve config to a cluster, followed by recording the hash on the cluster.
type serveApply struct {
	cluster *rayv1.RayCluster
	config  string
	hash    string
	headID  string
	// capacity: the config carries a new Serve target capacity; revert takes it out of the status if Ray did not
	// take it.
	capacity bool
	revert   func(*rayv1.RayServiceStatuses)
}

// podLabel sets ray.io/serve on a pod.
type podLabel struct {
	pod   *corev1.Pod
	value string
}

// annotationPatch sets (value non-nil) or removes (nil) one annotation of a cluster.
type annotationPatch struct {
	cluster *rayv1.RayCluster
	key     string
	value   *string
}

// plan is what one reconcile writes, in the writer's order, and the status it then records. Its Result gathers the
// events and the requeue (see internal/controller/shared/reconcile): the plan's own events report status changes, the
// writer's report its writes.
type plan struct {
	reconcile.Result
	// owner is the RayService: the controller every object the plan writes must have.
	owner          *rayv1.RayService
	status         rayv1.RayServiceStatuses
	createCluster  *rayv1.RayCluster
	updateClusters []*rayv1.RayCluster
	deleteClusters []*rayv1.RayCluster
	annotate       []annotationPatch
	apply          []serveApply
	// recordApplied are clusters whose applied-config annotations are still to be written (recordUnwritten).
	recordApplied []*rayv1.RayCluster
	services      []*corev1.Service
	// gateway and route are the incremental upgrade's Gateway and HTTPRoute; routeRevert takes the traffic change
	// out of the status if the route could not be written.
	gateway     *gwv1.Gateway
	route       *gwv1.HTTPRoute
	routeRevert func(*rayv1.RayServiceStatuses)
	// deleteGatewayOf is the service whose Gateway and HTTPRoute go (it is suspended).
	deleteGatewayOf *rayv1.RayService
	podLabels       []podLabel
	// written holds, by cluster name, the event reporting a cluster update or deletion; the writer records it once
	// that write succeeded.
	written map[string]reconcile.Event
}

// onWrite prepares the event of a cluster update or deletion, recorded only once the write succeeded.
func (p *plan) onWrite(cluster, typ, reason, action, format string, args ...any) {
	if p.written == nil {
		p.written = map[string]reconcile.Event{}
	}
	p.written[cluster] = reconcile.Event{Type: typ, Reason: reason, Action: action, Note: fmt.Sprintf(format, args...)}
}

// computePlan is the RayService state machine as a pure function of what was observed. Its rules:
//   - A cluster's name is recorded in the status before the cluster is created, so a retried reconcile creates the
//     same cluster, never a second one.
//   - The first cluster, and every cluster an upgrade creates, starts as the pending cluster. It becomes active
//     (both Services are switched to it) only once the current Serve config was applied to its current head and
//     Ray reports every application RUNNING: traffic never goes to a cluster whose applications are not healthy.
//   - A spec change that only scales worker groups or appends groups updates the cluster in place; any other change
//     needs a new cluster (upgradeStrategy NewCluster, the default) or is not rolled out (None). A pending cluster
//     whose spec is out of date is replaced; one that is no longer needed (the spec went back) is deleted.
//   - A cluster no longer named in the status is deleted rayClusterDeletionDelaySeconds after it left.
//   - The Serve config is sent only when its hash differs from the one recorded on the cluster, when the head it was
//     applied to has restarted since, or when Ray reports none of its applications.
func computePlan(o observed) *plan {
	rs := o.rs
	p := &plan{owner: rs, status: *rs.Status.DeepCopy()}
	p.status.ObservedGeneration = rs.Generation
	now := metav1.NewTime(o.now)
	setCond := func(t rayv1.RayServiceConditionType, status metav1.ConditionStatus, reason rayv1.RayServiceConditionReason, msg string) {
		meta.SetStatusCondition(&p.status.Conditions, metav1.Condition{Type: string(t), Status: status, Reason: string(reason),
			Message: msg, ObservedGeneration: rs.Generation, LastTransitionTime: now})
	}

	planUnsupported(o, p, now)
	if !planValid(o, p, setCond) {
		return p
	}
	if rs.Spec.Suspend {
		planSuspend(o, p, setCond)
		// KubeRay removes the incremental upgrade's Gateway and HTTPRoute with the clusters.
		if o.gateway != nil || o.route != nil {
			p.deleteGatewayOf = rs
		}
		return p
	}
	planResume(o, p, setCond)
	if timedOut(o, p, setCond) {
		return p
	}

	r := planClusters(o, p, setCond)
	planServeConfigs(o, p, r)
	planPromotion(o, p, r)
	planRouting(o, p, r)
	planServeEndpoints(o, p, r)
	planOldClusters(o, p, r.active, r.pending)
	planConditions(o, p, r, setCond)
	return p
}

// setCondFunc sets one condition of the planned status, observed at the service's generation, now.
type setCondFunc func(rayv1.RayServiceConditionType, metav1.ConditionStatus, rayv1.RayServiceConditionReason, string)

// rollout is what computePlan's steps decide about the service's two clusters, handed from step to step.
type rollout struct {
	// active and pending are the clusters that serve and that are being brought up; nil when there is none.
	active, pending *clusterObs
	// inc: the upgrade strategy is NewClusterWithIncrementalUpgrade.
	inc bool
	// upgrading: an incremental upgrade is in progress (both clusters serve a share of the traffic); rollback: it is
	// being rolled back.
	upgrading, rollback bool
	// capacityTo names the cluster whose Serve target capacity this reconcile changes; capacityRevert takes the
	// change out of the status if Ray does not take it.
	capacityTo     string
	capacityRevert func(*rayv1.RayServiceStatuses)
	// appliedNow are, by name, the clusters this reconcile sends the Serve config to.
	appliedNow map[string]bool
}

// configOf is the Serve config a cluster is to hold: the spec's, with the cluster's recorded target capacity.
func (r *rollout) configOf(rs *rayv1.RayService, st *rayv1.RayServiceStatuses, c *clusterObs) string {
	if c == r.active {
		return serveConfigFor(rs, st.ActiveServiceStatus.TargetCapacity)
	}
	return serveConfigFor(rs, st.PendingServiceStatus.TargetCapacity)
}

// pendingReady says whether the pending cluster may receive traffic; a cluster the config is sent to in this
// reconcile may not yet.
func (r *rollout) pendingReady(rs *rayv1.RayService, st *rayv1.RayServiceStatuses) bool {
	return r.pending != nil && r.pending.cluster != nil && !r.appliedNow[r.pending.cluster.Name] &&
		ready(rs, r.pending, clusterbuild.ServeConfigHash(r.configOf(rs, st, r.pending)))
}

// planUnsupported reports the spec fields Manta does not implement in the UnsupportedFeature condition (and an event
// when their list changed).
func planUnsupported(o observed, p *plan, now metav1.Time) {
	rs, st := o.rs, &p.status
	unsupported := unsupportedFields(rs)
	if len(unsupported) == 0 {
		meta.RemoveStatusCondition(&st.Conditions, ConditionUnsupportedFeature)
		return
	}
	msg := unsupportedMessage(unsupported)
	old := meta.FindStatusCondition(rs.Status.Conditions, ConditionUnsupportedFeature)
	if old == nil || old.Message != msg {
		p.StatusEventf(corev1.EventTypeWarning, EventUnsupportedFeature, "Validate", "%s", msg)
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionUnsupportedFeature, Status: metav1.ConditionTrue,
		Reason: ReasonUnsupportedFields, Message: msg, ObservedGeneration: rs.Generation, LastTransitionTime: now})
}

// planValid validates the spec. An invalid one makes the service not Ready (ValidationFailed, with an event when the
// message changed) and nothing else happens; it returns false then.
func planValid(o observed, p *plan, setCond setCondFunc) bool {
	rs := o.rs
	errs := validate(rs)
	if incremental(rs) && !o.gatewayAPI {
		errs = append(errs, field.Invalid(field.NewPath("spec", "upgradeStrategy", "type"), upgradeType(rs),
			"NewClusterWithIncrementalUpgrade needs the Gateway API (gateway.networking.k8s.io/v1 Gateways and HTTPRoutes), which this cluster does not serve"))
	}
	if len(errs) == 0 {
		return true
	}
	msg := validation.Message(errs)
	oldReady := meta.FindStatusCondition(rs.Status.Conditions, string(rayv1.RayServiceReady))
	if oldReady == nil || oldReady.Reason != string(rayv1.RayServiceValidationFailed) || oldReady.Message != msg {
		p.StatusEventf(corev1.EventTypeWarning, EventInvalidRayServiceSpec, "Validate", "The RayService spec is invalid %s/%s: %s", rs.Namespace, rs.Name, msg)
	}
	setCond(rayv1.RayServiceReady, metav1.ConditionFalse, rayv1.RayServiceValidationFailed, msg)
	p.status.ServiceStatus = ""
	return false
}

// planResume ends the suspension conditions of a service that is no longer suspended.
func planResume(o observed, p *plan, setCond setCondFunc) {
	conds := o.rs.Status.Conditions
	if !meta.IsStatusConditionTrue(conds, string(rayv1.RayServiceSuspended)) && !meta.IsStatusConditionTrue(conds, string(rayv1.RayServiceSuspending)) {
		return
	}
	setCond(rayv1.RayServiceSuspended, metav1.ConditionFalse, rayv1.RayServiceResumed, "the RayService was resumed")
	setCond(rayv1.RayServiceSuspending, metav1.ConditionFalse, rayv1.RayServiceResumed, "the RayService was resumed")
	// Initializing again: the upgrade condition the suspension left starts over.
	meta.RemoveStatusCondition(&p.status.Conditions, string(rayv1.UpgradeInProgress))
}

// planClusters decides which clusters exist: a vanished active cluster is forgotten, the active one is updated in
// place when the spec allows it, and a pending cluster is brought up, replaced or dropped as the spec needs.
func planClusters(o observed, p *plan, setCond setCondFunc) *rollout {
	rs, st := o.rs, &p.status
	r := &rollout{active: o.active, pending: o.pending, inc: incremental(rs), appliedNow: map[string]bool{}}
	if r.active != nil && r.active.cluster == nil {
		// The active cluster is gone (deleted by someone): nothing serves; a new cluster is brought up.
		p.StatusEventf(corev1.EventTypeWarning, EventDeletedRayCluster, "Reconcile", "active RayCluster %s no longer exists; creating a new one", st.ActiveServiceStatus.RayClusterName)
		st.ActiveServiceStatus = rayv1.RayServiceStatus{}
		r.active = nil
	}
	spec := &rs.Spec.RayClusterSpec
	r.upgrading = r.inc && r.active != nil && r.pending != nil && r.pending.cluster != nil &&
		meta.IsStatusConditionTrue(rs.Status.Conditions, string(rayv1.UpgradeInProgress))
	if r.upgrading {
		r.rollback = planRollbackState(p, r.active, r.pending, spec, setCond)
	} else if r.pending == nil {
		meta.RemoveStatusCondition(&st.Conditions, string(rayv1.RollbackInProgress))
	}

	switch needPending := planActiveUpdate(o, p, r.active); {
	case r.rollback:
		// The pending cluster keeps serving its share until the traffic is back.
	case needPending:
		r.pending = planPending(o, p, r.pending, spec)
	case r.pending != nil:
		// The spec no longer needs a new cluster (it went back, or the strategy is None): drop the pending one.
		if c := r.pending.cluster; c != nil && c.DeletionTimestamp == nil {
			p.deleteClusters = append(p.deleteClusters, c)
			p.onWrite(c.Name, corev1.EventTypeNormal, EventDeletedRayCluster, "Delete", "Deleted the RayCluster %s/%s", c.Namespace, c.Name)
		}
		st.PendingServiceStatus = rayv1.RayServiceStatus{}
		r.pending = nil
	}
	return r
}

// planActiveUpdate updates the active cluster in place when the spec changed only in ways that allow it, and says
// whether a pending cluster is needed: there is no active cluster, or the spec needs a new one and the upgrade
// strategy rolls it out.
func planActiveUpdate(o observed, p *plan, active *clusterObs) bool {
	if active == nil {
		return true
	}
	if o.pending != nil && !clusterbuild.StampedByThisVersion(active.cluster.Annotations) {
		// Taken over in the middle of an upgrade: the active cluster holds the old spec, and stamping it as
		// current would drop the pending cluster the upgrade brings up. The upgrade goes on (planPending takes the
		// pending cluster over), as KubeRay leaves the active cluster alone while upgrading.
		return true
	}
	switch updated, action := clusterAction(active.cluster, &o.rs.Spec.RayClusterSpec); action {
	case actionInPlace:
		p.updateClusters = append(p.updateClusters, updated)
		p.onWrite(updated.Name, corev1.EventTypeNormal, EventUpdatedRayCluster, "Update", "Updated the active RayCluster %s/%s", updated.Namespace, updated.Name)
	case actionNew:
		strategy := upgradeType(o.rs)
		if o.noZeroDowntime && (o.rs.Spec.UpgradeStrategy == nil || o.rs.Spec.UpgradeStrategy.Type == nil) {
			strategy = rayv1.RayServiceUpgradeNone
		}
		return strategy != rayv1.RayServiceUpgradeNone
	}
	return false
}

// planServeConfigs plans the incremental upgrade's capacity change due now, then sends the Serve config to each
// cluster with a ready head that does not hold it (or whose applications Ray lost), and records a config that this
// process applied but could not record yet.
func planServeConfigs(o observed, p *plan, r *rollout) {
	rs, st := o.rs, &p.status
	if r.inc {
		initCapacity(st, r.active != nil)
		if r.upgrading {
			r.capacityTo, r.capacityRevert = planCapacity(o, p, r.active, r.pending, r.rollback)
		}
	}
	for _, c := range []*clusterObs{r.active, r.pending} {
		if c == nil || c.cluster == nil || !c.headReady || rs.Spec.ServeConfigV2 == "" {
			continue
		}
		if c.awaitingRoute(o.now) {
			// Sent now, the PUT would fail for no fault of Ray's (and be reported as a failed update); the
			// Service's endpoints are not watched, so look again shortly.
			if c.cluster.Name == r.capacityTo && r.capacityRevert != nil {
				r.capacityRevert(st)
			}
			p.Requeue(routeRetry)
			continue
		}
		config := r.configOf(rs, st, c)
		configHash := clusterbuild.ServeConfigHash(config)
		id := headID(c.head)
		// Ray reporting no application at all for a config that has some means it lost them (a GCS restart the pod
		// status does not show): the config is sent again. The PUT is declarative, so a spare one is harmless.
		lost := c.details != nil && len(c.details.Applications) == 0 && len(configuredApps(rs.Spec.ServeConfigV2)) > 0
		if lost || c.cluster.Annotations[clusterbuild.AnnotationServeConfigHash] != configHash || c.cluster.Annotations[clusterbuild.AnnotationServeConfigHead] != id {
			a := serveApply{cluster: c.cluster, config: config, hash: configHash, headID: id}
			if c.cluster.Name == r.capacityTo {
				a.capacity, a.revert = true, r.capacityRevert
			}
			p.apply = append(p.apply, a)
			r.appliedNow[c.cluster.Name] = true
		} else if c.recordUnwritten {
			p.recordApplied = append(p.recordApplied, c.cluster)
		}
	}
}

// planPromotion records both clusters' statuses and makes the pending cluster the active one once it is ready.
// During an upgrade, traffic moves only to a cluster that already has a serve endpoint (a Ready pod labelled
// ray.io/serve=true): switched earlier, the Service has none until the head's label, written after the Service, or a
// worker's readiness arrives, and requests fail in between. During an incremental upgrade traffic moves by the
// HTTPRoute's weights instead (planRouting).
func planPromotion(o observed, p *plan, r *rollout) {
	rs, st := o.rs, &p.status
	if r.active != nil {
		st.ActiveServiceStatus = serviceStatus(r.active, st.ActiveServiceStatus)
	}
	if r.pending == nil {
		return
	}
	st.PendingServiceStatus = serviceStatus(r.pending, st.PendingServiceStatus)
	if (r.inc && r.active != nil) || !r.pendingReady(rs, st) || (r.active != nil && serveEndpoints(r.pending) == 0) {
		return
	}
	if r.active != nil {
		p.StatusEventf(corev1.EventTypeNormal, EventPromotedPendingCluster, "Upgrade", "switched traffic from RayCluster %s to RayCluster %s: all Serve applications are RUNNING", r.active.cluster.Name, r.pending.cluster.Name)
	} else {
		p.StatusEventf(corev1.EventTypeNormal, EventPromotedPendingCluster, "Promote", "RayCluster %s serves: all Serve applications are RUNNING", r.pending.cluster.Name)
	}
	st.ActiveServiceStatus = st.PendingServiceStatus
	st.PendingServiceStatus = rayv1.RayServiceStatus{}
	r.active, r.pending = r.pending, nil
}

// planRouting plans what routes traffic: during an incremental upgrade the Gateway and the HTTPRoute's weights
// (planTraffic), and the Services of the active (and, incrementally, the pending) cluster.
func planRouting(o observed, p *plan, r *rollout) {
	rs := o.rs
	if r.inc {
		p.gateway = desiredGateway(rs)
		if r.active != nil {
			r.active, r.pending = planTraffic(o, p, r.active, r.pending, r.upgrading && r.capacityTo == "", r.rollback, r.pendingReady(rs, &p.status))
		}
	}
	if r.active == nil {
		return
	}
	if !r.inc {
		p.services = []*corev1.Service{clusterbuild.RayServiceHeadService(rs, r.active.cluster), clusterbuild.RayServiceServeService(rs, r.active.cluster)}
		return
	}
	p.services = []*corev1.Service{clusterbuild.RayServiceHeadService(rs, r.active.cluster), clusterServeService(rs, r.active.cluster)}
	if r.pending != nil && r.pending.cluster != nil {
		p.services = append(p.services, clusterServeService(rs, r.pending.cluster))
	}
}

// planServeEndpoints labels the pods the Serve Service selects and counts the serve endpoints: the active cluster's,
// and during an incremental upgrade the pending cluster's too (both serve).
func planServeEndpoints(o observed, p *plan, r *rollout) {
	st := &p.status
	st.NumServeEndpoints = planServeLabels(o.rs, p, r.active, r.pending)
	if r.inc && r.pending != nil && r.pending.cluster != nil {
		st.NumServeEndpoints += int32(serveEndpoints(r.pending))
	}
}

// planConditions sets Ready (from the serve endpoints, or Initializing until a first cluster serves), UpgradeInProgress
// (from which clusters exist) and the serviceStatus.
func planConditions(o observed, p *plan, r *rollout, setCond setCondFunc) {
	st := &p.status
	oldReady := meta.FindStatusCondition(o.rs.Status.Conditions, string(rayv1.RayServiceReady))
	switch {
	case st.NumServeEndpoints > 0:
		setCond(rayv1.RayServiceReady, metav1.ConditionTrue, rayv1.NonZeroServeEndpoints, msgNonZeroServeEndpoints)
	case oldReady != nil && (oldReady.Reason == string(rayv1.NonZeroServeEndpoints) || oldReady.Reason == string(rayv1.ZeroServeEndpoints)):
		setCond(rayv1.RayServiceReady, metav1.ConditionFalse, rayv1.ZeroServeEndpoints, msgZeroServeEndpoints)
	default:
		if oldReady != nil && oldReady.Reason != string(rayv1.RayServiceInitializing) {
			// Initializing starts now (after a fixed spec, a resume, a timed-out attempt): the initializing timeout
			// is measured from the condition's transition time.
			meta.RemoveStatusCondition(&st.Conditions, string(rayv1.RayServiceReady))
		}
		setCond(rayv1.RayServiceReady, metav1.ConditionFalse, rayv1.RayServiceInitializing, msgInitializing)
	}
	switch {
	case r.active != nil && r.pending != nil:
		setCond(rayv1.UpgradeInProgress, metav1.ConditionTrue, rayv1.BothActivePendingClustersExist, msgBothClusters)
	case r.active != nil:
		setCond(rayv1.UpgradeInProgress, metav1.ConditionFalse, rayv1.NoPendingCluster, msgNoPendingCluster)
	default:
		// Until a first cluster serves, the service is initializing; no active cluster after that (it was deleted
		// by someone) is unexpected, so the status is Unknown.
		if old := meta.FindStatusCondition(st.Conditions, string(rayv1.UpgradeInProgress)); old == nil || old.Reason == string(rayv1.RayServiceInitializing) {
			setCond(rayv1.UpgradeInProgress, metav1.ConditionFalse, rayv1.RayServiceInitializing, msgInitializing)
		} else {
			setCond(rayv1.UpgradeInProgress, metav1.ConditionUnknown, rayv1.NoActiveCluster, msgNoActiveCluster)
		}
	}
	if meta.IsStatusConditionTrue(st.Conditions, string(rayv1.RayServiceReady)) {
		st.ServiceStatus = rayv1.Running
	} else {
		st.ServiceStatus = ""
	}
}
