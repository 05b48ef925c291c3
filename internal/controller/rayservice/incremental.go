package rayservice

import (
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/ray"
)

// The incremental upgrade (upgradeStrategy NewClusterWithIncrementalUpgrade), as KubeRay v1.7 runs it. Its rules:
//   - Clients reach the service through a Gateway (<rayservice>-gateway, the options' gatewayClassName, one HTTP
//     listener on port 80) and an HTTPRoute (<rayservice>-httproute) that splits "/" between the per-cluster Serve
//     Services (<cluster>-serve-svc) of the active and the pending cluster by weight.
//   - Each cluster's Serve target_capacity is recorded in its status (targetCapacity) and sent with its Serve config.
//     The first cluster starts at 100, a cluster an upgrade creates at 0.
//   - Capacity moves first, then traffic follows it, one change per reconcile: while the pending cluster's traffic
//     is below its capacity, traffic moves stepSizePercent to it every intervalSeconds (counted from the pending
//     cluster's lastTrafficMigratedTime), never beyond its capacity and only while its applications are RUNNING.
//     Once traffic caught up, capacity moves by maxSurgePercent: the active cluster's down while both add up to
//     more than 100, else the pending cluster's up.
//   - Capacity changes only while the Gateway is Accepted and Programmed and the HTTPRoute Accepted with its refs
//     resolved (a Gateway implementation reports both), and only once Ray holds the capacity last recorded.
//   - The pending cluster becomes active when the active cluster's capacity is 0 and the HTTPRoute, as read back,
//     sends all traffic to the pending cluster.
//   - A spec change during the upgrade that the pending cluster does not match rolls the upgrade back
//     (RollbackInProgress): traffic and capacity move back the same way, to the active cluster. The rollback is
//     complete when the active cluster has 100 of both and the pending cluster 0 of both, or its head is not
//     ready (it cannot be asked to scale down); the pending cluster is then dropped, and a spec that matches
//     neither cluster starts a new upgrade.
//   - A change of weights or capacity is recorded in the status only if its write succeeds (the plan carries a
//     revert for the writer).

// GatewayListenerName and GatewayListenerPort are the Gateway's one listener, as KubeRay names it.
const (
	GatewayListenerName = "http"
	GatewayListenerPort = 80
)

func incremental(rs *rayv1.RayService) bool {
	return upgradeType(rs) == rayv1.NewClusterWithIncrementalUpgrade
}

// GatewayName is <rayservice>-gateway.
func GatewayName(rs *rayv1.RayService) string { return rs.Name + "-gateway" }

// HTTPRouteName is <rayservice>-httproute.
func HTTPRouteName(rs *rayv1.RayService) string { return rs.Name + "-httproute" }

// shares is where an incremental upgrade stands: each cluster's Serve target capacity and its share of the traffic,
// in percent, with KubeRay's defaults for what the status does not record yet.
type shares struct {
	activeCap, activeTraffic, pendingCap, pendingTraffic int32
}

func sharesOf(st *rayv1.RayServiceStatuses) shares {
	a, p := &st.ActiveServiceStatus, &st.PendingServiceStatus
	return shares{
		activeCap: ptr.Deref(a.TargetCapacity, 100), activeTraffic: ptr.Deref(a.TrafficRoutedPercent, 100),
		pendingCap: ptr.Deref(p.TargetCapacity, 0), pendingTraffic: ptr.Deref(p.TrafficRoutedPercent, 0),
	}
}

// nextCapacity is the one capacity change due now, if any: which cluster (pending or active) and its new capacity.
// The cluster gaining traffic (the pending one, the active one in a rollback) gains capacity; the other loses it.
func nextCapacity(s shares, maxSurge int32, rollback bool) (pending bool, goal int32, ok bool) {
	gain, gainTraffic, lose := s.pendingCap, s.pendingTraffic, s.activeCap
	if rollback {
		gain, gainTraffic, lose = s.activeCap, s.activeTraffic, s.pendingCap
	}
	if gain != gainTraffic {
		return false, 0, false
	}
	if gain+lose > 100 {
		goal = max(0, lose-maxSurge)
		return rollback, goal, goal != lose
	}
	goal = min(100, gain+maxSurge)
	return !rollback, goal, goal != gain
}

