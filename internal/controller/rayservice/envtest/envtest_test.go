package envtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigyaml "sigs.k8s.io/yaml"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/controller/rayservice"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

const (
	configV1 = `applications:
  - name: fruit_app
    import_path: fruit.deployment_graph
    route_prefix: /fruit
  - name: math_app
    import_path: conditional_dag.serve_dag
    route_prefix: /calc
`
	configV2 = `applications:
  - name: fruit_app
    import_path: fruit.deployment_graph
    route_prefix: /fruit
    deployments:
      - name: MangoStand
        user_config:
          price: 4
  - name: math_app
    import_path: conditional_dag.serve_dag
    route_prefix: /calc
`
)

type env struct {
	*testutil.Env
	cl  client.Client
	ray *fakeray.Fleet
	ipN atomic.Int32
}

// TestController runs the RayCluster and RayService controllers on one envtest control plane, with Ray played by
// fake heads, and walks the RayService state machine: each subtest in its own namespace.
func TestController(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	e := startControllers(t, cfg, cl, rayservice.Options{MaxConcurrentReconciles: 4, RequeueInterval: 300 * time.Millisecond})

	t.Run("group", func(t *testing.T) {
		for name, fn := range map[string]func(*testing.T, *env){
			"FirstDeployAndInPlaceUpdates":   testFirstDeployAndInPlaceUpdates,
			"NewClusterUpgrade":              testNewClusterUpgrade,
			"UpgradeReplacedMidway":          testUpgradeReplacedMidway,
			"UnhealthyNeverGetsTraffic":      testUnhealthyNeverGetsTraffic,
			"HeadRestartReapplies":           testHeadRestartReapplies,
			"WorkerReadinessDrivesEndpoints": testWorkerReadinessDrivesEndpoints,
			"SuspendResume":                  testSuspendResume,
			"UpgradeStrategyNone":            testUpgradeStrategyNone,
			"IncrementalUpgradeRefused":      testIncrementalRefused,
			"InvalidSpecReported":            testInvalidSpec,
			"DeleteClustersFirst":            testDelete,
			"ManagedByOtherSkipped":          testManagedByOther,
			"KubeRaySamples":                 testKubeRaySamples,
			"ServeServiceFromSpec":           testServeServiceFromSpec,
			"RayUnavailableRetried":          testRayUnavailableRetried,
			"LostApplicationsReapplied":      testLostApplicationsReapplied,
			"ForeignServiceNotTaken":         testForeignServiceNotTaken,
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				fn(t, e)
			})
		}
	})
}

