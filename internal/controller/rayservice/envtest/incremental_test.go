package envtest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayservice"
	"github.com/manta-dev/manta/internal/testutil"
)

// makeIncrementalService is makeService upgraded incrementally: stepSizePercent 25, maxSurgePercent 50, every 60 s.
func makeIncrementalService(ns, name string) *rayv1.RayService {
	rs := makeService(ns, name)
	rs.Spec.RayClusterSpec.EnableInTreeAutoscaling = ptr.To(true)
	rs.Spec.UpgradeStrategy = &rayv1.RayServiceUpgradeStrategy{
		Type: ptr.To(rayv1.NewClusterWithIncrementalUpgrade),
		ClusterUpgradeOptions: &rayv1.ClusterUpgradeOptions{
			StepSizePercent: ptr.To[int32](25), MaxSurgePercent: ptr.To[int32](50), IntervalSeconds: ptr.To[int32](60), GatewayClassName: "test-gateway-class",
		},
	}
	return rs
}

// TestIncrementalUpgrade runs the controllers on a control plane that serves the Gateway API's CRDs (from the
// gateway-api module), the test playing the Gateway implementation (it accepts the Gateway and the HTTPRoute), and
// walks an upgrade and a rollback through the HTTPRoute's weights and the RayService's status.
func TestIncrementalUpgrade(t *testing.T) {
	cfg, cl := testutil.StartEnvtestWithCRDs(t, append([]string{filepath.Join(testutil.MustRepoRoot(t), "config", "crd")}, testutil.GatewayAPICRDs(t)...)...)
	// The controller's clock moves only when the test says, so a step waits for intervalSeconds without the test
	// waiting.
	clock := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	e := startControllers(t, cfg, cl, rayservice.Options{MaxConcurrentReconciles: 4, RequeueInterval: 300 * time.Millisecond, Clock: clock})
	// One after the other: they share the clock, and each expects it to move only when it says.
	t.Run("Upgrade", func(t *testing.T) { testIncrementalUpgrade(t, e, clock) })
	t.Run("Rollback", func(t *testing.T) { testIncrementalRollback(t, e, clock) })
}

// acceptGateway plays the Gateway implementation: once the Gateway and the HTTPRoute exist, they are Accepted and
// Programmed / ResolvedRefs.
func (e *env) acceptGateway(t *testing.T, rs *rayv1.RayService) {
	t.Helper()
	ctx := context.Background()
	cond := func(typ string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: typ, Message: "test", LastTransitionTime: metav1.Now()}
	}
	e.Eventually(t, "Gateway accepted", func() (bool, string) {
		g := &gwv1.Gateway{}
		if err := e.cl.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: rs.Name + "-gateway"}, g); err != nil {
			return false, err.Error()
		}
		g.Status.Conditions = []metav1.Condition{cond(string(gwv1.GatewayConditionAccepted)), cond(string(gwv1.GatewayConditionProgrammed))}
		if err := e.cl.Status().Update(ctx, g); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	e.Eventually(t, "HTTPRoute accepted", func() (bool, string) {
		r := &gwv1.HTTPRoute{}
		if err := e.cl.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: rs.Name + "-httproute"}, r); err != nil {
			return false, err.Error()
		}
		r.Status.Parents = []gwv1.RouteParentStatus{{
			ParentRef:      r.Spec.ParentRefs[0],
			ControllerName: "example.com/test-gateway",
			Conditions:     []metav1.Condition{cond(string(gwv1.RouteConditionAccepted)), cond(string(gwv1.RouteConditionResolvedRefs))},
		}}
		if err := e.cl.Status().Update(ctx, r); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// routeWeights reads the HTTPRoute's backends and weights: "a-serve-svc 75%, b-serve-svc 25%".
func (e *env) routeWeights(t *testing.T, rs *rayv1.RayService) string {
	t.Helper()
	r := &gwv1.HTTPRoute{}
	if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: rs.Namespace, Name: rs.Name + "-httproute"}, r); err != nil {
		if apierrors.IsNotFound(err) {
			return "no route"
		}
		t.Fatal(err)
	}
	var parts []string
	for _, rule := range r.Spec.Rules {
		for _, b := range rule.BackendRefs {
			parts = append(parts, fmt.Sprintf("%s %d%%", b.Name, ptr.Deref(b.Weight, 1)))
		}
	}
	return strings.Join(parts, ", ")
}

func share(s rayv1.RayServiceStatus) string {
	return fmt.Sprintf("%s capacity %d traffic %d", s.RayClusterName, ptr.Deref(s.TargetCapacity, -1), ptr.Deref(s.TrafficRoutedPercent, -1))
}

