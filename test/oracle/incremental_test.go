package oracle

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

// The incremental upgrade scenario (upgradeStrategy NewClusterWithIncrementalUpgrade). KubeRay v1.5.0 has it as an
// alpha feature behind its RayServiceIncrementalUpgrade gate, which startKubeRay turns on; Manta always has it, as
// KubeRay v1.7 does. The dev cluster serves the Gateway API (GatewayClass, Gateway, HTTPRoute) but runs no Gateway
// implementation: the test creates the GatewayClass the RayService names, and the Gateway and HTTPRoute the
// operators create keep the status the CRDs default to (Accepted and Programmed Unknown, "Pending"). Both
// operators then hold the new cluster's Serve target capacity at 0, and with it its traffic: that is the first
// state compared. The test then plays the Gateway implementation (Gateway Accepted and Programmed, the route
// Accepted with its refs resolved), and both operators walk the upgrade to its end, a traffic step every
// intervalSeconds: the final state is compared, and so is every state the HTTPRoute's weights and the RayService's
// shares (targetCapacity, trafficRoutedPercent) went through on the way, as the test's watch saw them.

// oracleGatewayClass is the GatewayClass the scenario's RayService names; the test creates it, nothing claims it.
const oracleGatewayClass = "oracle-gateway-class"

// incrementalIntervalSeconds is the scenario's intervalSeconds: short, so the upgrade's steps take seconds.
const incrementalIntervalSeconds = 2

const incrementalServeConfig = `applications:
  - name: fruit_app
    import_path: fruit.deployment_graph
    route_prefix: /fruit
`

// incrementalService is a RayService upgraded incrementally: 25% of the traffic a step, capacity 50% at a time,
// every incrementalIntervalSeconds; its old cluster is deleted as soon as traffic left it.
func incrementalService() *rayv1.RayService {
	rc := testutil.MakeRayCluster("", "unused").Workers("small", 1).Autoscaling().Obj()
	return &rayv1.RayService{
		TypeMeta:   metav1.TypeMeta{APIVersion: "ray.io/v1", Kind: "RayService"},
		ObjectMeta: metav1.ObjectMeta{Name: "svc"},
		Spec: rayv1.RayServiceSpec{
			ServeConfigV2:                  incrementalServeConfig,
			RayClusterSpec:                 rc.Spec,
			RayClusterDeletionDelaySeconds: ptr.To[int32](0),
			UpgradeStrategy: &rayv1.RayServiceUpgradeStrategy{
				Type: ptr.To(rayv1.NewClusterWithIncrementalUpgrade),
				ClusterUpgradeOptions: &rayv1.ClusterUpgradeOptions{
					StepSizePercent: ptr.To[int32](25), MaxSurgePercent: ptr.To[int32](50),
					IntervalSeconds: ptr.To[int32](incrementalIntervalSeconds), GatewayClassName: oracleGatewayClass,
				},
			},
		},
	}
}

// incrementalScenario: the service comes up behind its Gateway; its cluster spec changes (a new head image), so a
// new cluster is made; the Gateway is programmed and the upgrade runs to its end.
func incrementalScenario(t *testing.T) scenario {
	return scenario{
		name:  "incremental-upgrade",
		objs:  []*unstructured.Unstructured{unstructuredService(t, incrementalService())},
		setup: createGatewayClass,
		steps: []step{
			{"new-cluster-spec", afterKubeRayEventBudget(servicePatch(`[{"op":"replace","path":"/spec/rayClusterConfig/headGroupSpec/template/spec/containers/0/image","value":"rayproject/ray:2.53.0"}]`))},
			{"gateway-programmed", programGateway},
		},
		history: upgradeHistories,
	}
}

// kubeRayEventBudget is how many events client-go's core/v1 recorder writes about one object and event type before
// its spam filter drops them (k8s.io/client-go/tools/record, defaultSpamBurst; then one per 5 minutes). KubeRay
// v1.5.0 records through it (GetEventRecorderFor; v1.7 uses the events.k8s.io recorder, which drops nothing).
const kubeRayEventBudget = 25