// startControllers runs the RayCluster controller and the RayService controller (opts, with a fakeray.Fleet for
// Ray) on the envtest control plane at cfg, until t ends.
func startControllers(t *testing.T, cfg *rest.Config, cl client.Client, opts rayservice.Options) *env {
	mgr := testutil.NewManager(t, cfg, testutil.CacheOnlyLabelled(&corev1.Pod{}, rayv1.LabelNodeType),
		testutil.CacheOnlyLabelled(&corev1.Service{}, rayv1.LabelCluster))
	if err := raycluster.NewReconciler(mgr, raycluster.Options{MaxConcurrentReconciles: 4}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	fr := fakeray.NewFleet(fakeray.Options{})
	t.Cleanup(fr.Close)
	opts.RayClients = fr
	r, err := rayservice.NewReconciler(mgr, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testutil.RunManager(t, mgr)
	return &env{Env: testutil.NewEnv(cl), cl: cl, ray: fr}
}

// serveDetailsRead is the request the controller reads a head's Serve applications with.
var serveDetailsRead = fakeray.Route(http.MethodGet, "/api/serve/applications/")

// waitReconciles waits until the controller has read the Serve details of cluster n more times: each read is one
// reconcile observing it, so whatever those reconciles would do, they have done. Tests that prove an absence
// wait here instead of sleeping.
func (e *env) waitReconciles(t *testing.T, ns, cluster string, n int) {
	t.Helper()
	h := e.ray.Cluster(ns, cluster)
	start := h.Calls(serveDetailsRead)
	e.Eventually(t, fmt.Sprintf("%d more reconciles observing %s", n, cluster), func() (bool, string) {
		now := h.Calls(serveDetailsRead)
		return now >= start+n, fmt.Sprintf("%d so far", now-start)
	})
}

// deploys is how many Serve configs the head of cluster was sent, and the last one as Ray got it (JSON).
func (e *env) deploys(ns, cluster string) (n int, config string) {
	h := e.ray.Cluster(ns, cluster)
	return h.ServeDeploys(), string(h.ServeConfig())
}

// asSent is serveConfigV2 as the controller sends it to Ray (JSON).
func asSent(t *testing.T, serveConfigV2 string) string {
	t.Helper()
	b, err := ray.ServeConfigToJSON(serveConfigV2)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// makeService is a RayService with one worker group of one replica serving configV1.
func makeService(ns, name string) *rayv1.RayService {
	return testutil.MakeRayService(ns, name).ServeConfig(configV1).ClusterDeletionDelay(3).Obj()
}

func (e *env) cluster(t *testing.T, ns, name string) (*rayv1.RayCluster, bool) {
	t.Helper()
	c := &rayv1.RayCluster{}
	err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return c, c.DeletionTimestamp == nil
}

func (e *env) pods(t *testing.T, ns, cluster string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := e.cl.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelCluster: cluster}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// setReady plays the kubelet for a cluster: once its n pods exist, each becomes Running and Ready with an IP.
func (e *env) setReady(t *testing.T, ns, cluster string, n int) {
	t.Helper()
	e.Eventually(t, fmt.Sprintf("%d pods of %s running", n, cluster), func() (bool, string) {
		pods := e.pods(t, ns, cluster)
		if len(pods) != n {
			return false, fmt.Sprintf("%d pods", len(pods))
		}
		for i := range pods {
			p := &pods[i]
			if clusterbuild.PodRunningAndReady(p) {
				continue
			}
			ip := fmt.Sprintf("10.1.%d.%d", e.ipN.Add(1)/250, e.ipN.Load()%250+1)
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Ready: true, Image: p.Spec.Containers[0].Image}}
			if err := e.cl.Status().Update(context.Background(), p); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
}

func cond(rs *rayv1.RayService, t rayv1.RayServiceConditionType) metav1.Condition {
	if c := meta.FindStatusCondition(rs.Status.Conditions, string(t)); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// waitPending waits until the status names a pending cluster other than not, and until that cluster exists.
func (e *env) waitPending(t *testing.T, rs *rayv1.RayService, not string) string {
	t.Helper()
	var name string
	e.Eventually(t, "a pending cluster", func() (bool, string) {
		got := testutil.Get(t, e.Env, rs)
		name = got.Status.PendingServiceStatus.RayClusterName
		if name == "" || name == not {
			return false, fmt.Sprintf("pending %q", name)
		}
		_, ok := e.cluster(t, rs.Namespace, name)
		return ok, "cluster " + name + " not created"
	})
	return name
}

// waitActive waits until name is the active cluster and the service is Ready.
func (e *env) waitActive(t *testing.T, rs *rayv1.RayService, name string) *rayv1.RayService {
	t.Helper()
	var got *rayv1.RayService
	e.Eventually(t, "cluster "+name+" active and Ready", func() (bool, string) {
		got = testutil.Get(t, e.Env, rs)
		ok := got.Status.ActiveServiceStatus.RayClusterName == name && cond(got, rayv1.RayServiceReady).Status == metav1.ConditionTrue
		return ok, fmt.Sprintf("active %q, ready %+v", got.Status.ActiveServiceStatus.RayClusterName, cond(got, rayv1.RayServiceReady))
	})
	return got
}

// bringUp creates rs and makes its first cluster serve; it returns the cluster's name.
func (e *env) bringUp(t *testing.T, rs *rayv1.RayService) string {
	t.Helper()
	if err := e.cl.Create(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	name := e.waitPending(t, rs, "")
	e.setReady(t, rs.Namespace, name, 2)
	e.waitActive(t, rs, name)
	return name
}

// selectors returns the cluster the head and serve Services point at.
func (e *env) selectors(t *testing.T, rs *rayv1.RayService) (head, serve string) {
	t.Helper()
	for _, n := range []struct {
		name string
		dst  *string
	}{{rs.Name + "-head-svc", &head}, {rs.Name + "-serve-svc", &serve}} {
		svc := &corev1.Service{}
		if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: rs.Namespace, Name: n.name}, svc); err == nil {
			*n.dst = svc.Spec.Selector[rayv1.LabelCluster]
		} else if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	return head, serve
}

// hasEvent says whether an event with reason about rs was recorded.
func (e *env) hasEvent(t *testing.T, rs *rayv1.RayService, reason string) (bool, string) {
	t.Helper()
	var list eventsv1.EventList
	if err := e.cl.List(context.Background(), &list, client.InNamespace(rs.Namespace)); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, ev := range list.Items {
		if ev.Regarding.Name == rs.Name && ev.Reason == reason {
			return true, ev.Note
		}
		seen = append(seen, ev.Reason)
	}
	return false, fmt.Sprintf("events %v", seen)
}

func testFirstDeployAndInPlaceUpdates(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	name := e.bringUp(t, rs)

	// Promoted once its applications run, with the head as its one serve endpoint if the worker's readiness was
	// not seen yet: the status counts the worker by a later reconcile.
	var got *rayv1.RayService
	e.Eventually(t, "both pods counted as serve endpoints", func() (bool, string) {
		got = testutil.Get(t, e.Env, rs)
		return got.Status.NumServeEndpoints == 2, fmt.Sprintf("numServeEndpoints %d", got.Status.NumServeEndpoints)
	})
	c, _ := e.cluster(t, ns, name)
	if !strings.HasPrefix(name, "svc-") || len(name) != len("svc-")+5 {
		t.Errorf("cluster name %q, want svc-<5 chars>", name)
	}
	if c.Labels[rayv1.LabelOriginCRD] != "RayService" || c.Labels[rayv1.LabelOriginCRName] != "svc" || !metav1.IsControlledBy(c, got) {
		t.Errorf("cluster labels %v, owners %v", c.Labels, c.OwnerReferences)
	}
	if got.Status.ServiceStatus != rayv1.Running || got.Status.NumServeEndpoints != 2 || got.Status.ObservedGeneration != got.Generation {
		t.Errorf("status: serviceStatus %q, endpoints %d, observedGeneration %d/%d", got.Status.ServiceStatus, got.Status.NumServeEndpoints, got.Status.ObservedGeneration, got.Generation)
	}
	if u := cond(got, rayv1.UpgradeInProgress); u.Status != metav1.ConditionFalse || u.Reason != string(rayv1.NoPendingCluster) {
		t.Errorf("UpgradeInProgress %+v", u)
	}
	if r := cond(got, rayv1.RayServiceReady); r.Reason != string(rayv1.NonZeroServeEndpoints) {
		t.Errorf("Ready %+v", r)
	}
	apps := got.Status.ActiveServiceStatus.Applications
	if len(apps) != 2 || apps["fruit_app"].Status != "RUNNING" || apps["math_app"].Deployments["Math_app"].Status != "HEALTHY" {
		t.Errorf("application statuses %+v", apps)
	}
	// The RayService mirrors its cluster's status as the RayCluster controller last wrote it: the service may turn
	// Ready (from the head pod and Serve) a moment before the cluster's status write that says ready (its pods'
	// readiness waits the RayCluster controller's pod batch), and the mirror follows with the next reconcile.
	e.Eventually(t, "the active cluster's status mirrored", func() (bool, string) {
		s := testutil.Get(t, e.Env, rs).Status.ActiveServiceStatus.RayClusterStatus
		return s.Head.PodName != "" && s.State == rayv1.Ready, fmt.Sprintf("%+v", s)
	})
	// As KubeRay v1.6.2+: the finalizer that deletes the clusters first; added by a metadata patch, so the
	// generation stays 1.
	if !slices.Equal(got.Finalizers, []string{rayservice.Finalizer}) || got.Generation != 1 {
		t.Errorf("finalizers %v, generation %d", got.Finalizers, got.Generation)
	}
	if r := cond(got, rayv1.RayServiceReady); r.Message != "Number of serve endpoints is greater than 0" || r.ObservedGeneration != 1 {
		t.Errorf("Ready %+v, want KubeRay's message", r)
	}
	if u := cond(got, rayv1.UpgradeInProgress); u.Message != "Active Ray cluster exists and no pending Ray cluster" {
		t.Errorf("UpgradeInProgress %+v, want KubeRay's message", u)
	}
	head, serve := e.selectors(t, rs)
	if head != name || serve != name {
		t.Errorf("Services point at %q / %q, want %q", head, serve, name)
	}
	var headPod string
	for _, p := range e.pods(t, ns, name) {
		if p.Labels[rayv1.LabelServe] != "true" {
			t.Errorf("pod %s ray.io/serve=%q", p.Name, p.Labels[rayv1.LabelServe])
		}
		if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead {
			headPod = p.Name
		}
	}
	// As KubeRay: the head's serve label change is an event with KubeRay's message.
	if ok, msg := e.hasEvent(t, rs, rayservice.EventUpdatedHeadPodServeLabel); !ok || msg != fmt.Sprintf(`Updated the serve label to "true" for the Head Pod %s/%s`, ns, headPod) {
		t.Errorf("%s event: %v %s", rayservice.EventUpdatedHeadPodServeLabel, ok, msg)
	}
	testServicesLabelledForTheRayService(t, e, rs)
	// The config hash is kept: a settled service is not sent its config again.
	e.waitReconciles(t, ns, name, 3)
	if n, _ := e.deploys(ns, name); n != 1 {
		t.Errorf("%d deploys of an unchanged config, want 1", n)
	}

	// serveConfigV2 change: applied in place to the same cluster.
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) { s.Spec.ServeConfigV2 = configV2 })
	e.Eventually(t, "configV2 applied", func() (bool, string) {
		n, cfg := e.deploys(ns, name)
		return n == 2 && cfg == asSent(t, configV2), fmt.Sprintf("%d deploys", n)
	})
	// Worker replicas change: the active cluster is updated in place.
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) { s.Spec.RayClusterSpec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](3) })
	e.Eventually(t, "replicas updated in place", func() (bool, string) {
		c, _ := e.cluster(t, ns, name)
		r := ptr.Deref(c.Spec.WorkerGroupSpecs[0].Replicas, 0)
		return r == 3, fmt.Sprintf("replicas %d", r)
	})
	// An appended worker group: also in place.
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) {
		g := s.Spec.RayClusterSpec.WorkerGroupSpecs[0].DeepCopy()
		g.GroupName = "extra"
		s.Spec.RayClusterSpec.WorkerGroupSpecs = append(s.Spec.RayClusterSpec.WorkerGroupSpecs, *g)
	})
	e.Eventually(t, "worker group added in place", func() (bool, string) {
		c, _ := e.cluster(t, ns, name)
		return len(c.Spec.WorkerGroupSpecs) == 2, fmt.Sprintf("%d groups", len(c.Spec.WorkerGroupSpecs))
	})
	got = testutil.Get(t, e.Env, rs)
	if got.Status.ActiveServiceStatus.RayClusterName != name || got.Status.PendingServiceStatus.RayClusterName != "" {
		t.Errorf("in-place updates moved clusters: active %q pending %q", got.Status.ActiveServiceStatus.RayClusterName, got.Status.PendingServiceStatus.RayClusterName)
	}
	if n, _ := e.deploys(ns, name); n != 2 {
		t.Errorf("%d deploys after in-place cluster updates, want 2", n)
	}
}