// nextTraffic is the traffic split after this reconcile, and how long until the next step is due when one is
// waiting for the interval. last is the lastTrafficMigratedTime of the cluster gaining traffic.
func nextTraffic(s shares, step int32, interval time.Duration, last *metav1.Time, now time.Time, rollback, pendingReady bool) (active, pending int32, wait time.Duration) {
	active, pending = s.activeTraffic, s.pendingTraffic
	if (rollback && active == s.activeCap) || (!rollback && pending == s.pendingCap) {
		return active, pending, 0
	}
	if last != nil {
		if d := last.Add(interval).Sub(now); d > 0 {
			return active, pending, d
		}
	}
	switch {
	case rollback:
		// Back to the active cluster, whatever the pending cluster's state.
		active = min(100, active+step, s.activeCap)
		pending = 100 - active
	case pendingReady:
		pending = min(100, pending+step, s.pendingCap)
		active = 100 - pending
	}
	return active, pending, 0
}

// upgradeComplete: the active cluster holds no capacity and the pending cluster gets all traffic.
func upgradeComplete(st *rayv1.RayServiceStatuses) bool {
	return ptr.Deref(st.ActiveServiceStatus.TargetCapacity, -1) == 0 && ptr.Deref(st.PendingServiceStatus.TrafficRoutedPercent, -1) == 100
}

// rollbackComplete: the active cluster is back at full capacity and traffic, and the pending cluster is drained or
// cannot be asked to drain.
func rollbackComplete(st *rayv1.RayServiceStatuses, pendingHealthy bool) bool {
	a, p := &st.ActiveServiceStatus, &st.PendingServiceStatus
	if ptr.Deref(a.TargetCapacity, -1) != 100 || ptr.Deref(a.TrafficRoutedPercent, -1) != 100 {
		return false
	}
	return !pendingHealthy || (ptr.Deref(p.TargetCapacity, -1) == 0 && ptr.Deref(p.TrafficRoutedPercent, -1) == 0)
}

// recordTraffic sets a cluster's share of traffic, stamping the time when it moved.
func recordTraffic(s *rayv1.RayServiceStatus, weight int32, now metav1.Time) {
	if old := s.TrafficRoutedPercent; old != nil && *old == weight {
		return
	}
	s.TrafficRoutedPercent = ptr.To(weight)
	s.LastTrafficMigratedTime = &now
}

// serveConfigFor is the Serve config a cluster is sent: serveConfigV2, with the cluster's target_capacity during an
// incremental upgrade. JSON, which is YAML too.
func serveConfigFor(rs *rayv1.RayService, capacity *int32) string {
	if !incremental(rs) || capacity == nil {
		return rs.Spec.ServeConfigV2
	}
	b, err := ray.ServeConfigToJSON(rs.Spec.ServeConfigV2)
	if err != nil {
		return rs.Spec.ServeConfigV2
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		return rs.Spec.ServeConfigV2
	}
	cfg["target_capacity"] = *capacity
	out, err := json.Marshal(cfg)
	if err != nil {
		return rs.Spec.ServeConfigV2
	}
	return string(out)
}

// holds says Ray holds config on the cluster's current head (the config and head recorded on the cluster).
func holds(c *clusterObs, config string) bool {
	return c != nil && c.cluster != nil && c.headReady &&
		c.cluster.Annotations[clusterbuild.AnnotationServeConfigHash] == clusterbuild.ServeConfigHash(config) &&
		c.cluster.Annotations[clusterbuild.AnnotationServeConfigHead] == headID(c.head)
}