// afterKubeRayEventBudget runs do once KubeRay v1.5.0 has spent its budget of Normal events about the RayService,
// which it does within seconds: it records UpdatedGateway and UpdatedHTTPRoute on every reconcile (every 2 s). The
// scenario's start may settle between two such reconciles with some of the budget left, and whether KubeRay's events
// of the upgrade (the new cluster's creation and Serve config, capacity changes, the promotion, the old cluster's
// deletion) are written would then depend on how many reconciles ran first; after this barrier they are all dropped
// (differences.yaml says so), run after run. Each event the filter passes is one create (count 1) or one count
// increment of an Event, so the counts of KubeRay's Normal Events about the RayService add up to what it passed.
func afterKubeRayEventBudget(do func(*testing.T, side, string)) func(*testing.T, side, string) {
	return func(t *testing.T, sd side, ns string) {
		if sd.name == "kuberay" {
			testutil.Eventually(t, 3*time.Minute, sd.name+": its Normal events about the RayService at the spam filter's budget", func() (bool, string) {
				events := &corev1.EventList{}
				if err := sd.cl.List(context.Background(), events, client.InNamespace(ns)); err != nil {
					return false, err.Error()
				}
				passed := int32(0)
				for _, e := range events.Items {
					if e.InvolvedObject.Kind == "RayService" && e.InvolvedObject.Name == "svc" && e.Type == corev1.EventTypeNormal {
						passed += max(e.Count, 1)
					}
				}
				return passed >= kubeRayEventBudget, fmt.Sprintf("%d of %d passed", passed, kubeRayEventBudget)
			})
		}
		do(t, sd, ns)
	}
}

// createGatewayClass creates the cluster's one GatewayClass for the scenario, naming a controller that does not run.
func createGatewayClass(t *testing.T, cl client.Client) {
	gc := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: oracleGatewayClass},
		Spec: gwv1.GatewayClassSpec{ControllerName: "oracle.manta.dev/played-by-the-test"}}
	if err := cl.Create(context.Background(), gc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create GatewayClass: %v", err)
	}
}

func servicePatch(p string) func(*testing.T, side, string) {
	return func(t *testing.T, sd side, ns string) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(rayServiceGVK)
		u.SetNamespace(ns)
		u.SetName("svc")
		if err := sd.cl.Patch(context.Background(), u, client.RawPatch(types.JSONPatchType, []byte(p))); err != nil {
			t.Fatalf("%s: patch: %v", sd.name, err)
		}
	}
}

// programGateway plays the Gateway implementation: the RayService's Gateway is Accepted and Programmed, its
// HTTPRoute Accepted by the Gateway with its refs resolved.
func programGateway(t *testing.T, sd side, ns string) {
	ctx := context.Background()
	cond := func(typ string, generation int64) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: typ, Message: "played by the oracle",
			ObservedGeneration: generation, LastTransitionTime: metav1.Now()}
	}
	g := &gwv1.Gateway{}
	if err := sd.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "svc-gateway"}, g); err != nil {
		t.Fatalf("%s: %v", sd.name, err)
	}
	g.Status.Conditions = []metav1.Condition{cond(string(gwv1.GatewayConditionAccepted), g.Generation), cond(string(gwv1.GatewayConditionProgrammed), g.Generation)}
	if err := sd.cl.Status().Update(ctx, g); err != nil {
		t.Fatalf("%s: Gateway status: %v", sd.name, err)
	}
	r := &gwv1.HTTPRoute{}
	if err := sd.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "svc-httproute"}, r); err != nil {
		t.Fatalf("%s: %v", sd.name, err)
	}
	if len(r.Spec.ParentRefs) == 0 {
		t.Fatalf("%s: HTTPRoute without parentRefs", sd.name)
	}
	r.Status.Parents = []gwv1.RouteParentStatus{{
		ParentRef: r.Spec.ParentRefs[0], ControllerName: "oracle.manta.dev/played-by-the-test",
		Conditions: []metav1.Condition{cond(string(gwv1.RouteConditionAccepted), r.Generation), cond(string(gwv1.RouteConditionResolvedRefs), r.Generation)},
	}}
	if err := sd.cl.Status().Update(ctx, r); err != nil {
		t.Fatalf("%s: HTTPRoute status: %v", sd.name, err)
	}
}

