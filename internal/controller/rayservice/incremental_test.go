package rayservice

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/features"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/validation"
)

// incService is a RayService upgraded incrementally: stepSizePercent 20, maxSurgePercent 50, every 30 s.
func incService() *rayv1.RayService {
	rs := makeIncrementalService("ns", "svc")
	rs.UID, rs.Generation = "rs-uid", 1
	o := rs.Spec.UpgradeStrategy.ClusterUpgradeOptions
	o.StepSizePercent, o.IntervalSeconds = ptr.To[int32](20), ptr.To[int32](30)
	return rs
}

// world plays everything around computePlan for the incremental upgrade: it stores the planned status, lets Ray take
// every Serve config (recording it on the cluster as the writer does), creates the clusters ready, writes the
// Gateway and HTTPRoute and plays a Gateway implementation that accepts them.
type world struct {
	t        *testing.T
	rs       *rayv1.RayService
	now      time.Time
	clusters map[string]*clusterObs
	gateway  *gwv1.Gateway
	route    *gwv1.HTTPRoute
	// sent is the target_capacity of the last Serve config each cluster was sent.
	sent map[string]int32
	// pendingDown makes the pending cluster's head not ready.
	pendingDown bool
	newName     func() string
}

func newWorld(t *testing.T, rs *rayv1.RayService) *world {
	return &world{t: t, rs: rs, now: t0, clusters: map[string]*clusterObs{}, sent: map[string]int32{}, newName: names("svc-old", "svc-new", "svc-third")}
}

func (w *world) observe() observed {
	o := observed{rs: w.rs, now: w.now, newName: w.newName, gatewayAPI: true, gateway: w.gateway, route: w.route}
	for _, c := range w.clusters {
		o.clusters = append(o.clusters, *c.cluster)
	}
	slot := func(name string) *clusterObs {
		if name == "" {
			return nil
		}
		c, ok := w.clusters[name]
		if !ok {
			return &clusterObs{}
		}
		if w.pendingDown && name == w.rs.Status.PendingServiceStatus.RayClusterName {
			down := *c
			down.headReady = false
			return &down
		}
		return c
	}
	o.active, o.pending = slot(w.rs.Status.ActiveServiceStatus.RayClusterName), slot(w.rs.Status.PendingServiceStatus.RayClusterName)
	return o
}

// step runs one reconcile and carries out its plan.
func (w *world) step() *plan {
	w.t.Helper()
	p := computePlan(w.observe())
	if c := p.createCluster; c != nil {
		co := readyCluster(w.rs, c.Name)
		delete(co.cluster.Annotations, clusterbuild.AnnotationServeConfigHash)
		w.clusters[c.Name] = co
	}
	for _, a := range p.apply {
		co := w.clusters[a.cluster.Name]
		co.cluster.Annotations[clusterbuild.AnnotationServeConfigHash] = a.hash
		co.cluster.Annotations[clusterbuild.AnnotationServeConfigHead] = a.headID
		var cfg struct {
			TargetCapacity *int32 `json:"target_capacity"`
		}
		if err := json.Unmarshal([]byte(a.config), &cfg); err != nil || cfg.TargetCapacity == nil {
			w.t.Fatalf("config sent to %s carries no target_capacity: %s", a.cluster.Name, a.config)
		}
		w.sent[a.cluster.Name] = *cfg.TargetCapacity
	}
	if p.gateway != nil {
		w.gateway = p.gateway.DeepCopy()
		w.gateway.Status.Conditions = []metav1.Condition{
			{Type: string(gwv1.GatewayConditionAccepted), Status: metav1.ConditionTrue}, {Type: string(gwv1.GatewayConditionProgrammed), Status: metav1.ConditionTrue},
		}
	}
	if p.route != nil {
		w.route = p.route.DeepCopy()
		w.route.Status.Parents = []gwv1.RouteParentStatus{{ParentRef: p.route.Spec.ParentRefs[0], Conditions: []metav1.Condition{
			{Type: string(gwv1.RouteConditionAccepted), Status: metav1.ConditionTrue}, {Type: string(gwv1.RouteConditionResolvedRefs), Status: metav1.ConditionTrue},
		}}}
	}
	for _, a := range p.annotate {
		if co, ok := w.clusters[a.cluster.Name]; ok {
			if a.value == nil {
				delete(co.cluster.Annotations, a.key)
			} else {
				co.cluster.Annotations[a.key] = *a.value
			}
		}
	}
	for _, c := range p.deleteClusters {
		delete(w.clusters, c.Name)
	}
	w.rs.Status = p.status
	return p
}