func testNewClusterUpgrade(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	old := e.bringUp(t, rs)

	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) {
		s.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "rayproject/ray:2.52.1"
	})
	pending := e.waitPending(t, rs, "")
	got := testutil.Get(t, e.Env, rs)
	if u := cond(got, rayv1.UpgradeInProgress); u.Status != metav1.ConditionTrue || u.Reason != string(rayv1.BothActivePendingClustersExist) {
		t.Errorf("UpgradeInProgress %+v", u)
	}
	// Until the new cluster serves, traffic stays on the old one (which every reconcile observes).
	e.waitReconciles(t, ns, old, 3)
	if head, serve := e.selectors(t, rs); head != old || serve != old {
		t.Errorf("Services point at %q / %q before the new cluster is ready, want %q", head, serve, old)
	}
	// The switch comes after the new cluster is ready, so the deletion delay runs from no earlier than this.
	beforeSwitch := time.Now()
	e.setReady(t, ns, pending, 2)
	got = e.waitActive(t, rs, pending)
	if head, serve := e.selectors(t, rs); head != pending || serve != pending {
		t.Errorf("Services point at %q / %q after the switch, want %q", head, serve, pending)
	}
	if u := cond(got, rayv1.UpgradeInProgress); u.Status != metav1.ConditionFalse {
		t.Errorf("UpgradeInProgress %+v after the switch", u)
	}
	if n, cfg := e.deploys(ns, pending); n != 1 || cfg != asSent(t, configV1) {
		t.Errorf("new cluster got %d deploys of %q", n, cfg)
	}
	// The old cluster lives on for rayClusterDeletionDelaySeconds (3), then goes.
	e.Eventually(t, "old cluster deleted", func() (bool, string) {
		_, ok := e.cluster(t, ns, old)
		return !ok, "still there"
	})
	// The deletion time is stored in status at metav1.Time's one-second precision, so it comes 2-3 s after.
	if d := time.Since(beforeSwitch); d < 2*time.Second {
		t.Errorf("old cluster deleted %s after the new cluster became ready, before the 3 s deletion delay", d)
	}
	for _, reason := range []string{rayservice.EventCreatedRayCluster, rayservice.EventUpgradeStarted, rayservice.EventPromotedPendingCluster, rayservice.EventUpdatedService, rayservice.EventDeletedRayCluster} {
		e.Eventually(t, "event "+reason, func() (bool, string) { return e.hasEvent(t, rs, reason) })
	}
}

