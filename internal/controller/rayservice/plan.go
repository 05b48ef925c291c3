package rayservice

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/builder"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/reconcile"
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
	// proxyHealthy says, for each running pod that was checked, whether its Serve proxy answered /-/healthz.
	proxyHealthy map[string]bool
	// recordUnwritten: this process applied the Serve config the cluster is taken to have (withApplied), but the
	// annotations that record it could not be written yet.
	recordUnwritten bool
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
// events and the requeue (see internal/reconcile): the plan's own events report status changes, the writer's report
// its writes.
type plan struct {
	reconcile.Result
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
	p := &plan{status: *rs.Status.DeepCopy()}
	st := &p.status
	st.ObservedGeneration = rs.Generation
	now := metav1.NewTime(o.now)
	setCond := func(t rayv1.RayServiceConditionType, status metav1.ConditionStatus, reason rayv1.RayServiceConditionReason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: string(t), Status: status, Reason: string(reason),
			Message: msg, ObservedGeneration: rs.Generation, LastTransitionTime: now})
	}
	oldReady := meta.FindStatusCondition(rs.Status.Conditions, string(rayv1.RayServiceReady))

	unsupported := unsupportedFields(rs)
	if len(unsupported) > 0 {
		msg := unsupportedMessage(unsupported)
		old := meta.FindStatusCondition(rs.Status.Conditions, ConditionUnsupportedFeature)
		if old == nil || old.Message != msg {
			p.StatusEventf(corev1.EventTypeWarning, EventUnsupportedFeature, "Validate", "%s", msg)
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionUnsupportedFeature, Status: metav1.ConditionTrue,
			Reason: ReasonUnsupportedFields, Message: msg, ObservedGeneration: rs.Generation, LastTransitionTime: now})
	} else {
		meta.RemoveStatusCondition(&st.Conditions, ConditionUnsupportedFeature)
	}

	errs := validate(rs)
	if incremental(rs) && !o.gatewayAPI {
		errs = append(errs, field.Invalid(field.NewPath("spec", "upgradeStrategy", "type"), upgradeType(rs),
			"NewClusterWithIncrementalUpgrade needs the Gateway API (gateway.networking.k8s.io/v1 Gateways and HTTPRoutes), which this cluster does not serve"))
	}
	if len(errs) > 0 {
		msg := validation.Message(errs)
		if oldReady == nil || oldReady.Reason != string(rayv1.RayServiceValidationFailed) || oldReady.Message != msg {
			p.StatusEventf(corev1.EventTypeWarning, EventInvalidRayServiceSpec, "Validate", "The RayService spec is invalid %s/%s: %s", rs.Namespace, rs.Name, msg)
		}
		setCond(rayv1.RayServiceReady, metav1.ConditionFalse, rayv1.RayServiceValidationFailed, msg)
		st.ServiceStatus = ""
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
	if meta.IsStatusConditionTrue(rs.Status.Conditions, string(rayv1.RayServiceSuspended)) ||
		meta.IsStatusConditionTrue(rs.Status.Conditions, string(rayv1.RayServiceSuspending)) {
		setCond(rayv1.RayServiceSuspended, metav1.ConditionFalse, rayv1.RayServiceResumed, "the RayService was resumed")
		setCond(rayv1.RayServiceSuspending, metav1.ConditionFalse, rayv1.RayServiceResumed, "the RayService was resumed")
		// Initializing again: the upgrade condition the suspension left starts over.
		meta.RemoveStatusCondition(&st.Conditions, string(rayv1.UpgradeInProgress))
	}
	if timedOut(o, p, setCond) {
		return p
	}

	active, pending := o.active, o.pending
	if active != nil && active.cluster == nil {
		// The active cluster is gone (deleted by someone): nothing serves; a new cluster is brought up.
		p.StatusEventf(corev1.EventTypeWarning, EventDeletedRayCluster, "Reconcile", "active RayCluster %s no longer exists; creating a new one", st.ActiveServiceStatus.RayClusterName)
		st.ActiveServiceStatus = rayv1.RayServiceStatus{}
		active = nil
	}
	spec := &rs.Spec.RayClusterSpec
	strategy := upgradeType(rs)
	if o.noZeroDowntime && (rs.Spec.UpgradeStrategy == nil || rs.Spec.UpgradeStrategy.Type == nil) {
		strategy = rayv1.RayServiceUpgradeNone
	}

	inc := incremental(rs)
	// An incremental upgrade in progress: both clusters serve a share of the traffic.
	upgrading := inc && active != nil && pending != nil && pending.cluster != nil &&
		meta.IsStatusConditionTrue(rs.Status.Conditions, string(rayv1.UpgradeInProgress))
	rollback := false
	if upgrading {
		rollback = planRollbackState(p, active, pending, spec, setCond)
	} else if pending == nil {
		meta.RemoveStatusCondition(&st.Conditions, string(rayv1.RollbackInProgress))
	}

	needPending := active == nil
	if active != nil {
		switch updated, action := clusterAction(active.cluster, spec); action {
		case actionInPlace:
			p.updateClusters = append(p.updateClusters, updated)
			p.onWrite(updated.Name, corev1.EventTypeNormal, EventUpdatedRayCluster, "Update", "Updated the active RayCluster %s/%s", updated.Namespace, updated.Name)
		case actionNew:
			needPending = strategy != rayv1.RayServiceUpgradeNone
		}
	}
	switch {
	case rollback:
		// The pending cluster keeps serving its share until the traffic is back.
	case needPending:
		pending = planPending(o, p, pending, spec)
	case pending != nil:
		// The spec no longer needs a new cluster (it went back, or the strategy is None): drop the pending one.
		if pending.cluster != nil && pending.cluster.DeletionTimestamp == nil {
			p.deleteClusters = append(p.deleteClusters, pending.cluster)
			p.onWrite(pending.cluster.Name, corev1.EventTypeNormal, EventDeletedRayCluster, "Delete", "Deleted the RayCluster %s/%s", pending.cluster.Namespace, pending.cluster.Name)
		}
		st.PendingServiceStatus = rayv1.RayServiceStatus{}
		pending = nil
	}

	var capacityTo string
	var capacityRevert func(*rayv1.RayServiceStatuses)
	if inc {
		initCapacity(st, active != nil)
		if upgrading {
			capacityTo, capacityRevert = planCapacity(o, p, active, pending, rollback)
		}
	}
	configOf := func(c *clusterObs) string {
		if c == active {
			return serveConfigFor(rs, st.ActiveServiceStatus.TargetCapacity)
		}
		return serveConfigFor(rs, st.PendingServiceStatus.TargetCapacity)
	}

	appliedNow := map[string]bool{}
	for _, c := range []*clusterObs{active, pending} {
		if c == nil || c.cluster == nil || !c.headReady || rs.Spec.ServeConfigV2 == "" {
			continue
		}
		config := configOf(c)
		configHash := builder.ServeConfigHash(config)
		id := headID(c.head)
		// Ray reporting no application at all for a config that has some means it lost them (a GCS restart the pod
		// status does not show): the config is sent again. The PUT is declarative, so a spare one is harmless.
		lost := c.details != nil && len(c.details.Applications) == 0 && len(configuredApps(rs.Spec.ServeConfigV2)) > 0
		if lost || c.cluster.Annotations[builder.AnnotationServeConfigHash] != configHash || c.cluster.Annotations[builder.AnnotationServeConfigHead] != id {
			a := serveApply{cluster: c.cluster, config: config, hash: configHash, headID: id}
			if c.cluster.Name == capacityTo {
				a.capacity, a.revert = true, capacityRevert
			}
			p.apply = append(p.apply, a)
			appliedNow[c.cluster.Name] = true
		} else if c.recordUnwritten {
			p.recordApplied = append(p.recordApplied, c.cluster)
		}
	}

	if active != nil {
		st.ActiveServiceStatus = serviceStatus(active, st.ActiveServiceStatus)
	}
	if pending != nil {
		st.PendingServiceStatus = serviceStatus(pending, st.PendingServiceStatus)
		// During an upgrade, traffic moves only to a cluster that already has a serve endpoint (a Ready pod labelled
		// ray.io/serve=true): switched earlier, the Service has none until the head's label, written after the
		// Service, or a worker's readiness arrives, and requests fail in between.
		// During an incremental upgrade traffic moves by the HTTPRoute's weights instead (planTraffic).
		if (!inc || active == nil) && pending.cluster != nil && !appliedNow[pending.cluster.Name] &&
			ready(rs, pending, builder.ServeConfigHash(configOf(pending))) && (active == nil || serveEndpoints(pending) > 0) {
			if active != nil {
				p.StatusEventf(corev1.EventTypeNormal, EventPromotedPendingCluster, "Upgrade", "switched traffic from RayCluster %s to RayCluster %s: all Serve applications are RUNNING", active.cluster.Name, pending.cluster.Name)
			} else {
				p.StatusEventf(corev1.EventTypeNormal, EventPromotedPendingCluster, "Promote", "RayCluster %s serves: all Serve applications are RUNNING", pending.cluster.Name)
			}
			st.ActiveServiceStatus = st.PendingServiceStatus
			st.PendingServiceStatus = rayv1.RayServiceStatus{}
			active, pending = pending, nil
		}
	}

	if inc {
		p.gateway = desiredGateway(rs)
		if active != nil {
			pendingReady := pending != nil && pending.cluster != nil && !appliedNow[pending.cluster.Name] &&
				ready(rs, pending, builder.ServeConfigHash(configOf(pending)))
			active, pending = planTraffic(o, p, active, pending, upgrading && capacityTo == "", rollback, pendingReady)
		}
	}

	if active != nil {
		if inc {
			p.services = []*corev1.Service{builder.RayServiceHeadService(rs, active.cluster), clusterServeService(rs, active.cluster)}
			if pending != nil && pending.cluster != nil {
				p.services = append(p.services, clusterServeService(rs, pending.cluster))
			}
		} else {
			p.services = []*corev1.Service{builder.RayServiceHeadService(rs, active.cluster), builder.RayServiceServeService(rs, active.cluster)}
		}
	}
	st.NumServeEndpoints = planServeLabels(rs, p, active, pending)
	if inc && pending != nil && pending.cluster != nil {
		// Both clusters serve during an incremental upgrade.
		st.NumServeEndpoints += int32(serveEndpoints(pending))
	}
	planOldClusters(o, p, active, pending)

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
	case active != nil && pending != nil:
		setCond(rayv1.UpgradeInProgress, metav1.ConditionTrue, rayv1.BothActivePendingClustersExist, msgBothClusters)
	case active != nil:
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
	return p
}