// state is where the upgrade stands: capacity/traffic of the active and the pending cluster.
func (w *world) state() string {
	s := sharesOf(&w.rs.Status)
	return fmt.Sprintf("%d/%d %d/%d", s.activeCap, s.activeTraffic, s.pendingCap, s.pendingTraffic)
}

// weights are the HTTPRoute's backends and weights.
func (w *world) weights() string {
	if w.route == nil {
		return "no route"
	}
	return weights(w.route)
}

// run steps, 10 s apart, until done says so, and returns the states passed through (each once, in order).
func (w *world) run(done func() bool) []string {
	w.t.Helper()
	var states []string
	for i := 0; i < 500 && !done(); i++ {
		w.step()
		if s := w.state(); len(states) == 0 || states[len(states)-1] != s {
			states = append(states, s)
		}
		w.now = w.now.Add(10 * time.Second)
	}
	if !done() {
		w.t.Fatalf("not done after 500 reconciles: %s, status %+v", w.state(), w.rs.Status)
	}
	return states
}

// bringUp makes svc-old the active cluster, serving everything.
func (w *world) bringUp() {
	w.t.Helper()
	w.rs.Status = rayv1.RayServiceStatuses{}
	w.run(func() bool { return w.rs.Status.ActiveServiceStatus.RayClusterName == "svc-old" && w.route != nil })
	if got := w.state(); got != "100/100 0/0" {
		w.t.Fatalf("first cluster at %s, want 100/100", got)
	}
	if w.sent["svc-old"] != 100 {
		w.t.Fatalf("first cluster sent target_capacity %d, want 100", w.sent["svc-old"])
	}
}

func TestPlanIncrementalUpgradeWalk(t *testing.T) {
	rs := incService()
	w := newWorld(t, rs)
	w.bringUp()
	if g := w.gateway; g == nil || g.Name != "svc-gateway" || g.Spec.GatewayClassName != "test-gateway-class" ||
		len(g.Spec.Listeners) != 1 || g.Spec.Listeners[0].Port != 80 || g.Spec.Listeners[0].Protocol != gwv1.HTTPProtocolType {
		t.Fatalf("gateway %+v", g)
	}
	if got := w.weights(); got != "svc-old-serve-svc 100%" || w.route.Name != "svc-httproute" {
		t.Fatalf("route %s %s", w.route.Name, got)
	}

	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:new"
	var moves []time.Time
	var lastMove *metav1.Time
	var routes []string
	states := w.run(func() bool {
		if m := w.rs.Status.PendingServiceStatus.LastTrafficMigratedTime; m != nil && (lastMove == nil || !m.Equal(lastMove)) {
			lastMove = m
			moves = append(moves, m.Time)
		}
		if r := w.weights(); len(routes) == 0 || routes[len(routes)-1] != r {
			routes = append(routes, r)
		}
		return w.rs.Status.ActiveServiceStatus.RayClusterName == "svc-new"
	})
	want := []string{
		"100/100 0/0",                                  // the pending cluster is named, created, sent target_capacity 0, added to the route at 0
		"100/100 50/0",                                 // capacity first: maxSurgePercent
		"100/80 50/20", "100/60 50/40", "100/50 50/50", // traffic follows, stepSizePercent at a time, up to the capacity
		"50/50 50/50",  // then the old cluster gives up maxSurgePercent
		"50/50 100/50", // and the new one takes it
		"50/30 100/70", "50/10 100/90", "50/0 100/100",
		"0/0 100/100", // the old cluster is drained
		"100/100 0/0", // and the new one promoted: it is now the active cluster with everything
	}
	if !slices.Equal(states, want) {
		t.Fatalf("upgrade went\n%s\nwant\n%s", strings.Join(states, "\n"), strings.Join(want, "\n"))
	}
	for i := 1; i < len(moves); i++ {
		if d := moves[i].Sub(moves[i-1]); d < 30*time.Second {
			t.Errorf("traffic moved %s after the previous move, before intervalSeconds (30 s): %v", d, moves)
		}
	}
	if w.sent["svc-new"] != 100 || w.sent["svc-old"] != 0 {
		t.Errorf("Ray was sent target_capacity %v, want svc-new 100 and svc-old 0", w.sent)
	}
	wantRoutes := []string{"svc-old-serve-svc 100%", "svc-old-serve-svc 100%, svc-new-serve-svc 0%", "svc-old-serve-svc 80%, svc-new-serve-svc 20%"}
	if len(routes) < 3 || !slices.Equal(routes[:3], wantRoutes) || routes[len(routes)-1] != "svc-new-serve-svc 100%" {
		t.Errorf("HTTPRoute went %q", routes)
	}
	st := w.rs.Status
	if st.PendingServiceStatus.RayClusterName != "" || !meta.IsStatusConditionFalse(st.Conditions, string(rayv1.UpgradeInProgress)) {
		t.Errorf("after promotion: pending %q, conditions %+v", st.PendingServiceStatus.RayClusterName, st.Conditions)
	}
	// The old cluster goes after the deletion delay, as after any upgrade.
	w.run(func() bool { _, ok := w.clusters["svc-old"]; return !ok })
}