// waitShares waits until the route's weights and the status are as wanted.
func (e *env) waitShares(t *testing.T, rs *rayv1.RayService, route, active, pending string) *rayv1.RayService {
	t.Helper()
	var got *rayv1.RayService
	e.Eventually(t, fmt.Sprintf("route %q, active %q, pending %q", route, active, pending), func() (bool, string) {
		got = testutil.Get(t, e.Env, rs)
		w, a, p := e.routeWeights(t, rs), share(got.Status.ActiveServiceStatus), share(got.Status.PendingServiceStatus)
		return w == route && a == active && p == pending, fmt.Sprintf("route %q, active %q, pending %q", w, a, p)
	})
	return got
}

// startIncremental brings rs up on its first cluster behind the Gateway, then changes its cluster spec and makes the
// new cluster ready; it returns the two clusters' names.
func (e *env) startIncremental(t *testing.T, rs *rayv1.RayService) (old, pending string) {
	t.Helper()
	old = e.bringUp(t, rs)
	e.acceptGateway(t, rs)
	e.waitShares(t, rs, old+"-serve-svc 100%", old+" capacity 100 traffic 100", " capacity -1 traffic -1")
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) {
		s.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "rayproject/ray:2.52.1"
	})
	pending = e.waitPending(t, rs, "")
	// As KubeRay creates it, the new cluster's worker groups have no replicas (the CRD's default, 0): it starts at
	// minReplicas (0 here), its head alone, and the autoscaler grows it.
	c := &rayv1.RayCluster{}
	e.Eventually(t, "the new cluster created", func() (bool, string) {
		err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: rs.Namespace, Name: pending}, c)
		return err == nil, fmt.Sprint(err)
	})
	if r := c.Spec.WorkerGroupSpecs[0].Replicas; r == nil || *r != 0 {
		t.Fatalf("the new cluster's worker replicas are %v, want 0 (unset, defaulted by the CRD)", r)
	}
	e.setReady(t, rs.Namespace, pending, 1)
	return old, pending
}

func testIncrementalUpgrade(t *testing.T, e *env, clock *clocktesting.FakeClock) {
	ctx := context.Background()
	ns := e.Namespace(t)
	rs := makeIncrementalService(ns, "svc")
	old, pending := e.startIncremental(t, rs)

	g := &gwv1.Gateway{}
	if err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "svc-gateway"}, g); err != nil {
		t.Fatal(err)
	}
	if g.Spec.GatewayClassName != "test-gateway-class" || len(g.Spec.Listeners) != 1 || g.Spec.Listeners[0].Name != "http" ||
		g.Spec.Listeners[0].Port != 80 || g.Spec.Listeners[0].Protocol != gwv1.HTTPProtocolType || !metav1.IsControlledBy(g, testutil.Get(t, e.Env, rs)) {
		t.Errorf("Gateway %+v", g)
	}

	// Capacity first: the new cluster gets maxSurgePercent (50) without waiting; traffic does not move before
	// intervalSeconds passed on the controller's clock.
	both := func(a, p int) string { return fmt.Sprintf("%s-serve-svc %d%%, %s-serve-svc %d%%", old, a, pending, p) }
	e.waitShares(t, rs, both(100, 0), old+" capacity 100 traffic 100", pending+" capacity 50 traffic 0")
	e.waitReconciles(t, ns, pending, 5)
	if w := e.routeWeights(t, rs); w != both(100, 0) {
		t.Fatalf("traffic moved before intervalSeconds: %s", w)
	}
	if _, cfg := e.deploys(ns, pending); !strings.Contains(cfg, `"target_capacity":50`) {
		t.Errorf("new cluster's Serve config %s, want target_capacity 50", cfg)
	}
	// The backends are the clusters' own Serve Services, selecting each cluster's serving pods.
	for _, c := range []string{old, pending} {
		svc := &corev1.Service{}
		if err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: c + "-serve-svc"}, svc); err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Selector[rayv1.LabelCluster] != c || svc.Spec.Selector[rayv1.LabelServe] != "true" {
			t.Errorf("Service %s selects %v", svc.Name, svc.Spec.Selector)
		}
	}

	for _, step := range []struct {
		route           string
		active, pending string
	}{
		{both(75, 25), old + " capacity 100 traffic 75", pending + " capacity 50 traffic 25"},
		// Traffic caught up with capacity: the old cluster gives up maxSurgePercent and the new one takes it,
		// without waiting; then traffic follows, a step per interval.
		{both(50, 50), old + " capacity 50 traffic 50", pending + " capacity 100 traffic 50"},
		{both(25, 75), old + " capacity 50 traffic 25", pending + " capacity 100 traffic 75"},
	} {
		clock.Step(60 * time.Second)
		got := e.waitShares(t, rs, step.route, step.active, step.pending)
		if m := got.Status.PendingServiceStatus.LastTrafficMigratedTime; m == nil || !m.Time.Equal(clock.Now()) {
			t.Errorf("lastTrafficMigratedTime %v, want the controller's clock %v", m, clock.Now())
		}
	}

	// The last step: all traffic on the new cluster, the old one drained (target_capacity 0), the new cluster
	// promoted.
	clock.Step(60 * time.Second)
	got := e.waitActive(t, rs, pending)
	e.waitShares(t, rs, pending+"-serve-svc 100%", pending+" capacity 100 traffic 100", " capacity -1 traffic -1")
	if _, cfg := e.deploys(ns, old); !strings.Contains(cfg, `"target_capacity":0`) {
		t.Errorf("old cluster's last Serve config %s, want target_capacity 0", cfg)
	}
	if u := meta.FindStatusCondition(got.Status.Conditions, string(rayv1.UpgradeInProgress)); u == nil || u.Status != metav1.ConditionFalse {
		t.Errorf("UpgradeInProgress %+v after the promotion", u)
	}
	if head, _ := e.selectors(t, rs); head != pending {
		t.Errorf("head Service points at %q, want %q", head, pending)
	}
	// The old cluster and its Serve Service go after the deletion delay (3 s on the controller's clock).
	clock.Step(10 * time.Second)
	e.Eventually(t, "old cluster and its Serve Service deleted", func() (bool, string) {
		_, ok := e.cluster(t, ns, old)
		err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: old + "-serve-svc"}, &corev1.Service{})
		return !ok && apierrors.IsNotFound(err), fmt.Sprintf("cluster there %v, Service %v", ok, err)
	})
	for _, reason := range []string{rayservice.EventCreatedGateway, rayservice.EventCreatedHTTPRoute, rayservice.EventUpdatedHTTPRoute, rayservice.EventUpdatedServeTargetCapacity, rayservice.EventPromotedPendingCluster} {
		e.Eventually(t, "event "+reason, func() (bool, string) { return e.hasEvent(t, rs, reason) })
	}

	// Suspended, the service loses its Gateway and HTTPRoute with its clusters, as under KubeRay.
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) { s.Spec.Suspend = true })
	e.Eventually(t, "Gateway and HTTPRoute deleted", func() (bool, string) {
		gerr := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "svc-gateway"}, &gwv1.Gateway{})
		rerr := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "svc-httproute"}, &gwv1.HTTPRoute{})
		return apierrors.IsNotFound(gerr) && apierrors.IsNotFound(rerr), fmt.Sprintf("Gateway %v, HTTPRoute %v", gerr, rerr)
	})
}