// planPending makes sure a pending cluster with the current spec exists (or is being created) and returns it.
func planPending(o observed, p *plan, pending *clusterObs, spec *rayv1.RayClusterSpec) *clusterObs {
	st := &p.status
	if pending != nil && pending.cluster != nil {
		switch updated, action := clusterAction(pending.cluster, spec); action {
		case actionSame:
			return pending
		case actionInPlace:
			p.updateClusters = append(p.updateClusters, updated)
			p.onWrite(updated.Name, corev1.EventTypeNormal, EventUpdatedRayCluster, "Update", "Updated the pending RayCluster %s/%s", updated.Namespace, updated.Name)
			return pending
		}
		// Out of date: it never served, so it goes now.
		if pending.cluster.DeletionTimestamp == nil {
			p.deleteClusters = append(p.deleteClusters, pending.cluster)
			p.onWrite(pending.cluster.Name, corev1.EventTypeNormal, EventDeletedRayCluster, "Delete", "Deleted the RayCluster %s/%s", pending.cluster.Namespace, pending.cluster.Name)
		}
		pending = nil
	}
	if pending != nil && pending.cluster == nil {
		// Named in the status, not created yet (or not in the cache yet: creating again is then a no-op).
		name := st.PendingServiceStatus.RayClusterName
		if slices.ContainsFunc(o.clusters, func(c rayv1.RayCluster) bool { return c.Name == name && c.DeletionTimestamp != nil }) {
			// The name is still taken by a terminating cluster: wait.
			p.Requeue(time.Second)
			return pending
		}
		p.createCluster = builder.RayServiceCluster(o.rs, name)
		return pending
	}
	// Record the name first; the cluster is created by the next reconcile, which reads it back.
	name := o.newName()
	st.PendingServiceStatus = rayv1.RayServiceStatus{RayClusterName: name}
	if st.ActiveServiceStatus.RayClusterName != "" {
		p.StatusEventf(corev1.EventTypeNormal, EventUpgradeStarted, "Upgrade", "the rayClusterConfig changed: preparing new RayCluster %s", name)
	}
	p.Requeue(0)
	return &clusterObs{}
}