func testUpgradeReplacedMidway(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	old := e.bringUp(t, rs)
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) {
		s.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:v2"
	})
	first := e.waitPending(t, rs, "")
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) {
		s.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:v3"
	})
	second := e.waitPending(t, rs, first)
	e.Eventually(t, "first pending cluster deleted", func() (bool, string) {
		_, ok := e.cluster(t, ns, first)
		return !ok, "still there"
	})
	c, _ := e.cluster(t, ns, second)
	if img := c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Image; img != "ray:v3" {
		t.Errorf("second pending cluster image %q", img)
	}
	e.setReady(t, ns, second, 2)
	e.waitActive(t, rs, second)
	if head, serve := e.selectors(t, rs); head != second || serve != second {
		t.Errorf("Services point at %q / %q, want %q", head, serve, second)
	}
	// Going back: a new spec equal to the active cluster's drops the pending one.
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) {
		s.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:v4"
	})
	third := e.waitPending(t, rs, second)
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) {
		s.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:v3"
	})
	e.Eventually(t, "pending cluster dropped", func() (bool, string) {
		got := testutil.Get(t, e.Env, rs)
		_, ok := e.cluster(t, ns, third)
		return !ok && got.Status.PendingServiceStatus.RayClusterName == "", fmt.Sprintf("pending %q exists %v", got.Status.PendingServiceStatus.RayClusterName, ok)
	})
	_ = old
}

func testUnhealthyNeverGetsTraffic(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	old := e.bringUp(t, rs)
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) {
		s.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:v2"
	})
	pending := e.waitPending(t, rs, "")
	e.ray.Cluster(ns, pending).SetServeStatus("DEPLOYING")
	e.setReady(t, ns, pending, 2)
	e.Eventually(t, "config applied to the pending cluster", func() (bool, string) {
		n, _ := e.deploys(ns, pending)
		return n == 1, fmt.Sprintf("%d deploys", n)
	})
	for _, status := range []string{"DEPLOYING", "UNHEALTHY", "DEPLOY_FAILED"} {
		e.ray.Cluster(ns, pending).SetServeStatus(status)
		e.Eventually(t, "pending status reports "+status, func() (bool, string) {
			got := testutil.Get(t, e.Env, rs)
			a := got.Status.PendingServiceStatus.Applications["fruit_app"]
			return a.Status == status, fmt.Sprintf("%+v", got.Status.PendingServiceStatus.Applications)
		})
		e.waitReconciles(t, ns, pending, 3)
		got := testutil.Get(t, e.Env, rs)
		if got.Status.ActiveServiceStatus.RayClusterName != old {
			t.Fatalf("cluster with applications %s became active", status)
		}
		if head, serve := e.selectors(t, rs); head != old || serve != old {
			t.Fatalf("Services point at %q / %q while the new applications are %s", head, serve, status)
		}
	}
	e.ray.Cluster(ns, pending).SetServeStatus("RUNNING")
	e.waitActive(t, rs, pending)
}