// gatewayReady: a Gateway implementation accepted the Gateway and programmed its data plane.
func gatewayReady(g *gwv1.Gateway) bool {
	return g != nil && meta.IsStatusConditionTrue(g.Status.Conditions, string(gwv1.GatewayConditionAccepted)) &&
		meta.IsStatusConditionTrue(g.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
}

// routeReady: the Gateway accepted the route and resolved its backends.
func routeReady(g *gwv1.Gateway, r *gwv1.HTTPRoute) bool {
	if g == nil || r == nil {
		return false
	}
	for _, p := range r.Status.Parents {
		if string(p.ParentRef.Name) != g.Name || (p.ParentRef.Namespace != nil && string(*p.ParentRef.Namespace) != g.Namespace) {
			continue
		}
		if meta.IsStatusConditionTrue(p.Conditions, string(gwv1.RouteConditionAccepted)) && meta.IsStatusConditionTrue(p.Conditions, string(gwv1.RouteConditionResolvedRefs)) {
			return true
		}
	}
	return false
}

// routeWeight is the weight the HTTPRoute gives the cluster's Serve Service; -1 when it has none.
func routeWeight(r *gwv1.HTTPRoute, cluster *rayv1.RayCluster) int32 {
	if r == nil || cluster == nil || len(r.Spec.Rules) == 0 {
		return -1
	}
	name := clusterbuild.ServeServiceName(cluster)
	for _, b := range r.Spec.Rules[0].BackendRefs {
		if string(b.Name) == name {
			return ptr.Deref(b.Weight, 1)
		}
	}
	return -1
}

// desiredGateway is the service's Gateway.
func desiredGateway(rs *rayv1.RayService) *gwv1.Gateway {
	return &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: GatewayName(rs), Namespace: rs.Namespace, Labels: originLabels(rs),
			OwnerReferences: []metav1.OwnerReference{*clusterbuild.RayServiceOwnerReference(rs)}},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: gwv1.ObjectName(rs.Spec.UpgradeStrategy.ClusterUpgradeOptions.GatewayClassName),
			Listeners:        []gwv1.Listener{{Name: GatewayListenerName, Protocol: gwv1.HTTPProtocolType, Port: GatewayListenerPort}},
		},
	}
}

// desiredRoute is the service's HTTPRoute: "/" to the active cluster's Serve Service and, during an upgrade, the
// pending cluster's, weighted by their shares of traffic in st.
func desiredRoute(rs *rayv1.RayService, st *rayv1.RayServiceStatuses, active, pending *rayv1.RayCluster) *gwv1.HTTPRoute {
	ns := gwv1.Namespace(rs.Namespace)
	backend := func(c *rayv1.RayCluster, weight int32) gwv1.HTTPBackendRef {
		return gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{
			BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(clusterbuild.ServeServiceName(c)), Namespace: ptr.To(ns), Port: ptr.To(servePort(c))},
			Weight:                 ptr.To(weight),
		}}
	}
	refs := []gwv1.HTTPBackendRef{backend(active, ptr.Deref(st.ActiveServiceStatus.TrafficRoutedPercent, 100))}
	if pending != nil {
		refs = append(refs, backend(pending, ptr.Deref(st.PendingServiceStatus.TrafficRoutedPercent, 0)))
	}
	return &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: HTTPRouteName(rs), Namespace: rs.Namespace, Labels: originLabels(rs),
			OwnerReferences: []metav1.OwnerReference{*clusterbuild.RayServiceOwnerReference(rs)}},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: gwv1.ObjectName(GatewayName(rs)), Namespace: ptr.To(ns)}}},
			Rules: []gwv1.HTTPRouteRule{{
				Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To("/")}}},
				BackendRefs: refs,
			}},
		},
	}
}

// clusterServeService is <cluster>-serve-svc, the cluster's own Serve Service the HTTPRoute sends its share to. The
// RayService controls it (the RayCluster controller removes serve Services its cluster does not ask for), and the
// writer deletes it with the cluster.
func clusterServeService(rs *rayv1.RayService, c *rayv1.RayCluster) *corev1.Service {
	plain := rs.DeepCopy()
	plain.Spec.ServeService = nil // KubeRay ignores serveService during incremental upgrades
	svc := clusterbuild.RayServiceServeService(plain, c)
	svc.Name = clusterbuild.ServeServiceName(c)
	svc.Labels[rayv1.LabelOriginCRName] = c.Name
	svc.Labels[rayv1.LabelServe] = c.Name + "-serve"
	return svc
}