// The new cluster of an incremental upgrade is created with its worker groups' replicas unset, as KubeRay (v1.5.0
// and v1.7, constructRayClusterForRayService) creates it: it starts at minReplicas and the autoscaler grows it with
// the Serve target_capacity. The RayService's first cluster, and a NewCluster upgrade's, keep the spec's replicas.
func TestPlanIncrementalNewClusterStartsAtMinReplicas(t *testing.T) {
	rs := incService()
	rs.Spec.RayClusterSpec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](3)
	rs.Spec.RayClusterSpec.WorkerGroupSpecs[0].MinReplicas = ptr.To[int32](1)
	rs.Spec.RayClusterSpec.WorkerGroupSpecs[0].MaxReplicas = ptr.To[int32](5)
	w := newWorld(t, rs)
	created := map[string]*rayv1.RayCluster{}
	step := func() {
		if c := w.step().createCluster; c != nil {
			created[c.Name] = c.DeepCopy()
		}
	}
	for i := 0; i < 50 && w.rs.Status.ActiveServiceStatus.RayClusterName != "svc-old"; i++ {
		step()
		w.now = w.now.Add(10 * time.Second)
	}
	first := created["svc-old"]
	if first == nil || first.Spec.WorkerGroupSpecs[0].Replicas == nil || *first.Spec.WorkerGroupSpecs[0].Replicas != 3 {
		t.Fatalf("first cluster created as %+v, want the spec's replicas (3)", first)
	}
	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:new"
	for i := 0; i < 50 && created["svc-new"] == nil; i++ {
		step()
		w.now = w.now.Add(10 * time.Second)
	}
	c := created["svc-new"]
	if c == nil {
		t.Fatal("the upgrade created no new cluster")
	}
	for _, g := range c.Spec.WorkerGroupSpecs {
		if g.Replicas != nil {
			t.Errorf("upgrade's new cluster: group %s created with replicas %d, want unset (it starts at minReplicas)", g.GroupName, *g.Replicas)
		}
		if ptr.Deref(g.MinReplicas, -1) != 1 || ptr.Deref(g.MaxReplicas, -1) != 5 {
			t.Errorf("upgrade's new cluster: group %s min/max %v/%v, want the spec's 1/5", g.GroupName, g.MinReplicas, g.MaxReplicas)
		}
	}
	// Its replicas unset are not a change of spec: the plan neither updates it in place nor replaces it.
	if got := rs.Spec.RayClusterSpec.WorkerGroupSpecs[0].Replicas; got == nil || *got != 3 {
		t.Errorf("the RayService's own spec was changed: replicas %v", got)
	}
	w.clusters["svc-new"].cluster.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](0) // as the CRD defaults it
	if p := computePlan(w.observe()); p.createCluster != nil || len(p.updateClusters) != 0 || len(p.deleteClusters) != 0 {
		t.Errorf("the new cluster at replicas 0 planned again: create %v, update %d, delete %d", p.createCluster != nil, len(p.updateClusters), len(p.deleteClusters))
	}
}