func testHeadRestartReapplies(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	name := e.bringUp(t, rs)
	// The head's Ray container restarts: without GCS fault tolerance Ray has lost the applications. The fake keeps
	// reporting them, so the restart count is the only signal here (testLostApplicationsReapplied covers the other).
	var head corev1.Pod
	for _, p := range e.pods(t, ns, name) {
		if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead {
			head = p
		}
	}
	head.Status.ContainerStatuses[0].RestartCount = 1
	if err := e.cl.Status().Update(context.Background(), &head); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "config re-applied", func() (bool, string) {
		n, _ := e.deploys(ns, name)
		return n == 2, fmt.Sprintf("%d deploys", n)
	})
	e.Eventually(t, "applications reported again", func() (bool, string) {
		got := testutil.Get(t, e.Env, rs)
		return len(got.Status.ActiveServiceStatus.Applications) == 2, fmt.Sprintf("%+v", got.Status.ActiveServiceStatus.Applications)
	})
}

// testLostApplicationsReapplied: Ray reports no application (state lost without a visible restart): re-applied.
func testLostApplicationsReapplied(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	name := e.bringUp(t, rs)
	e.ray.Cluster(ns, name).Restart()
	e.Eventually(t, "config re-applied", func() (bool, string) {
		n, _ := e.deploys(ns, name)
		return n == 2, fmt.Sprintf("%d deploys", n)
	})
	e.waitReconciles(t, ns, name, 3)
	if n, _ := e.deploys(ns, name); n != 2 {
		t.Errorf("%d deploys once the applications are back, want 2", n)
	}
}

func testWorkerReadinessDrivesEndpoints(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	rs.Spec.ExcludeHeadPodFromServeSvc = true
	name := e.bringUp(t, rs)
	var worker string
	for _, p := range e.pods(t, ns, name) {
		want := "true"
		if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead {
			want = "false"
		} else {
			worker = p.Name
		}
		if p.Labels[rayv1.LabelServe] != want {
			t.Errorf("pod %s ray.io/serve=%q, want %s", p.Name, p.Labels[rayv1.LabelServe], want)
		}
	}
	if got := testutil.Get(t, e.Env, rs); got.Status.NumServeEndpoints != 1 {
		t.Errorf("numServeEndpoints %d, want 1 (the head is excluded)", got.Status.NumServeEndpoints)
	}
	// A worker whose proxy stops answering fails its readiness probe (the kubelet's part, played here): it keeps
	// ray.io/serve=true, as under KubeRay, and stops counting as an endpoint.
	e.ray.Cluster(ns, name).SetProxyDown(worker, true)
	p := &corev1.Pod{}
	if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: worker}, p); err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
	if err := e.cl.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "a worker that is not Ready leaves the serve endpoints", func() (bool, string) {
		got := testutil.Get(t, e.Env, rs)
		if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: worker}, p); err != nil {
			return false, err.Error()
		}
		r := cond(got, rayv1.RayServiceReady)
		return p.Labels[rayv1.LabelServe] == "true" && got.Status.NumServeEndpoints == 0 && r.Reason == string(rayv1.ZeroServeEndpoints) && got.Status.ServiceStatus == "",
			fmt.Sprintf("label %q, endpoints %d, Ready %+v", p.Labels[rayv1.LabelServe], got.Status.NumServeEndpoints, r)
	})
	e.ray.Cluster(ns, name).SetProxyDown(worker, false)
	e.setReady(t, ns, name, 2)
	e.waitActive(t, rs, name)
}

func testSuspendResume(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	name := e.bringUp(t, rs)
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) { s.Spec.Suspend = true })
	e.Eventually(t, "suspended", func() (bool, string) {
		got := testutil.Get(t, e.Env, rs)
		_, ok := e.cluster(t, ns, name)
		s := cond(got, rayv1.RayServiceSuspended)
		return !ok && s.Status == metav1.ConditionTrue && got.Status.ActiveServiceStatus.RayClusterName == "", fmt.Sprintf("cluster exists %v, Suspended %+v", ok, s)
	})
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) { s.Spec.Suspend = false })
	next := e.waitPending(t, rs, name)
	e.setReady(t, ns, next, 2)
	got := e.waitActive(t, rs, next)
	if s := cond(got, rayv1.RayServiceSuspended); s.Status != metav1.ConditionFalse || s.Reason != string(rayv1.RayServiceResumed) {
		t.Errorf("Suspended %+v after resume", s)
	}
}

func testUpgradeStrategyNone(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	rs.Spec.UpgradeStrategy = &rayv1.RayServiceUpgradeStrategy{Type: ptr.To(rayv1.RayServiceUpgradeNone)}
	name := e.bringUp(t, rs)
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) {
		s.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:v2"
	})
	e.Eventually(t, "change seen, no upgrade in progress", func() (bool, string) {
		got := testutil.Get(t, e.Env, rs)
		u := cond(got, rayv1.UpgradeInProgress)
		return got.Status.ObservedGeneration == got.Generation && u.ObservedGeneration == got.Generation &&
			u.Status == metav1.ConditionFalse && u.Reason == string(rayv1.NoPendingCluster), fmt.Sprintf("%+v", u)
	})
	e.waitReconciles(t, ns, name, 3)
	got := testutil.Get(t, e.Env, rs)
	if got.Status.PendingServiceStatus.RayClusterName != "" || got.Status.ActiveServiceStatus.RayClusterName != name {
		t.Errorf("upgradeStrategy None upgraded: active %q pending %q", got.Status.ActiveServiceStatus.RayClusterName, got.Status.PendingServiceStatus.RayClusterName)
	}
	// A serve config change is still applied.
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) { s.Spec.ServeConfigV2 = configV2 })
	e.Eventually(t, "config applied under None", func() (bool, string) {
		n, _ := e.deploys(ns, name)
		return n == 2, fmt.Sprintf("%d deploys", n)
	})
}