type clusterActionType int

const (
	actionSame clusterActionType = iota
	actionInPlace
	actionNew
)

// clusterAction compares a cluster with the spec: the same, different only in ways that can be made in place
// (returns the updated cluster), or needing a new cluster.
func clusterAction(c *rayv1.RayCluster, spec *rayv1.RayClusterSpec) (*rayv1.RayCluster, clusterActionType) {
	n, err := strconv.Atoi(c.Annotations[builder.AnnotationNumWorkerGroups])
	if err != nil || n > len(spec.WorkerGroupSpecs) || builder.RayServiceClusterHash(spec, n) != c.Annotations[builder.AnnotationClusterSpecHash] {
		return nil, actionNew
	}
	updated := c.DeepCopy()
	autoscaling := ptr.Deref(spec.EnableInTreeAutoscaling, false)
	for i := range spec.WorkerGroupSpecs {
		want := &spec.WorkerGroupSpecs[i]
		if i >= n || i >= len(updated.Spec.WorkerGroupSpecs) {
			updated.Spec.WorkerGroupSpecs = append(updated.Spec.WorkerGroupSpecs, *want.DeepCopy())
			continue
		}
		g := &updated.Spec.WorkerGroupSpecs[i]
		g.MinReplicas, g.MaxReplicas = want.MinReplicas, want.MaxReplicas
		if !autoscaling {
			// With the autoscaler on, replicas and workersToDelete are the autoscaler's to set.
			g.Replicas = want.Replicas
			g.ScaleStrategy = want.ScaleStrategy
		}
	}
	if equality.Semantic.DeepEqual(updated.Spec, c.Spec) {
		return nil, actionSame
	}
	updated.Annotations = maps.Clone(updated.Annotations)
	updated.Annotations[builder.AnnotationClusterSpecHash] = builder.RayServiceClusterHash(spec, len(spec.WorkerGroupSpecs))
	updated.Annotations[builder.AnnotationNumWorkerGroups] = strconv.Itoa(len(spec.WorkerGroupSpecs))
	return updated, actionInPlace
}