// snapshotGatewayAPI adds the namespace's Gateways and HTTPRoutes (spec and metadata: their status is the test's or
// the CRDs' default) to the snapshot. An incremental upgrade whose Gateway is programmed moves on a timer no work
// queue shows (intervalSeconds): it is moving until the pending cluster is promoted; a RayService's cluster its
// status no longer names is moving until deleted (rayClusterDeletionDelaySeconds, a timer too), and what a deleted
// cluster owned until the garbage collector took it.
func snapshotGatewayAPI(t *testing.T, sd side, ns string, s *snapshot, services, clusters []unstructured.Unstructured,
	toMap func(any) map[string]any, saw func(string, metav1.Object), move func(string, ...any)) {
	ctx := context.Background()
	gws := &gwv1.GatewayList{}
	if err := sd.cl.List(ctx, gws, client.InNamespace(ns)); err != nil {
		t.Fatalf("%s: list Gateways: %v", sd.name, err)
	}
	programmed := false
	for i := range gws.Items {
		g := &gws.Items[i]
		saw("gateway", g)
		m := toMap(g)
		deleteFields(m, "status")
		s.objects["gateway/"+g.Name] = m
		programmed = programmed || meta.IsStatusConditionTrue(g.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
	}
	routes := &gwv1.HTTPRouteList{}
	if err := sd.cl.List(ctx, routes, client.InNamespace(ns)); err != nil {
		t.Fatalf("%s: list HTTPRoutes: %v", sd.name, err)
	}
	for i := range routes.Items {
		r := &routes.Items[i]
		saw("httproute", r)
		m := toMap(r)
		deleteFields(m, "status")
		s.objects["httproute/"+r.Name] = m
	}
	named := map[string]bool{}
	for _, o := range services {
		active, _, _ := unstructured.NestedString(o.Object, "status", "activeServiceStatus", "rayClusterName")
		pending, _, _ := unstructured.NestedString(o.Object, "status", "pendingServiceStatus", "rayClusterName")
		named[active], named[pending] = true, true
		if typ, _, _ := unstructured.NestedString(o.Object, "spec", "upgradeStrategy", "type"); typ == string(rayv1.NewClusterWithIncrementalUpgrade) && programmed && pending != "" {
			move("RayService %s: incremental upgrade to %s under way", o.GetName(), pending)
		}
	}
	exists := map[string]bool{}
	for _, c := range clusters {
		exists[c.GetName()] = true
		for _, ref := range c.GetOwnerReferences() {
			if ref.Kind == "RayService" && !named[c.GetName()] && c.GetDeletionTimestamp() == nil {
				move("RayCluster %s: its RayService no longer names it", c.GetName())
			}
		}
	}
	// What a deleted cluster owned goes with it, by the garbage collector.
	svcs := &corev1.ServiceList{}
	if err := sd.cl.List(ctx, svcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, svc := range svcs.Items {
		for _, ref := range svc.OwnerReferences {
			if ref.Kind == "RayCluster" && !exists[ref.Name] {
				move("Service %s: its RayCluster %s is gone", svc.Name, ref.Name)
			}
		}
	}
	pods := &corev1.PodList{}
	if err := sd.cl.List(ctx, pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, ref := range p.OwnerReferences {
			if ref.Kind == "RayCluster" && !exists[ref.Name] {
				move("pod %s: its RayCluster %s is gone", p.Name, ref.Name)
			}
		}
	}
	for _, o := range services {
		if typ, _, _ := unstructured.NestedString(o.Object, "spec", "upgradeStrategy", "type"); typ != string(rayv1.NewClusterWithIncrementalUpgrade) {
			continue
		}
		if got, want, ok := serveEndpointsBehind(o, pods.Items); ok {
			move("RayService %s: numServeEndpoints %d, its clusters have %d Ready serve pods", o.GetName(), got, want)
		}
	}
}

// serveEndpointsBehind says whether an incrementally upgraded RayService's numServeEndpoints is not yet the number
// of Ready pods labelled ray.io/serve=true in the clusters its status names (the active one and, during the upgrade,
// the pending one), as each operator counts them once settled. The head-read barrier (rayHeads.serveReads) leaves
// such services out, so without this a side that labelled a head serving in its last reconcile would be compared
// before the recount its next 2 s poll makes: KubeRay counts the Endpoints the controller-manager fills after the
// label, Manta the pods' labels before its patch lands.
func serveEndpointsBehind(o unstructured.Unstructured, pods []corev1.Pod) (got, want int64, behind bool) {
	named := map[string]bool{}
	for _, status := range []string{"activeServiceStatus", "pendingServiceStatus"} {
		if c, _, _ := unstructured.NestedString(o.Object, "status", status, "rayClusterName"); c != "" {
			named[c] = true
		}
	}
	if len(named) == 0 {
		return 0, 0, false
	}
	for i := range pods {
		p := &pods[i]
		if named[p.Labels[rayv1.LabelCluster]] && p.DeletionTimestamp == nil && p.Labels[rayv1.LabelServe] == "true" && clusterbuild.PodRunningAndReady(p) {
			want++
		}
	}
	got, _, _ = unstructured.NestedInt64(o.Object, "status", "numServeEndpoints")
	return got, want, got != want
}

// upgradeWatch records, per namespace, every state an incremental upgrade went through, as the test's watches
// deliver them: the HTTPRoute's backends and weights, and the RayService's active and pending cluster with their
// targetCapacity and trafficRoutedPercent and its UpgradeInProgress condition. A state is recorded when it differs
// from the last one. Clusters are named by their order of appearance in the namespace (cluster-1, cluster-2).
type upgradeWatch struct {
	mu       sync.Mutex
	routes   map[string][]string // namespace -> states
	services map[string][]string
	clusters map[string]map[string]string // namespace -> cluster name -> cluster-N
}

// watchUpgrades starts recording from the test's informer cache.
func watchUpgrades(t *testing.T, ctx context.Context, reader cache.Cache) *upgradeWatch {
	w := &upgradeWatch{routes: map[string][]string{}, services: map[string][]string{}, clusters: map[string]map[string]string{}}
	for _, obj := range []client.Object{&gwv1.HTTPRoute{}, &rayv1.RayService{}} {
		inf, err := reader.GetInformer(ctx, obj)
		if err != nil {
			t.Fatalf("informer for %T: %v", obj, err)
		}
		record := func(o any) { w.record(o) }
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: record, UpdateFunc: func(_, o any) { record(o) },
		}); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// cluster names a cluster by its order of appearance in ns; the caller holds mu.
func (w *upgradeWatch) cluster(ns, name string) string {
	if name == "" {
		return "-"
	}
	if w.clusters[ns] == nil {
		w.clusters[ns] = map[string]string{}
	}
	if n, ok := w.clusters[ns][name]; ok {
		return n
	}
	n := fmt.Sprintf("cluster-%d", len(w.clusters[ns])+1)
	w.clusters[ns][name] = n
	return n
}

func (w *upgradeWatch) record(o any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pct := func(p *int32) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	add := func(states map[string][]string, ns, st string) {
		if l := states[ns]; len(l) == 0 || l[len(l)-1] != st {
			states[ns] = append(l, st)
		}
	}
	switch o := o.(type) {
	case *rayv1.RayService:
		if o.Spec.UpgradeStrategy == nil || ptr.Deref(o.Spec.UpgradeStrategy.Type, "") != rayv1.NewClusterWithIncrementalUpgrade {
			return
		}
		a, p := o.Status.ActiveServiceStatus, o.Status.PendingServiceStatus
		// Active first: a new pending cluster takes the next number.
		an := w.cluster(o.Namespace, a.RayClusterName)
		pn := w.cluster(o.Namespace, p.RayClusterName)
		upgrading := "-"
		if c := meta.FindStatusCondition(o.Status.Conditions, string(rayv1.UpgradeInProgress)); c != nil {
			upgrading = string(c.Status)
		}
		add(w.services, o.Namespace, fmt.Sprintf("active %s capacity %s traffic %s, pending %s capacity %s traffic %s, UpgradeInProgress %s",
			an, pct(a.TargetCapacity), pct(a.TrafficRoutedPercent), pn, pct(p.TargetCapacity), pct(p.TrafficRoutedPercent), upgrading))
	case *gwv1.HTTPRoute:
		var backends []string
		for _, rule := range o.Spec.Rules {
			for _, b := range rule.BackendRefs {
				backends = append(backends, fmt.Sprintf("%s %s", w.cluster(o.Namespace, strings.TrimSuffix(string(b.Name), "-serve-svc")), pct(b.Weight)))
			}
		}
		add(w.routes, o.Namespace, strings.Join(backends, ", "))
	}
}

// upgradeHistories compares the states both sides' HTTPRoute and RayService went through.
func upgradeHistories(t *testing.T, ns string, sides ...side) []diff {
	w := env.upgrades
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []diff
	for _, h := range []struct {
		object string
		states map[string][]string
	}{{"httproute/svc-httproute", w.routes}, {"rayservice/svc.status", w.services}} {
		a, b := strings.Join(h.states[sides[0].ns(ns)], " → "), strings.Join(h.states[sides[1].ns(ns)], " → ")
		if os.Getenv("ORACLE_DEBUG") != "" {
			t.Logf("%s history:\n  kuberay: %s\n  manta:   %s", h.object, a, b)
		}
		if a != b {
			out = append(out, diff{Object: h.object, Path: "history", KubeRay: a, Manta: b})
		}
	}
	return out
}

// unstructuredService renders a RayService as the oracle applies it.
func unstructuredService(t *testing.T, rs *rayv1.RayService) *unstructured.Unstructured {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rs)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: u}
	obj.SetAPIVersion("ray.io/v1")
	obj.SetKind("RayService")
	delete(obj.Object, "status")
	unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
	return obj
}