// Where the Gateway API is not installed (this control plane serves no Gateways), an incremental upgrade cannot run:
// the RayService is refused, naming the field, and no cluster is created.
func testIncrementalRefused(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeIncrementalService(ns, "svc")
	if err := e.cl.Create(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "refused, naming the field", func() (bool, string) {
		got := testutil.Get(t, e.Env, rs)
		r := cond(got, rayv1.RayServiceReady)
		return r.Reason == string(rayv1.RayServiceValidationFailed) && strings.Contains(r.Message, "spec.upgradeStrategy.type") &&
			strings.Contains(r.Message, "Gateway API"), fmt.Sprintf("Ready %+v", r)
	})
	e.Eventually(t, "event", func() (bool, string) { return e.hasEvent(t, rs, rayservice.EventInvalidRayServiceSpec) })
	var list rayv1.RayClusterList
	if err := e.cl.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d clusters created for a refused spec", len(list.Items))
	}
}

func testInvalidSpec(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	rs.Spec.ServeConfigV2 = "applications: [unclosed"
	if err := e.cl.Create(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "invalid serveConfigV2 reported", func() (bool, string) {
		got := testutil.Get(t, e.Env, rs)
		r := cond(got, rayv1.RayServiceReady)
		return r.Reason == string(rayv1.RayServiceValidationFailed) && strings.HasPrefix(r.Message, "spec.serveConfigV2"), fmt.Sprintf("%+v", r)
	})
	e.Eventually(t, "event", func() (bool, string) { return e.hasEvent(t, rs, rayservice.EventInvalidRayServiceSpec) })
	// Fixed: the service comes up.
	testutil.Update(t, e.Env, rs, func(s *rayv1.RayService) { s.Spec.ServeConfigV2 = configV1 })
	name := e.waitPending(t, rs, "")
	e.setReady(t, ns, name, 2)
	e.waitActive(t, rs, name)
}

func testDelete(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	name := e.bringUp(t, rs)
	// The garbage collector (not run by envtest) deletes the cluster and the Services with the RayService: each
	// names it as controller and blocks its deletion until they are gone (foreground deletion).
	got := testutil.Get(t, e.Env, rs)
	c, _ := e.cluster(t, ns, name)
	owned := []metav1.Object{c}
	for _, n := range []string{"svc-head-svc", "svc-serve-svc"} {
		svc := &corev1.Service{}
		if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: n}, svc); err != nil {
			t.Fatal(err)
		}
		owned = append(owned, svc)
	}
	for _, o := range owned {
		ref := metav1.GetControllerOf(o)
		if ref == nil || ref.UID != got.UID || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("%s: controller %+v, want the RayService blocking its deletion", o.GetName(), ref)
		}
	}
	// As KubeRay v1.6.2+, the RayService's finalizer holds it until its clusters are gone, which the controller
	// deletes itself (envtest runs no garbage collector): a cluster held by a finalizer of its own holds the
	// RayService too.
	const hold = "test.manta.dev/hold"
	c.Finalizers = append(c.Finalizers, hold)
	if err := e.cl.Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Delete(context.Background(), testutil.Get(t, e.Env, rs)); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "cluster deleted by the controller", func() (bool, string) {
		got, _ := e.cluster(t, ns, name)
		return got != nil && got.DeletionTimestamp != nil, fmt.Sprintf("cluster %v", got != nil)
	})
	e.Eventually(t, "event", func() (bool, string) { return e.hasEvent(t, rs, rayservice.EventDeletedRayCluster) })
	if got := testutil.Get(t, e.Env, rs); !slices.Equal(got.Finalizers, []string{rayservice.Finalizer}) {
		t.Fatalf("RayService finalizers %v while its cluster is still there", got.Finalizers)
	}
	c, _ = e.cluster(t, ns, name)
	c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == hold })
	if err := e.cl.Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "RayService gone", func() (bool, string) {
		err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(rs), &rayv1.RayService{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}

func testManagedByOther(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	rs.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue")
	if err := e.cl.Create(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	// The work queue hands out the foreign RayService before one created after it: once that one is
	// reconciled, the controller has seen the foreign one too.
	ours := makeService(ns, "ours")
	if err := e.cl.Create(context.Background(), ours); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "the later RayService reconciled", func() (bool, string) {
		o := testutil.Get(t, e.Env, ours)
		return len(o.Status.Conditions) > 0, fmt.Sprintf("%+v", o.Status)
	})
	got := testutil.Get(t, e.Env, rs)
	if len(got.Finalizers) != 0 || len(got.Status.Conditions) != 0 {
		t.Errorf("a RayService managed by another controller was touched: finalizers %v, conditions %v", got.Finalizers, got.Status.Conditions)
	}
}

// testKubeRaySamples applies every KubeRay RayService sample unchanged (strict field validation against Manta's CRD)
// and requires each to bring up its cluster and become Ready, or to name the fields Manta does not support.
func testKubeRaySamples(t *testing.T, e *env) {
	// KubeRay v1.5.0 has 13 RayService samples.
	files := testutil.MustKubeRaySampleFilesNamed(t, "ray-service.", 13)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			t.Parallel()
			ns := e.Namespace(t)
			raw, err := testutil.ReadKubeRaySample(f)
			if err != nil {
				t.Fatal(err)
			}
			var services []*unstructured.Unstructured
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
			for {
				u := &unstructured.Unstructured{}
				if err := dec.Decode(&u.Object); err != nil {
					if errors.Is(err, io.EOF) {
						break
					}
					t.Fatal(err)
				}
				if len(u.Object) == 0 {
					continue
				}
				u.SetNamespace(ns)
				if err := e.cl.Create(context.Background(), u, client.FieldValidation("Strict")); err != nil {
					t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
				}
				if u.GetKind() == "RayService" {
					services = append(services, u)
				}
			}
			if len(services) == 0 {
				t.Fatal("no RayService in the sample")
			}
			for _, u := range services {
				rs := &rayv1.RayService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: u.GetName()}}
				var unsupported string
				e.Eventually(t, "a cluster or a report of unsupported fields", func() (bool, string) {
					got := testutil.Get(t, e.Env, rs)
					if r := cond(got, rayv1.RayServiceReady); r.Reason == string(rayv1.RayServiceValidationFailed) {
						unsupported = r.Message
						return true, ""
					}
					name := got.Status.PendingServiceStatus.RayClusterName
					if name == "" {
						return false, "no pending cluster yet"
					}
					_, ok := e.cluster(t, ns, name)
					return ok, "pending cluster " + name + " not created yet"
				})
				if unsupported != "" {
					t.Logf("refused: %s", unsupported)
					continue
				}
				name := testutil.Get(t, e.Env, rs).Status.PendingServiceStatus.RayClusterName
				e.Eventually(t, "cluster ready and the RayService Ready", func() (bool, string) {
					for _, p := range e.pods(t, ns, name) {
						if !clusterbuild.PodRunningAndReady(&p) {
							ip := fmt.Sprintf("10.2.%d.%d", e.ipN.Add(1)/250, e.ipN.Load()%250+1)
							p.Status.Phase = corev1.PodRunning
							p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
							p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
							if err := e.cl.Status().Update(context.Background(), &p); err != nil {
								return false, err.Error()
							}
						}
					}
					c, _ := e.cluster(t, ns, name)
					got := testutil.Get(t, e.Env, rs)
					return c != nil && c.Status.State == rayv1.Ready && cond(got, rayv1.RayServiceReady).Status == metav1.ConditionTrue,
						fmt.Sprintf("cluster state %q, Ready %+v", c.Status.State, cond(got, rayv1.RayServiceReady))
				})
				if u := cond(testutil.Get(t, e.Env, rs), rayservice.ConditionUnsupportedFeature); u.Status == metav1.ConditionTrue {
					t.Logf("serves, reporting: %s", u.Message)
				}
			}
		})
	}
}