// ready says whether the cluster may receive traffic: the current config was applied to its current head and Ray
// reports every application RUNNING (and every configured application present).
func ready(rs *rayv1.RayService, c *clusterObs, configHash string) bool {
	if c.cluster == nil || !c.headReady || c.details == nil {
		return false
	}
	if rs.Spec.ServeConfigV2 == "" {
		return true
	}
	if c.cluster.Annotations[builder.AnnotationServeConfigHash] != configHash || c.cluster.Annotations[builder.AnnotationServeConfigHead] != headID(c.head) {
		return false
	}
	for _, name := range configuredApps(rs.Spec.ServeConfigV2) {
		if _, ok := c.details.Applications[name]; !ok {
			return false
		}
	}
	if len(c.details.Applications) == 0 {
		return false
	}
	for _, a := range c.details.Applications {
		if a.Status != ray.ApplicationStatusRunning {
			return false
		}
	}
	return true
}

// configuredApps are the application names of a serveConfigV2 ("default" when an application has none, as Serve).
func configuredApps(config string) []string {
	var cfg struct {
		Applications []struct {
			Name string `json:"name"`
		} `json:"applications"`
	}
	if err := yaml.Unmarshal([]byte(config), &cfg); err != nil {
		return nil
	}
	out := make([]string, 0, len(cfg.Applications))
	for _, a := range cfg.Applications {
		if a.Name == "" {
			a.Name = "default"
		}
		out = append(out, a.Name)
	}
	return out
}

// serviceStatus is the status of one cluster; application statuses Ray did not report this time are kept.
func serviceStatus(c *clusterObs, old rayv1.RayServiceStatus) rayv1.RayServiceStatus {
	s := old
	if c.cluster == nil {
		return s
	}
	s.RayClusterName = c.cluster.Name
	s.RayClusterStatus = *c.cluster.Status.DeepCopy()
	if c.details != nil {
		s.Applications = nil
		for name, a := range c.details.Applications {
			if s.Applications == nil {
				s.Applications = map[string]rayv1.AppStatus{}
			}
			as := rayv1.AppStatus{Status: a.Status, Message: a.Message}
			for dn, d := range a.Deployments {
				if as.Deployments == nil {
					as.Deployments = map[string]rayv1.ServeDeploymentStatus{}
				}
				as.Deployments[dn] = rayv1.ServeDeploymentStatus{Status: d.Status, Message: d.Message}
			}
			s.Applications[name] = as
		}
	}
	return s
}