// The incremental service's endpoint count settles on the Ready serve pods of the clusters its status names: a head
// labelled serving but not yet counted holds the settle, the old cluster's pods and a pod not Ready do not count.
func TestServeEndpointsBehind(t *testing.T) {
	pod := func(cluster, serve string, ready bool, deleting bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{rayv1.LabelCluster: cluster, rayv1.LabelServe: serve}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}}
		if ready {
			p.Status.Conditions[0].Status = corev1.ConditionTrue
		}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	svc := func(active, pending string, count int64) unstructured.Unstructured {
		o := unstructured.Unstructured{Object: map[string]any{}}
		_ = unstructured.SetNestedField(o.Object, active, "status", "activeServiceStatus", "rayClusterName")
		if pending != "" {
			_ = unstructured.SetNestedField(o.Object, pending, "status", "pendingServiceStatus", "rayClusterName")
		}
		_ = unstructured.SetNestedField(o.Object, count, "status", "numServeEndpoints")
		return o
	}
	pods := []corev1.Pod{
		pod("old", "true", true, false), pod("old", "true", true, false), // the active cluster's head and worker
		pod("new", "true", true, false),  // the new head, labelled serving
		pod("new", "true", false, false), // a new worker not Ready yet
		pod("new", "false", true, false), // a head whose proxy has not answered
		pod("gone", "true", true, false), // a cluster the status no longer names
		pod("old", "true", true, true),   // a pod on its way out
	}
	for _, tc := range []struct {
		name   string
		svc    unstructured.Unstructured
		want   int64
		behind bool
	}{
		{"counted before the new head's label", svc("old", "new", 2), 3, true},
		{"counted", svc("old", "new", 3), 3, false},
		{"promoted", svc("new", "", 1), 1, false},
		{"no cluster named yet", unstructured.Unstructured{Object: map[string]any{}}, 0, false},
	} {
		got, want, behind := serveEndpointsBehind(tc.svc, pods)
		if want != tc.want || behind != tc.behind {
			t.Errorf("%s: got %d, want %d (%d), behind %v (%v)", tc.name, got, want, tc.want, behind, tc.behind)
		}
	}
}