// The spec goes back mid-upgrade: traffic returns to the old cluster stepSizePercent at a time, the new cluster's
// capacity is taken back, and the new cluster is dropped.
func testIncrementalRollback(t *testing.T, e *env, clock *clocktesting.FakeClock) {
	ns := e.Namespace(t)
	rs := makeIncrementalService(ns, "svc")
	oldImage := rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image
	old, pending := e.startIncremental(t, rs)
	both := func(a, p int) string { return fmt.Sprintf("%s-serve-svc %d%%, %s-serve-svc %d%%", old, a, pending, p) }
	e.waitShares(t, rs, both(100, 0), old+" capacity 100 traffic 100", pending+" capacity 50 traffic 0")
	clock.Step(60 * time.Second)
	e.waitShares(t, rs, both(75, 25), old+" capacity 100 traffic 75", pending+" capacity 50 traffic 25")

	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) {
		s.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = oldImage
	})
	e.Eventually(t, "RollbackInProgress", func() (bool, string) {
		c := cond(testutil.Get(t, e.Env, rs), rayv1.RollbackInProgress)
		return c.Status == metav1.ConditionTrue && c.Reason == string(rayv1.DesiredClusterSpecChanged), fmt.Sprintf("%+v", c)
	})
	if _, ok := e.cluster(t, ns, pending); !ok {
		t.Fatalf("the new cluster was deleted while it still had traffic")
	}
	// Traffic back (a step of 25 after intervalSeconds), then the new cluster's capacity: it is dropped.
	clock.Step(60 * time.Second)
	got := e.waitShares(t, rs, old+"-serve-svc 100%", old+" capacity 100 traffic 100", " capacity -1 traffic -1")
	if c := meta.FindStatusCondition(got.Status.Conditions, string(rayv1.RollbackInProgress)); c != nil {
		t.Errorf("RollbackInProgress %+v after the rollback", c)
	}
	if _, cfg := e.deploys(ns, pending); !strings.Contains(cfg, `"target_capacity":0`) {
		t.Errorf("dropped cluster's last Serve config %s, want target_capacity 0", cfg)
	}
	e.Eventually(t, "event "+rayservice.EventUpgradeRolledBack, func() (bool, string) { return e.hasEvent(t, rs, rayservice.EventUpgradeRolledBack) })
	clock.Step(10 * time.Second)
	e.Eventually(t, "dropped cluster deleted", func() (bool, string) {
		_, ok := e.cluster(t, ns, pending)
		return !ok, "still there"
	})
}