func originLabels(rs *rayv1.RayService) map[string]string {
	return map[string]string{rayv1.LabelOriginCRName: rs.Name, rayv1.LabelOriginCRD: clusterbuild.KindRayService}
}

// upgradeOptions are the clusterUpgradeOptions with KubeRay's default maxSurgePercent (validate has checked them).
func upgradeOptions(rs *rayv1.RayService) (step, maxSurge int32, interval time.Duration) {
	o := rs.Spec.UpgradeStrategy.ClusterUpgradeOptions
	return ptr.Deref(o.StepSizePercent, 0), ptr.Deref(o.MaxSurgePercent, 100), time.Duration(ptr.Deref(o.IntervalSeconds, 1)) * time.Second
}

// planRollbackState decides, during an incremental upgrade, whether it is rolled back: the spec no longer matches
// the pending cluster. A spec that matches it again resumes the upgrade.
func planRollbackState(p *plan, active, pending *clusterObs, spec *rayv1.RayClusterSpec, setCond setCondFunc) bool {
	st := &p.status
	if _, action := clusterAction(pending.cluster, spec); action != actionNew {
		if meta.IsStatusConditionTrue(st.Conditions, string(rayv1.RollbackInProgress)) {
			p.StatusEventf(corev1.EventTypeNormal, EventUpgradeResumed, "Upgrade", "the rayClusterConfig matches RayCluster %s again: resuming the upgrade", pending.cluster.Name)
		}
		meta.RemoveStatusCondition(&st.Conditions, string(rayv1.RollbackInProgress))
		return false
	}
	if !meta.IsStatusConditionTrue(st.Conditions, string(rayv1.RollbackInProgress)) {
		msg := "the rayClusterConfig changed during the upgrade: rolling back to the active RayCluster " + active.cluster.Name
		if _, action := clusterAction(active.cluster, spec); action != actionNew {
			msg = "the rayClusterConfig went back to the active RayCluster " + active.cluster.Name + ": rolling back"
		}
		p.StatusEventf(corev1.EventTypeNormal, EventUpgradeRollbackStarted, "Upgrade", "%s", msg)
		setCond(rayv1.RollbackInProgress, metav1.ConditionTrue, rayv1.DesiredClusterSpecChanged, msg)
	}
	return true
}

// initCapacity records the capacity a cluster starts with: 100 for the active cluster and for a first cluster, 0
// for a cluster an upgrade creates.
func initCapacity(st *rayv1.RayServiceStatuses, hasActive bool) {
	if a := &st.ActiveServiceStatus; hasActive && a.TargetCapacity == nil {
		a.TargetCapacity = ptr.To[int32](100)
	}
	if ps := &st.PendingServiceStatus; ps.RayClusterName != "" && ps.TargetCapacity == nil {
		ps.TargetCapacity = ptr.To[int32](100)
		if hasActive {
			ps.TargetCapacity = ptr.To[int32](0)
		}
	}
}

// planCapacity makes the capacity change due now, if any, in the status: it returns the cluster whose Serve config
// must carry it and how to take it back out if Ray does not take it.
func planCapacity(o observed, p *plan, active, pending *clusterObs, rollback bool) (string, func(*rayv1.RayServiceStatuses)) {
	rs, st := o.rs, &p.status
	if !gatewayReady(o.gateway) || !routeReady(o.gateway, o.route) {
		return "", nil
	}
	if !holds(active, serveConfigFor(rs, st.ActiveServiceStatus.TargetCapacity)) || !holds(pending, serveConfigFor(rs, st.PendingServiceStatus.TargetCapacity)) {
		return "", nil
	}
	_, maxSurge, _ := upgradeOptions(rs)
	toPending, goal, ok := nextCapacity(sharesOf(st), maxSurge, rollback)
	if !ok {
		return "", nil
	}
	pick, name := func(s *rayv1.RayServiceStatuses) *rayv1.RayServiceStatus { return &s.ActiveServiceStatus }, active.cluster.Name
	if toPending {
		pick, name = func(s *rayv1.RayServiceStatuses) *rayv1.RayServiceStatus { return &s.PendingServiceStatus }, pending.cluster.Name
	}
	old := pick(st).TargetCapacity
	pick(st).TargetCapacity = ptr.To(goal)
	return name, func(s *rayv1.RayServiceStatuses) { pick(s).TargetCapacity = old }
}