// serveEndpoints counts the cluster's pods that the Serve Service selects and routes to as they are now: Running,
// Ready and labelled ray.io/serve=true.
func serveEndpoints(c *clusterObs) int {
	n := 0
	for i := range c.pods {
		if c.pods[i].Labels[rayv1.LabelServe] == "true" && builder.PodRunningAndReady(&c.pods[i]) {
			n++
		}
	}
	return n
}

// planServeLabels sets the head's ray.io/serve: true once its Serve proxy answered (unless
// excludeHeadPodFromServeSvc), false before. Workers keep the true they are created with, as under KubeRay: their
// readiness probe checks their proxy, so a worker whose proxy does not answer is not Ready and gets no traffic. It
// returns the active cluster's serve endpoints: its Ready pods labelled true.
func planServeLabels(rs *rayv1.RayService, p *plan, active, pending *clusterObs) int32 {
	var endpoints int32
	for _, c := range []*clusterObs{active, pending} {
		if c == nil || c.cluster == nil {
			continue
		}
		for i := range c.pods {
			pod := &c.pods[i]
			want := "false"
			isHead := pod.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead
			if !isHead || (c.proxyHealthy[pod.Name] && !rs.Spec.ExcludeHeadPodFromServeSvc) {
				want = "true"
			}
			if pod.Labels[rayv1.LabelServe] != want {
				p.podLabels = append(p.podLabels, podLabel{pod: pod, value: want})
			}
			if c == active && want == "true" && builder.PodRunningAndReady(pod) {
				endpoints++
			}
		}
	}
	return endpoints
}

// planOldClusters deletes the service's clusters that are neither active nor pending once their deletion delay has
// passed, and starts that delay for the ones that just left.
func planOldClusters(o observed, p *plan, active, pending *clusterObs) {
	keep := map[string]bool{}
	for _, c := range []*clusterObs{active, pending} {
		if c != nil && c.cluster != nil {
			keep[c.cluster.Name] = true
		}
	}
	if n := p.status.PendingServiceStatus.RayClusterName; n != "" {
		keep[n] = true
	}
	delay := time.Duration(ptr.Deref(o.rs.Spec.RayClusterDeletionDelaySeconds, DefaultClusterDeletionDelaySeconds)) * time.Second
	deleting := map[string]bool{}
	for _, c := range p.deleteClusters {
		deleting[c.Name] = true
	}
	for i := range o.clusters {
		c := &o.clusters[i]
		if c.DeletionTimestamp != nil || deleting[c.Name] {
			continue
		}
		at, hasAt := c.Annotations[builder.AnnotationDeleteAfter]
		if keep[c.Name] {
			if hasAt {
				// Named again (a stale read marked it): it must not be deleted later for an old reason.
				p.annotate = append(p.annotate, annotationPatch{cluster: c, key: builder.AnnotationDeleteAfter})
			}
			continue
		}
		deadline, err := time.Parse(time.RFC3339, at)
		if !hasAt || err != nil {
			deadline = o.now.Add(delay)
			if delay > 0 {
				p.annotate = append(p.annotate, annotationPatch{cluster: c, key: builder.AnnotationDeleteAfter, value: ptr.To(deadline.UTC().Format(time.RFC3339))})
				p.Requeue(delay)
				continue
			}
		}
		if o.now.Before(deadline) {
			p.Requeue(deadline.Sub(o.now))
			continue
		}
		if st := &o.rs.Status; c.Name == st.ActiveServiceStatus.RayClusterName || c.Name == st.PendingServiceStatus.RayClusterName {
			// The recorded status still names it (this reconcile's status write may yet fail): delete it once the
			// status that no longer names it is stored.
			p.Requeue(0)
			continue
		}
		p.deleteClusters = append(p.deleteClusters, c)
		p.onWrite(c.Name, corev1.EventTypeNormal, EventDeletedRayCluster, "Delete", "Deleted the RayCluster %s/%s", c.Namespace, c.Name)
	}
}