// A spec that goes back mid-upgrade rolls the upgrade back: traffic returns stepSizePercent at a time, the pending
// cluster's capacity is taken back, and the pending cluster is dropped.
func TestPlanIncrementalRollback(t *testing.T) {
	rs := incService()
	w := newWorld(t, rs)
	w.bringUp()
	oldImage := rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image
	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:new"
	w.run(func() bool { return w.state() == "100/60 50/40" })

	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = oldImage
	p := w.step()
	if c := meta.FindStatusCondition(w.rs.Status.Conditions, string(rayv1.RollbackInProgress)); c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(rayv1.DesiredClusterSpecChanged) {
		t.Fatalf("RollbackInProgress %+v", c)
	}
	if len(p.deleteClusters) != 0 || p.createCluster != nil {
		t.Fatalf("rollback deleted %v / created %v: the pending cluster serves until its traffic is back", p.deleteClusters, p.createCluster)
	}
	states := w.run(func() bool { return w.rs.Status.PendingServiceStatus.RayClusterName == "" })
	want := []string{"100/60 50/40", "100/80 50/20", "100/100 50/0", "100/100 0/0"}
	if !slices.Equal(states, want) {
		t.Fatalf("rollback went\n%s\nwant\n%s", strings.Join(states, "\n"), strings.Join(want, "\n"))
	}
	st := w.rs.Status
	if st.ActiveServiceStatus.RayClusterName != "svc-old" || meta.FindStatusCondition(st.Conditions, string(rayv1.RollbackInProgress)) != nil {
		t.Fatalf("after the rollback: active %q, conditions %+v", st.ActiveServiceStatus.RayClusterName, st.Conditions)
	}
	w.step()
	if got := w.weights(); got != "svc-old-serve-svc 100%" {
		t.Errorf("route after the rollback: %s", got)
	}
	if w.sent["svc-new"] != 0 {
		t.Errorf("the dropped cluster was left at target_capacity %d", w.sent["svc-new"])
	}
	w.run(func() bool { _, ok := w.clusters["svc-new"]; return !ok })
}

// A pending cluster whose head fails during a rollback cannot be asked to scale down: the rollback completes once
// the traffic and capacity are back on the active cluster. A third spec then starts a new upgrade.
func TestPlanIncrementalRollbackFailedPending(t *testing.T) {
	rs := incService()
	w := newWorld(t, rs)
	w.bringUp()
	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:new"
	w.run(func() bool { return w.state() == "100/50 50/50" })
	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:third"
	w.pendingDown = true
	states := w.run(func() bool { return w.rs.Status.PendingServiceStatus.RayClusterName != "svc-new" })
	// Traffic moves back even though the pending cluster is down; its capacity cannot be taken back.
	want := []string{"100/50 50/50", "100/70 50/30", "100/90 50/10", "100/100 50/0"}
	if !slices.Equal(states[:len(want)], want) {
		t.Fatalf("rollback went\n%s\nwant it to start\n%s", strings.Join(states, "\n"), strings.Join(want, "\n"))
	}
	w.pendingDown = false
	// A new upgrade towards the third spec.
	w.run(func() bool { return w.rs.Status.PendingServiceStatus.RayClusterName == "svc-third" })
}

// Traffic never moves to a pending cluster whose applications are not RUNNING.
func TestPlanIncrementalWaitsForReadyPending(t *testing.T) {
	rs := incService()
	w := newWorld(t, rs)
	w.bringUp()
	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:new"
	w.run(func() bool { return w.state() == "100/100 50/0" })
	for name, a := range w.clusters["svc-new"].details.Applications {
		a.Status = "DEPLOYING"
		w.clusters["svc-new"].details.Applications[name] = a
	}
	for range 20 {
		w.step()
		w.now = w.now.Add(time.Minute)
	}
	if got := w.state(); got != "100/100 50/0" {
		t.Fatalf("traffic moved to a cluster not RUNNING: %s", got)
	}
}