// planTraffic moves traffic, promotes the pending cluster or ends a rollback when their time came (all when step:
// an upgrade runs and no capacity change was planned this reconcile), and plans the HTTPRoute. It returns the active and pending
// clusters after that.
func planTraffic(o observed, p *plan, active, pending *clusterObs, step, rollback, pendingReady bool) (*clusterObs, *clusterObs) {
	rs, st := o.rs, &p.status
	now := metav1.NewTime(o.now)
	hasPending := pending != nil && pending.cluster != nil
	old := *st.DeepCopy()
	s := sharesOf(st)
	a, pw := s.activeTraffic, s.pendingTraffic
	if step {
		size, _, interval := upgradeOptions(rs)
		last := st.PendingServiceStatus.LastTrafficMigratedTime
		if rollback {
			last = st.ActiveServiceStatus.LastTrafficMigratedTime
		}
		var wait time.Duration
		a, pw, wait = nextTraffic(s, size, interval, last, o.now, rollback, pendingReady)
		if wait > 0 {
			p.Requeue(wait)
		}
	}
	recordTraffic(&st.ActiveServiceStatus, a, now)
	if hasPending {
		recordTraffic(&st.PendingServiceStatus, pw, now)
	}
	if a != s.activeTraffic || pw != s.pendingTraffic {
		// The next capacity change can follow as soon as the route is written.
		p.Requeue(0)
	}
	p.routeRevert = func(s *rayv1.RayServiceStatuses) {
		for _, pair := range []struct{ dst, src *rayv1.RayServiceStatus }{
			{&s.ActiveServiceStatus, &old.ActiveServiceStatus}, {&s.PendingServiceStatus, &old.PendingServiceStatus},
		} {
			if pair.dst.RayClusterName == pair.src.RayClusterName {
				pair.dst.TrafficRoutedPercent, pair.dst.LastTrafficMigratedTime = pair.src.TrafficRoutedPercent, pair.src.LastTrafficMigratedTime
			}
		}
	}

	// Promotion and the end of a rollback wait for the HTTPRoute as read back, and for the capacity Ray holds (no
	// change planned now), so that they never run ahead of either.
	switch {
	case !step:
	case hasPending && !rollback && upgradeComplete(st) && routeWeight(o.route, pending.cluster) == 100:
		p.StatusEventf(corev1.EventTypeNormal, EventPromotedPendingCluster, "Upgrade", "RayCluster %s serves all traffic: it replaces RayCluster %s", pending.cluster.Name, active.cluster.Name)
		st.ActiveServiceStatus, st.PendingServiceStatus = st.PendingServiceStatus, rayv1.RayServiceStatus{}
		active, pending = pending, nil
	case hasPending && rollback && rollbackComplete(st, pending.headReady) && routeWeight(o.route, active.cluster) == 100:
		p.StatusEventf(corev1.EventTypeNormal, EventUpgradeRolledBack, "Upgrade", "all traffic is back on RayCluster %s: RayCluster %s is dropped", active.cluster.Name, pending.cluster.Name)
		st.PendingServiceStatus = rayv1.RayServiceStatus{}
		meta.RemoveStatusCondition(&st.Conditions, string(rayv1.RollbackInProgress))
		pending = nil
		p.Requeue(0)
	}
	var pc *rayv1.RayCluster
	if pending != nil {
		pc = pending.cluster
	}
	p.route = desiredRoute(rs, st, active.cluster, pc)
	return active, pending
}