// testServeServiceFromSpec: the serve Service takes the name, type, labels and annotations of serveService; its
// selector and ports stay Manta's.
func testServeServiceFromSpec(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	rs.Spec.ServeService = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "custom-serve", Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"lb": "yes"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"ignored": "x"},
			Ports: []corev1.ServicePort{{Name: "serve", Port: 9000, TargetPort: intstr.FromInt32(8000)}}},
	}
	name := e.bringUp(t, rs)
	svc := &corev1.Service{}
	if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "custom-serve"}, svc); err != nil {
		t.Fatal(err)
	}
	// As KubeRay: the port is the head's serve port (the default 8000 here), not the user's.
	if p := svc.Spec.Ports; svc.Spec.Type != corev1.ServiceTypeNodePort || len(p) != 1 || p[0].Name != "serve" || p[0].Port != 8000 || p[0].TargetPort.IntVal != 8000 || p[0].NodePort == 0 {
		t.Errorf("serve Service spec %+v", svc.Spec)
	}
	if svc.Labels["team"] != "a" || svc.Annotations["lb"] != "yes" || svc.Labels[rayv1.LabelOriginCRD] != "RayService" {
		t.Errorf("serve Service labels %v annotations %v", svc.Labels, svc.Annotations)
	}
	if want := map[string]string{rayv1.LabelCluster: name, rayv1.LabelServe: "true"}; !maps.Equal(svc.Spec.Selector, want) {
		t.Errorf("selector %v, want %v", svc.Spec.Selector, want)
	}
	if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "svc-serve-svc"}, &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Errorf("default-named serve Service: %v", err)
	}
}