func TestValidateIncremental(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*rayv1.RayService)
		want   string
	}{
		"valid": {func(*rayv1.RayService) {}, ""},
		"stepOverSurge": {func(rs *rayv1.RayService) {
			rs.Spec.UpgradeStrategy.ClusterUpgradeOptions.StepSizePercent = ptr.To[int32](60)
		}, "spec.upgradeStrategy.clusterUpgradeOptions.stepSizePercent"},
		"noOptions": {func(rs *rayv1.RayService) { rs.Spec.UpgradeStrategy.ClusterUpgradeOptions = nil }, "spec.upgradeStrategy.clusterUpgradeOptions: required"},
		"noStep":    {func(rs *rayv1.RayService) { rs.Spec.UpgradeStrategy.ClusterUpgradeOptions.StepSizePercent = nil }, "stepSizePercent: required"},
		"zeroInterval": {func(rs *rayv1.RayService) {
			rs.Spec.UpgradeStrategy.ClusterUpgradeOptions.IntervalSeconds = ptr.To[int32](0)
		}, "intervalSeconds"},
		"noGatewayClass": {func(rs *rayv1.RayService) { rs.Spec.UpgradeStrategy.ClusterUpgradeOptions.GatewayClassName = "" }, "gatewayClassName: required"},
		"surgeOver100": {func(rs *rayv1.RayService) {
			rs.Spec.UpgradeStrategy.ClusterUpgradeOptions.MaxSurgePercent = ptr.To[int32](101)
		}, "maxSurgePercent"},
		"noAutoscaler":    {func(rs *rayv1.RayService) { rs.Spec.RayClusterSpec.EnableInTreeAutoscaling = nil }, "spec.rayClusterConfig.enableInTreeAutoscaling"},
		"defaultMaxSurge": {func(rs *rayv1.RayService) { rs.Spec.UpgradeStrategy.ClusterUpgradeOptions.MaxSurgePercent = nil }, ""},
	} {
		rs := incService()
		tc.change(rs)
		got := validation.Message(validate(rs))
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
	// Without the Gateway API the upgrade cannot run: refused, nothing created.
	rs := incService()
	p := computePlan(observed{rs: rs, now: t0, newName: names("svc-aaaaa")})
	if r := meta.FindStatusCondition(p.status.Conditions, string(rayv1.RayServiceReady)); r == nil || r.Reason != string(rayv1.RayServiceValidationFailed) || !strings.Contains(r.Message, "Gateway API") {
		t.Fatalf("Ready %+v", r)
	}
	if p.status.PendingServiceStatus.RayClusterName != "" || p.gateway != nil {
		t.Fatalf("planned a cluster or a Gateway without the Gateway API")
	}
}

// With KubeRay's RayServiceIncrementalUpgrade gate off, NewClusterWithIncrementalUpgrade means no upgrade, as in
// KubeRay v1.7.0 (zero-downtime upgrade is off for it): its options are not checked, and no Gateway API is needed.
func TestIncrementalUpgradeGateOff(t *testing.T) {
	features.SetForTest(t, features.RayServiceIncrementalUpgrade, false)
	rs := incService()
	rs.Spec.UpgradeStrategy.ClusterUpgradeOptions = nil
	if got := validation.Message(validate(rs)); got != "" {
		t.Errorf("validate: %q", got)
	}
	if incremental(rs) || upgradeType(rs) != rayv1.RayServiceUpgradeNone {
		t.Errorf("incremental %v, upgrade type %q", incremental(rs), upgradeType(rs))
	}
	p := computePlan(observed{rs: incService(), now: t0, newName: names("svc-aaaaa")})
	if r := meta.FindStatusCondition(p.status.Conditions, string(rayv1.RayServiceReady)); r != nil && r.Reason == string(rayv1.RayServiceValidationFailed) {
		t.Errorf("refused with the gate off: %+v", r)
	}
	if p.gateway != nil {
		t.Error("planned a Gateway with the gate off")
	}
}

// A capacity change planned for the pending cluster while its head Service routes nowhere yet is taken back with the
// Serve config it would have ridden (ray.ErrNoEndpoints within routeGrace): the status keeps the target capacity Ray
// holds, and the change is made once the Service routes.
func TestPlanIncrementalCapacityWaitsForTheServiceRoute(t *testing.T) {
	rs := incService()
	w := newWorld(t, rs)
	w.bringUp()
	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:new"
	w.run(func() bool {
		_, sent := w.sent["svc-new"]
		return sent && strings.Contains(w.weights(), "svc-new-serve-svc 0%")
	})
	if got := w.state(); got != "100/100 0/0" {
		t.Fatalf("pending cluster serving at %s, want 100/100 0/0", got)
	}
	c := w.clusters["svc-new"]
	c.detailsErr = fmt.Errorf("get serve details: %w", ray.ErrNoEndpoints)
	c.head.Status.Conditions[0].LastTransitionTime = metav1.NewTime(w.now.Add(-time.Second))
	for range 2 {
		p := w.step()
		for _, a := range p.apply {
			if a.cluster.Name == "svc-new" {
				t.Fatalf("Serve config sent to a head its Service does not route to yet: %+v", a)
			}
		}
		if got := w.state(); got != "100/100 0/0" {
			t.Fatalf("status at %s without the Serve config that carries it, want 100/100 0/0", got)
		}
		if d := p.RequeueAfter(); d <= 0 || d > routeRetry {
			t.Errorf("requeue after %v, want at most %v", d, routeRetry)
		}
		w.now = w.now.Add(time.Second)
	}
	c.detailsErr = nil
	w.step()
	if got := w.state(); got != "100/100 50/0" || w.sent["svc-new"] != 50 {
		t.Fatalf("once routed: %s, sent target_capacity %d; want 100/100 50/0 and 50", got, w.sent["svc-new"])
	}
}