// planSuspend deletes every cluster of a suspended service.
func planSuspend(o observed, p *plan, setCond func(rayv1.RayServiceConditionType, metav1.ConditionStatus, rayv1.RayServiceConditionReason, string)) {
	st := &p.status
	alive := 0
	for i := range o.clusters {
		c := &o.clusters[i]
		alive++
		if c.DeletionTimestamp == nil {
			p.deleteClusters = append(p.deleteClusters, c)
			p.onWrite(c.Name, corev1.EventTypeNormal, EventDeletedRayCluster, "Suspend", "Deleted the RayCluster %s/%s", c.Namespace, c.Name)
		}
	}
	st.ActiveServiceStatus, st.PendingServiceStatus = rayv1.RayServiceStatus{}, rayv1.RayServiceStatus{}
	st.NumServeEndpoints = 0
	st.ServiceStatus = ""
	if alive > 0 {
		setCond(rayv1.RayServiceSuspending, metav1.ConditionTrue, rayv1.RayServiceSuspendInProgress, "deleting the RayService's clusters")
		setCond(rayv1.RayServiceReady, metav1.ConditionFalse, rayv1.RayServiceSuspendRequested, "the RayService is being suspended")
		p.Requeue(time.Second)
	} else {
		setCond(rayv1.RayServiceSuspending, metav1.ConditionFalse, rayv1.RayServiceSuspendComplete, "the RayService's clusters are deleted")
		setCond(rayv1.RayServiceSuspended, metav1.ConditionTrue, rayv1.RayServiceSuspendComplete, "the RayService is suspended")
		setCond(rayv1.RayServiceReady, metav1.ConditionFalse, rayv1.RayServiceSuspendComplete, "the RayService is suspended")
	}
	setCond(rayv1.UpgradeInProgress, metav1.ConditionFalse, rayv1.NoActiveCluster, "the RayService is suspended")
}

// timedOut applies the ray.io/initializing-timeout annotation: a service not Ready within it is failed and its
// clusters are deleted, until its spec changes.
func timedOut(o observed, p *plan, setCond func(rayv1.RayServiceConditionType, metav1.ConditionStatus, rayv1.RayServiceConditionReason, string)) bool {
	rs := o.rs
	ready := meta.FindStatusCondition(rs.Status.Conditions, string(rayv1.RayServiceReady))
	if ready == nil {
		return false
	}
	failed := ready.Reason == string(rayv1.RayServiceInitializingTimeout) && ready.ObservedGeneration == rs.Generation
	if !failed {
		timeout, ok := initializingTimeout(rs)
		if !ok || ready.Reason != string(rayv1.RayServiceInitializing) {
			return false
		}
		if left := ready.LastTransitionTime.Add(timeout).Sub(o.now); left > 0 {
			p.Requeue(left)
			return false
		}
		spent := o.now.Sub(ready.LastTransitionTime.Time)
		p.StatusEventf(corev1.EventTypeWarning, string(rayv1.RayServiceInitializingTimeout), "Initialize",
			"RayService initializing timeout exceeded after %s (configured timeout: %s)", spent, timeout)
		setCond(rayv1.RayServiceReady, metav1.ConditionFalse, rayv1.RayServiceInitializingTimeout,
			fmt.Sprintf("RayService failed to become ready within the configured timeout of %s. Time spent initializing: %s", timeout, spent))
	}
	for i := range o.clusters {
		if c := &o.clusters[i]; c.DeletionTimestamp == nil {
			p.deleteClusters = append(p.deleteClusters, c)
			p.onWrite(c.Name, corev1.EventTypeNormal, EventDeletedRayCluster, "Delete", "Deleted the RayCluster %s/%s", c.Namespace, c.Name)
		}
	}
	p.status.ActiveServiceStatus, p.status.PendingServiceStatus = rayv1.RayServiceStatus{}, rayv1.RayServiceStatus{}
	p.status.NumServeEndpoints = 0
	p.status.ServiceStatus = ""
	return true
}

// initializingTimeout parses the annotation: a Go duration or a number of seconds.
func initializingTimeout(rs *rayv1.RayService) (time.Duration, bool) {
	v, ok := rs.Annotations[AnnotationInitializingTimeout]
	if !ok {
		return 0, false
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d, true
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second, true
	}
	return 0, false
}

func upgradeType(rs *rayv1.RayService) rayv1.RayServiceUpgradeType {
	if u := rs.Spec.UpgradeStrategy; u != nil && u.Type != nil {
		return *u.Type
	}
	return rayv1.NewCluster
}

// headID identifies a head incarnation: the pod and how often its Ray container restarted.
func headID(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	var restarts int32
	if len(pod.Spec.Containers) > 0 {
		name := pod.Spec.Containers[builder.RayContainerIndex].Name
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == name {
				restarts = cs.RestartCount
			}
		}
	}
	return string(pod.UID) + "/" + strconv.Itoa(int(restarts))
}