// testServicesLabelledForTheRayService: the RayService's Services carry KubeRay's labels for a RayService, not the
// cluster's; a Service an earlier Manta labelled for the cluster is relabelled.
func testServicesLabelledForTheRayService(t *testing.T, e *env, rs *rayv1.RayService) {
	t.Helper()
	ctx := context.Background()
	want := map[string]map[string]string{
		rs.Name + "-head-svc":  {rayv1.LabelOriginCRName: rs.Name, rayv1.LabelOriginCRD: "RayService", rayv1.LabelNodeType: rayv1.NodeTypeHead, rayv1.LabelIdentifier: rs.Name + "-head"},
		rs.Name + "-serve-svc": {rayv1.LabelOriginCRName: rs.Name, rayv1.LabelOriginCRD: "RayService", rayv1.LabelServe: rs.Name + "-serve"},
	}
	for name, labels := range want {
		svc := &corev1.Service{}
		if err := e.cl.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: name}, svc); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(svc.Labels, labels) {
			t.Errorf("%s labels %v, want %v", name, svc.Labels, labels)
		}
		for _, p := range svc.Spec.Ports {
			if name == rs.Name+"-serve-svc" && p.AppProtocol != nil {
				t.Errorf("%s port %s appProtocol %q, want none", name, p.Name, *p.AppProtocol)
			}
		}
	}
	// Labelled as an earlier Manta did: the controller takes the cluster's labels off again.
	head := &corev1.Service{}
	if err := e.cl.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: rs.Name + "-head-svc"}, head); err != nil {
		t.Fatal(err)
	}
	old := head.DeepCopy()
	head.Labels[rayv1.LabelCluster] = head.Spec.Selector[rayv1.LabelCluster]
	head.Labels[rayv1.LabelAppName] = rayv1.AppNameValue
	head.Labels[rayv1.LabelIdentifier] = head.Spec.Selector[rayv1.LabelCluster] + "-head"
	if err := e.cl.Patch(ctx, head, client.MergeFrom(old)); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "head Service relabelled", func() (bool, string) {
		got := &corev1.Service{}
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(head), got); err != nil {
			t.Fatal(err)
		}
		return maps.Equal(got.Labels, want[rs.Name+"-head-svc"]), fmt.Sprint(got.Labels)
	})
}

// TestPrintColumnsAsKubeRay: `kubectl get rayservices` shows KubeRay's columns.
func TestPrintColumnsAsKubeRay(t *testing.T) {
	root := testutil.MustRepoRoot(t)
	cols := func(path string) string {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := sigyaml.Unmarshal(raw, &crd); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range crd.Spec.Versions {
			if v.Name == "v1" {
				for _, c := range v.AdditionalPrinterColumns {
					out = append(out, fmt.Sprintf("%s|%s|%s|%d", c.Name, c.Type, c.JSONPath, c.Priority))
				}
			}
		}
		return strings.Join(out, "\n")
	}
	ours := cols(filepath.Join(root, "config", "crd", "ray.io_rayservices.yaml"))
	theirs := cols(filepath.Join(testutil.KubeRayCRDDir(t), "ray.io_rayservices.yaml"))
	if ours != theirs || ours == "" {
		t.Errorf("print columns:\n%s\nKubeRay's:\n%s", ours, theirs)
	}
}

// testRayUnavailableRetried: a head that does not answer gets no traffic; the failed deploy is reported and retried.
func testRayUnavailableRetried(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rs := makeService(ns, "svc")
	if err := e.cl.Create(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	name := e.waitPending(t, rs, "")
	e.ray.Cluster(ns, name).SetDown(true)
	e.setReady(t, ns, name, 2)
	e.Eventually(t, "failed deploy reported", func() (bool, string) { return e.hasEvent(t, rs, rayservice.EventFailedToUpdateServeApplications) })
	// Each retry (every requeue) is recorded again. How repeats are aggregated into a series is the recorder's
	// rule: this test runs controller-runtime's recorder, whose series key holds the RayService's resourceVersion
	// (which the status write between retries changes); the operator's own recorder keeps one series across it
	// (internal/operator TestEventSeriesKey, TestEventRecorderOwnClientAndSeries). So count occurrences.
	e.Eventually(t, "failed deploys recorded again on retry", func() (bool, string) {
		var list eventsv1.EventList
		if err := e.cl.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		var n, seen int
		for _, ev := range list.Items {
			if ev.Regarding.Name == rs.Name && ev.Reason == rayservice.EventFailedToUpdateServeApplications {
				n++
				seen++
				if ev.Series != nil {
					seen += int(ev.Series.Count) - 1
				}
			}
		}
		return seen >= 2, fmt.Sprintf("%d events, %d occurrences", n, seen)
	})
	got := testutil.Get(t, e.Env, rs)
	if got.Status.ActiveServiceStatus.RayClusterName != "" || cond(got, rayv1.RayServiceReady).Status == metav1.ConditionTrue {
		t.Fatalf("a cluster whose head does not answer became active: %+v", got.Status)
	}
	if head, serve := e.selectors(t, rs); head != "" || serve != "" {
		t.Fatalf("Services created for a cluster that does not serve: %q / %q", head, serve)
	}
	e.ray.Cluster(ns, name).SetDown(false)
	e.waitActive(t, rs, name)
	if n, _ := e.deploys(ns, name); n != 1 {
		t.Errorf("%d successful deploys, want 1", n)
	}
}

// testForeignServiceNotTaken: a Service of the serve Service's name that the RayService does not control is left
// alone and reported.
func testForeignServiceNotTaken(t *testing.T, e *env) {
	ns := e.Namespace(t)
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "svc-serve-svc"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "mine"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if err := e.cl.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	rs := makeService(ns, "svc")
	if err := e.cl.Create(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	name := e.waitPending(t, rs, "")
	e.setReady(t, ns, name, 2)
	e.Eventually(t, "conflict reported", func() (bool, string) {
		ok, msg := e.hasEvent(t, rs, rayservice.EventFailedToCreateService)
		return ok && strings.Contains(msg, "svc-serve-svc"), msg
	})
	got := &corev1.Service{}
	if err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(foreign), got); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Spec.Selector, foreign.Spec.Selector) || len(got.OwnerReferences) != 0 {
		t.Errorf("foreign Service changed: selector %v owners %v", got.Spec.Selector, got.OwnerReferences)
	}
}
