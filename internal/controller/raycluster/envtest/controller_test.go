package envtest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/controller/shared/metawrite"
	"github.com/manta-dev/manta/internal/testutil"
)

const defaultsNS = "manta-system"

// testCreateBackoffBase is the env's first wait after a refused pod create (1 s in the operator).
const testCreateBackoffBase = 100 * time.Millisecond

// env is one envtest control plane with the controller running, shared by the subtests (each in its namespace).
type env struct {
	*testutil.Env
	cl client.Client
	// wcl watches, for the checks that count writes.
	wcl client.WithWatch
	// creates records every pod create the controller attempts, by namespace, with its time and outcome.
	creates createLog
}

// createLog is filled by an interceptor on the controller's client.
type createLog struct {
	mu sync.Mutex
	by map[string][]createAttempt
}

type createAttempt struct {
	at     time.Time
	failed bool
}

func (l *createLog) record(ns string, failed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[string][]createAttempt{}
	}
	l.by[ns] = append(l.by[ns], createAttempt{time.Now(), failed})
}

func (l *createLog) in(ns string) []createAttempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.by[ns])
}

func TestController(t *testing.T) {
	e := startEnv(t)
	t.Run("group", func(t *testing.T) {
		for name, fn := range map[string]func(*testing.T, *env){
			"CreateAndReady":            testCreateAndReady,
			"ScaleUpDown":               testScaleUpDown,
			"WorkersToDelete":           testWorkersToDelete,
			"FailedPodReplaced":         testFailedPodReplaced,
			"SuspendResume":             testSuspendResume,
			"RecreateOnImageChange":     testRecreate,
			"NoRecreateWithoutPolicy":   testNoRecreateWithoutPolicy,
			"AdoptUnstampedPods":        testAdopt,
			"UpgradeFromOtherRelease":   testUpgradeFromOtherRelease,
			"RefusedUnderRayJob":        testRefusedUnderRayJob,
			"RefusedAutoscalerSpec":     testRefusedAutoscalerSpec,
			"UnsupportedFeature":        testUnsupported,
			"ServeAndHeadlessService":   testServeAndHeadless,
			"MultiHostReplicas":         testMultiHost,
			"ServicesFollowSpec":        testServicesFollowSpec,
			"RayContainerTerminated":    testRayContainerTerminated,
			"ManagedByOtherSkipped":     testManagedByOther,
			"HeadRestartDisabled":       testHeadRestartDisabled,
			"GCSFinalizerReleased":      testGCSFinalizerReleased,
			"QuotaBackoff":              testQuotaBackoff,
			"RedisCleanupComplete":      testRedisCleanupComplete,
			"RedisCleanupFailed":        testRedisCleanupFailed,
			"RedisCleanupAdopted":       testRedisCleanupAdopted,
			"NoFinalizerWithoutRedis":   testNoFinalizerWithoutRedis,
			"AuthSecretCreated":         testAuthSecretCreated,
			"AuthSecretNamedOrExisting": testAuthSecretNamedOrExisting,
			"AutoscalerV1RestartWarn":   testAutoscalerV1RestartPolicy,
			"RedisCleanupTimeout":       testRedisCleanupTimeout,
			"NetworkPolicies":           testNetworkPolicies,
			"HeadIngress":               testHeadIngress,
			"TLS":                       testTLS,
			"GCSStorage":                testGCSStorage,
			"StartTrouble":              testStartTrouble,
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				fn(t, e)
			})
		}
	})
}

// startEnv starts an envtest control plane with the RayCluster controller running, stopped when t ends.
func startEnv(t *testing.T) *env {
	// cert-manager's CRDs too, for tlsOptions (testTLS plays cert-manager).
	cfg, cl := testutil.StartEnvtestWithCRDs(t, filepath.Join(testutil.MustRepoRoot(t), "config", "crd"), testutil.CertManagerCRDs(t))
	e := &env{Env: testutil.NewEnv(cl), cl: cl}
	e.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: defaultsNS}}, &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: defaultsNS, Name: "defaults"},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"defaulted": "yes"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "default", Image: "placeholder", Env: []corev1.EnvVar{{Name: "FROM_DEFAULT", Value: "1"}}},
				{Name: "primary", Image: "placeholder", Env: []corev1.EnvVar{{Name: "FROM_PRIMARY", Value: "1"}}},
			}},
		},
	})

	var err error
	if e.wcl, err = client.NewWithWatch(cfg, client.Options{Scheme: cl.Scheme()}); err != nil {
		t.Fatal(err)
	}
	mgr := testutil.NewManager(t, cfg, rayPodsOnly, func(o *ctrl.Options) { o.NewClient = e.recordingPodCreates })
	// The operator's own status writer (internal/operator): with it the controller reads a cluster's spec from the
	// cache in place, and the check below holds it to that.
	status, err := metawrite.NewStatus(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		t.Fatal(err)
	}
	if err := raycluster.NewReconciler(mgr, raycluster.Options{DefaultPodTemplate: defaultsNS + "/defaults", MaxConcurrentReconciles: 4,
		CreateBackoffBase: testCreateBackoffBase, CreateBackoffMax: 5 * time.Second, StatusWriter: status}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testutil.RunManager(t, mgr)
	// Registered after the manager's stop, so it runs first, while the cache still follows the API server.
	t.Cleanup(func() {
		testutil.SpecsAsStored(t, mgr.GetCache(), mgr.GetAPIReader(), &rayv1.RayClusterList{},
			func(o client.Object) any { return o.(*rayv1.RayCluster).Spec })
	})
	return e
}

// rayPodsOnly is the operator's pod cache: Ray's pods alone.
var rayPodsOnly = testutil.CacheOnlyLabelled(&corev1.Pod{}, rayv1.LabelNodeType)

// recordingPodCreates is the manager's client, recording in e.creates every pod create it attempts.
func (e *env) recordingPodCreates(config *rest.Config, options client.Options) (client.Client, error) {
	c, err := client.NewWithWatch(config, options)
	if err != nil {
		return nil, err
	}
	return interceptor.NewClient(c, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		err := c.Create(ctx, obj, opts...)
		if _, pod := obj.(*corev1.Pod); pod {
			e.creates.record(obj.GetNamespace(), err != nil)
		}
		return err
	}}), nil
}

func (e *env) pods(t *testing.T, rc *rayv1.RayCluster, extra ...string) []corev1.Pod {
	t.Helper()
	sel := client.MatchingLabels{rayv1.LabelCluster: rc.Name}
	if len(extra) == 2 {
		sel[extra[0]] = extra[1]
	}
	list := &corev1.PodList{}
	if err := e.cl.List(context.Background(), list, client.InNamespace(rc.Namespace), sel); err != nil {
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

// waitObserved waits until the controller has reconciled the cluster's current generation (it writes
// status.observedGeneration with every status it writes), so what a test then finds absent is absent for good.
func (e *env) waitObserved(t *testing.T, rc *rayv1.RayCluster) {
	t.Helper()
	testutil.WaitFor(t, e.Env, rc, "observedGeneration", func(got *rayv1.RayCluster) bool { return got.Status.ObservedGeneration == got.Generation })
}

// waitPods waits for n pods of rc (head + workers) and returns them.
func (e *env) waitPods(t *testing.T, rc *rayv1.RayCluster, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	e.Eventually(t, fmt.Sprintf("%d pods", n), func() (bool, string) {
		pods = e.pods(t, rc)
		return len(pods) == n, fmt.Sprintf("%d pods", len(pods))
	})
	// Once the controller has written the status of this generation, it has acted on the pods it saw.
	e.waitObserved(t, rc)
	if pods = e.pods(t, rc); len(pods) != n {
		t.Fatalf("%d pods, want %d", len(pods), n)
	}
	return pods
}

// setReady plays the kubelet: every pod of rc becomes Running and Ready with an IP.
func (e *env) setReady(t *testing.T, rc *rayv1.RayCluster) {
	t.Helper()
	for i, p := range e.pods(t, rc) {
		if clusterbuild.PodRunningAndReady(&p) {
			continue
		}
		testutil.SetPodPhase(t, e.cl, &p, corev1.PodRunning, true, fmt.Sprintf("10.0.%d.%d", i/200, i%200+1))
	}
}

func (e *env) waitState(t *testing.T, rc *rayv1.RayCluster, state rayv1.ClusterState) *rayv1.RayCluster {
	t.Helper()
	return testutil.WaitFor(t, e.Env, rc, "state "+string(state), func(got *rayv1.RayCluster) bool { return got.Status.State == state })
}

func uids(pods []corev1.Pod) map[types.UID]bool {
	m := map[types.UID]bool{}
	for _, p := range pods {
		m[p.UID] = true
	}
	return m
}

func testCreateAndReady(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 3).Obj()
	e.Create(t, rc)
	pods := e.waitPods(t, rc, 4)
	for _, p := range pods {
		if p.Labels["defaulted"] != "yes" || len(p.OwnerReferences) != 1 || p.Annotations[clusterbuild.AnnotationPodTemplateHash] == "" {
			t.Errorf("pod %s: labels %v owners %v annotations %v", p.Name, p.Labels, p.OwnerReferences, p.Annotations)
		}
		env := map[string]bool{}
		for _, v := range p.Spec.Containers[0].Env {
			env[v.Name] = true
		}
		if !env["FROM_DEFAULT"] || !env["FROM_PRIMARY"] || !env["KUBERAY_GEN_RAY_START_CMD"] {
			t.Errorf("pod %s env %v", p.Name, env)
		}
	}
	svc := &corev1.Service{}
	if err := e.cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "rc-head-svc"}, svc); err != nil {
		t.Fatalf("head service: %v", err)
	}
	got := testutil.Get(t, e.Env, rc)
	if got.Status.State == rayv1.Ready || meta.IsStatusConditionTrue(got.Status.Conditions, string(rayv1.HeadPodReady)) {
		t.Errorf("ready before the pods are: %+v", got.Status)
	}
	e.setReady(t, rc)
	got = e.waitState(t, rc, rayv1.Ready)
	s := got.Status
	if s.DesiredWorkerReplicas != 3 || s.ReadyWorkerReplicas != 3 || s.AvailableWorkerReplicas != 3 || s.MinWorkerReplicas != 0 || s.MaxWorkerReplicas != 10 {
		t.Errorf("replicas: %+v", s)
	}
	if s.DesiredCPU.String() != "4" || s.DesiredMemory.String() != "5Gi" {
		t.Errorf("desired cpu %s memory %s", s.DesiredCPU.String(), s.DesiredMemory.String())
	}
	if s.Head.PodName == "" || s.Head.PodIP == "" || s.Head.ServiceIP != s.Head.PodIP || s.Head.ServiceName != "rc-head-svc" {
		t.Errorf("head: %+v", s.Head)
	}
	if s.Endpoints["dashboard"] != "8265" || s.Endpoints["client"] != "10001" {
		t.Errorf("endpoints: %v", s.Endpoints)
	}
	for _, ct := range []rayv1.RayClusterConditionType{rayv1.RayClusterProvisioned, rayv1.HeadPodReady} {
		if !meta.IsStatusConditionTrue(s.Conditions, string(ct)) {
			t.Errorf("condition %s not true: %+v", ct, s.Conditions)
		}
	}
	if s.ObservedGeneration != got.Generation {
		t.Errorf("observedGeneration %d, generation %d", s.ObservedGeneration, got.Generation)
	}
	// Settled: from the Ready status on, the controller writes the status only when there is something new to
	// say. A spec change it must report (maxReplicas) is the barrier: once status.observedGeneration shows it, the
	// writes between Ready and then are exactly our update and one status write, whatever reconciles ran.
	w, err := e.wcl.Watch(context.Background(), &rayv1.RayClusterList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: got.ResourceVersion, FieldSelector: "metadata.name=" + rc.Name}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].MaxReplicas = ptr.To[int32](11) })
	e.waitObserved(t, rc)
	seen := testutil.Get(t, e.Env, rc)
	if seen.Status.MaxWorkerReplicas != 11 {
		t.Errorf("status.maxWorkerReplicas %d after the spec said 11", seen.Status.MaxWorkerReplicas)
	}
	prev, statusWrites, specWrites := got, 0, 0
	for prev.ResourceVersion != seen.ResourceVersion {
		ev, ok := <-w.ResultChan()
		if !ok {
			t.Fatal("watch closed")
		}
		cur, isRC := ev.Object.(*rayv1.RayCluster)
		if !isRC {
			t.Fatalf("watch event %s: %v", ev.Type, ev.Object)
		}
		if cur.Generation != prev.Generation {
			specWrites++
		} else {
			statusWrites++
		}
		prev = cur
	}
	if specWrites != 1 || statusWrites != 1 {
		t.Errorf("from Ready to observing one spec change: %d spec and %d status writes; want 1 and 1", specWrites, statusWrites)
	}
}

func testScaleUpDown(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 2).Obj()
	e.Create(t, rc)
	e.waitPods(t, rc, 3)
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](6) })
	e.waitPods(t, rc, 7)
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](1) })
	e.waitPods(t, rc, 2)
	// Replicas above maxReplicas are clamped.
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](50) })
	e.waitPods(t, rc, 11)
}

func testWorkersToDelete(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 3).Autoscaling().Obj()
	e.Create(t, rc)
	e.waitPods(t, rc, 4)
	for o, name := range map[client.Object]string{&corev1.ServiceAccount{}: "rc", &rbacv1.Role{}: "rc-autoscaler", &rbacv1.RoleBinding{}: "rc-autoscaler"} {
		if err := e.cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, o); err != nil {
			t.Errorf("autoscaler %T: %v", o, err)
		}
	}
	workers := e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeWorker)
	victim := workers[1].Name
	// What the autoscaler does: lower replicas and name the pod.
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) {
		c.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](2)
		c.Spec.WorkerGroupSpecs[0].ScaleStrategy.WorkersToDelete = []string{victim}
	})
	pods := e.waitPods(t, rc, 3)
	for _, p := range pods {
		if p.Name == victim {
			t.Errorf("pod %s named in workersToDelete still exists", victim)
		}
	}
	e.Eventually(t, "workersToDelete cleared", func() (bool, string) {
		w := testutil.Get(t, e.Env, rc).Spec.WorkerGroupSpecs[0].ScaleStrategy.WorkersToDelete
		return len(w) == 0, fmt.Sprint(w)
	})
	// With the autoscaler on, surplus pods are not deleted at random.
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](1) })
	e.waitObserved(t, rc)
	if n := len(e.pods(t, rc)); n != 3 {
		t.Errorf("%d pods after lowering replicas under the autoscaler, want 3", n)
	}
}

func testFailedPodReplaced(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 2).Obj()
	e.Create(t, rc)
	pods := e.waitPods(t, rc, 3)
	var victim corev1.Pod
	for _, p := range pods {
		if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeWorker {
			victim = p
		}
	}
	testutil.SetPodPhase(t, e.cl, &victim, corev1.PodFailed, false, "")
	e.Eventually(t, "failed pod replaced", func() (bool, string) {
		pods := e.pods(t, rc)
		return len(pods) == 3 && !uids(pods)[victim.UID], fmt.Sprintf("%d pods", len(pods))
	})
	// The head too, with restartPolicy Never and a terminated Ray container.
	head := e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeHead)[0]
	if err := e.cl.Delete(context.Background(), &head); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "head recreated", func() (bool, string) {
		h := e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeHead)
		return len(h) == 1 && h[0].UID != head.UID, fmt.Sprintf("%d heads", len(h))
	})
}

func testSuspendResume(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 2).Obj()
	e.Create(t, rc)
	e.waitPods(t, rc, 3)
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.Suspend = ptr.To(true) })
	e.waitPods(t, rc, 0)
	got := e.waitState(t, rc, rayv1.Suspended)
	if !meta.IsStatusConditionTrue(got.Status.Conditions, string(rayv1.RayClusterSuspended)) {
		t.Errorf("conditions: %+v", got.Status.Conditions)
	}
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.Suspend = ptr.To(false) })
	e.waitPods(t, rc, 3)
	e.setReady(t, rc)
	got = e.waitState(t, rc, rayv1.Ready)
	// As in KubeRay, both suspend conditions stay, False, once the cluster runs again.
	for _, typ := range []rayv1.RayClusterConditionType{rayv1.RayClusterSuspended, rayv1.RayClusterSuspending} {
		if c := meta.FindStatusCondition(got.Status.Conditions, string(typ)); c == nil || c.Status != metav1.ConditionFalse {
			t.Errorf("%s after resume: %+v", typ, got.Status.Conditions)
		}
	}
}

func testRecreate(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 2).Recreate().Obj()
	e.Create(t, rc)
	before := uids(e.waitPods(t, rc, 3))

	// Replicas and tolerations do not recreate.
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) {
		c.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](3)
		c.Spec.WorkerGroupSpecs[0].Template.Spec.Tolerations = []corev1.Toleration{{Key: "kueue", Operator: corev1.TolerationOpExists}}
		c.Spec.HeadGroupSpec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "kueue", Operator: corev1.TolerationOpExists}}
	})
	pods := e.waitPods(t, rc, 4)
	kept := 0
	for _, p := range pods {
		if before[p.UID] {
			kept++
		}
	}
	if kept != 3 {
		t.Fatalf("replicas/tolerations change recreated pods: kept %d of 3", kept)
	}
	before = uids(pods)

	// Adding a worker group and annotating the head Service change no existing group's template: nothing is
	// recreated, the new group's pod is just added.
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) {
		extra := *c.Spec.WorkerGroupSpecs[0].DeepCopy()
		extra.GroupName = "extra"
		extra.Replicas = ptr.To[int32](1)
		c.Spec.WorkerGroupSpecs = append(c.Spec.WorkerGroupSpecs, extra)
		c.Spec.HeadServiceAnnotations = map[string]string{"example.com/team": "ray"}
	})
	pods = e.waitPods(t, rc, 5)
	kept = 0
	for _, p := range pods {
		if before[p.UID] {
			kept++
		}
	}
	if kept != 4 {
		t.Fatalf("adding a group / head Service annotations recreated pods: kept %d of 4", kept)
	}
	before = uids(pods)

	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) {
		c.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Image = "rayproject/ray:2.53.0"
	})
	e.Eventually(t, "all pods recreated", func() (bool, string) {
		pods := e.pods(t, rc)
		for _, p := range pods {
			if before[p.UID] {
				return false, "old pod " + p.Name + " still there"
			}
		}
		return len(pods) == 5, fmt.Sprintf("%d pods", len(pods))
	})
	for _, p := range e.pods(t, rc, rayv1.LabelGroup, "small") {
		if p.Spec.Containers[0].Image != "rayproject/ray:2.53.0" {
			t.Errorf("pod %s image %s", p.Name, p.Spec.Containers[0].Image)
		}
	}
}

func testNoRecreateWithoutPolicy(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	e.Create(t, rc)
	before := uids(e.waitPods(t, rc, 2))
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Image = "other" })
	e.waitObserved(t, rc)
	for _, p := range e.pods(t, rc) {
		if !before[p.UID] {
			t.Errorf("pod %s recreated without upgradeStrategy", p.Name)
		}
	}
}

func testAdopt(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 2).Recreate().Obj()
	e.Create(t, rc)
	pods := e.waitPods(t, rc, 3)
	before := uids(pods)
	// A cluster taken over from another operator: the pods carry no template hash.
	for i := range pods {
		p := &pods[i]
		patch := client.MergeFrom(p.DeepCopy())
		delete(p.Annotations, clusterbuild.AnnotationPodTemplateHash)
		if err := e.cl.Patch(context.Background(), p, patch); err != nil {
			t.Fatal(err)
		}
	}
	e.Eventually(t, "pods stamped", func() (bool, string) {
		for _, p := range e.pods(t, rc) {
			if p.Annotations[clusterbuild.AnnotationPodTemplateHash] == "" {
				return false, p.Name + " unstamped"
			}
		}
		return true, ""
	})
	for _, p := range e.pods(t, rc) {
		if !before[p.UID] {
			t.Errorf("adoption recreated pod %s", p.Name)
		}
	}
}

// testUpgradeFromOtherRelease: pods an older Manta stamped with a hash it computed otherwise (or before the stamp
// existed) are taken over under Recreate, not recreated; a template change after that recreates them.
func testUpgradeFromOtherRelease(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 2).Recreate().Obj()
	e.Create(t, rc)
	pods := e.waitPods(t, rc, 3)
	before := uids(pods)
	for i := range pods {
		p := &pods[i]
		patch := client.MergeFrom(p.DeepCopy())
		p.Annotations[clusterbuild.AnnotationPodTemplateHash] = "hashed-by-an-older-release"
		if i == 0 {
			delete(p.Annotations, clusterbuild.AnnotationVersion) // built before the stamp existed
		} else {
			p.Annotations[clusterbuild.AnnotationVersion] = "v0.0.1-older"
		}
		if err := e.cl.Patch(context.Background(), p, patch); err != nil {
			t.Fatal(err)
		}
	}
	e.Eventually(t, "pods stamped by this release", func() (bool, string) {
		for _, p := range e.pods(t, rc) {
			if !clusterbuild.StampedByThisVersion(p.Annotations) || p.Annotations[clusterbuild.AnnotationPodTemplateHash] == "hashed-by-an-older-release" {
				return false, p.Name + " not stamped: " + p.Annotations[clusterbuild.AnnotationVersion]
			}
		}
		return true, ""
	})
	for _, p := range e.pods(t, rc) {
		if !before[p.UID] {
			t.Fatalf("the takeover of another release's pods recreated pod %s", p.Name)
		}
	}

	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) {
		c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Image = "rayproject/ray:2.53.0"
	})
	e.Eventually(t, "all pods recreated", func() (bool, string) {
		pods := e.pods(t, rc)
		for _, p := range pods {
			if before[p.UID] {
				return false, "old pod " + p.Name + " still there"
			}
		}
		return len(pods) == 3, fmt.Sprintf("%d pods", len(pods))
	})
}

func testRefusedUnderRayJob(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Recreate().Label(rayv1.LabelOriginCRD, "RayJob").Obj()
	e.Create(t, rc)
	e.Eventually(t, "InvalidRayClusterSpec", func() (bool, string) {
		c := meta.FindStatusCondition(testutil.Get(t, e.Env, rc).Status.Conditions, raycluster.ConditionInvalidSpec)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "RayJob"), fmt.Sprintf("%+v", c)
	})
	// The condition comes from the reconcile that refused the cluster: it created nothing.
	if n := len(e.pods(t, rc)); n != 0 {
		t.Errorf("%d pods created for a refused cluster", n)
	}
	waitEvent(t, e, ns, raycluster.ConditionInvalidSpec)
}

// A spec KubeRay refuses about the autoscaler (here a suspended worker group the autoscaler would scale anyway) is
// refused the same way: the condition and event name the field, and nothing is created.
func testRefusedAutoscalerSpec(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Autoscaling().Obj()
	rc.Spec.WorkerGroupSpecs[0].Suspend = ptr.To(true)
	e.Create(t, rc)
	e.Eventually(t, "InvalidRayClusterSpec", func() (bool, string) {
		c := meta.FindStatusCondition(testutil.Get(t, e.Env, rc).Status.Conditions, raycluster.ConditionInvalidSpec)
		return c != nil && c.Status == metav1.ConditionTrue && strings.HasPrefix(c.Message, "spec.workerGroupSpecs[0].suspend: "), fmt.Sprintf("%+v", c)
	})
	if n := len(e.pods(t, rc)); n != 0 {
		t.Errorf("%d pods created for a refused cluster", n)
	}
	waitEvent(t, e, ns, raycluster.ConditionInvalidSpec)
}

// Under autoscaler v1 a worker group that restarts in place is warned about with KubeRay's reason, and still runs
// with the policy it asked for (KubeRay v1.7).
func testAutoscalerV1RestartPolicy(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Autoscaling().Obj()
	rc.Spec.AutoscalerOptions = &rayv1.AutoscalerOptions{Version: ptr.To(rayv1.AutoscalerVersionV1)}
	rc.Spec.WorkerGroupSpecs[0].Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	e.Create(t, rc)
	waitEvent(t, e, ns, raycluster.ConditionInvalidSpec)
	workers := e.waitPods(t, rc, 2)
	for _, p := range workers {
		if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeWorker && p.Spec.RestartPolicy != corev1.RestartPolicyAlways {
			t.Errorf("worker %s restartPolicy %q, want the template's Always", p.Name, p.Spec.RestartPolicy)
		}
	}
	if c := meta.FindStatusCondition(testutil.Get(t, e.Env, rc).Status.Conditions, raycluster.ConditionInvalidSpec); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("refused: %+v", c)
	}
}

func testUnsupported(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	rc.Spec.AutoscalerOptions = &rayv1.AutoscalerOptions{}
	e.Create(t, rc)
	e.waitPods(t, rc, 2)
	e.setReady(t, rc)
	got := e.waitState(t, rc, rayv1.Ready)
	c := meta.FindStatusCondition(got.Status.Conditions, raycluster.ConditionUnsupportedFeature)
	if c == nil || c.Status != metav1.ConditionTrue || c.Message != "unsupported fields are ignored: spec.autoscalerOptions (enableInTreeAutoscaling is not true)" {
		t.Errorf("UnsupportedFeature condition: %+v", c)
	}
	waitEvent(t, e, ns, raycluster.ConditionUnsupportedFeature)
}

func testServeAndHeadless(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("tpu", 1).Obj()
	rc.Annotations = map[string]string{clusterbuild.AnnotationEnableServeService: "true"}
	rc.Spec.WorkerGroupSpecs[0].NumOfHosts = 4
	e.Create(t, rc)
	e.waitPods(t, rc, 5)
	for _, name := range []string{"rc-head-svc", "rc-serve-svc", "rc-headless"} {
		if err := e.cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &corev1.Service{}); err != nil {
			t.Errorf("service %s: %v", name, err)
		}
	}
}

func waitEvent(t *testing.T, e *env, ns, reason string) {
	t.Helper()
	e.Eventually(t, "event "+reason, func() (bool, string) {
		list := &corev1.EventList{}
		if err := e.cl.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, ev := range list.Items {
			if ev.Reason == reason {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(list.Items))
	})
}

// A default PodTemplate that does not exist: the cluster says so (the DefaultPodTemplateFailure condition and a
// DefaultTemplateNotFound event) and its pods are made without defaults. A controller of its own names the missing
// template, on a control plane of its own.
func TestMissingDefaultTemplate(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	const ns = "missing-template"
	e := &env{Env: testutil.NewEnv(cl), cl: cl}
	e.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	startNamespaced(t, cfg, ns, raycluster.Options{DefaultPodTemplate: "nowhere/missing", MaxParallelWrites: 10})
	rc := testutil.MakeRayCluster(ns, "rc").Obj()
	e.Create(t, rc)
	e.Eventually(t, "the DefaultPodTemplateFailure condition", func() (bool, string) {
		got := testutil.Get(t, e.Env, rc)
		c := meta.FindStatusCondition(got.Status.Conditions, raycluster.ConditionDefaultPodTemplateFailure)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("conditions %+v", got.Status.Conditions)
	})
	e.Eventually(t, "a "+raycluster.ReasonDefaultTemplateNotFound+" event", func() (bool, string) {
		return len(e.events(t, ns, raycluster.ReasonDefaultTemplateNotFound)) > 0, "none"
	})
	e.Eventually(t, "head pod without defaults", func() (bool, string) {
		h := e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeHead)
		return len(h) == 1 && h[0].Labels["defaulted"] == "", fmt.Sprintf("%d heads", len(h))
	})
}

// A multi-host replica is numOfHosts pods with one replica name; when one host fails the whole replica is
// replaced, and replica indices stay unique.
func testMultiHost(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("tpu", 2).Obj()
	rc.Spec.WorkerGroupSpecs[0].NumOfHosts = 2
	e.Create(t, rc)
	e.waitPods(t, rc, 5)
	byReplica := func() map[string][]corev1.Pod {
		m := map[string][]corev1.Pod{}
		for _, p := range e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeWorker) {
			m[p.Labels[rayv1.LabelReplicaName]] = append(m[p.Labels[rayv1.LabelReplicaName]], p)
		}
		return m
	}
	reps := byReplica()
	if len(reps) != 2 {
		t.Fatalf("replicas: %v", reps)
	}
	indices := map[string]bool{}
	for name, pods := range reps {
		if len(pods) != 2 || pods[0].Labels[rayv1.LabelHostIndex] == pods[1].Labels[rayv1.LabelHostIndex] ||
			pods[0].Labels[rayv1.LabelReplicaIndex] != pods[1].Labels[rayv1.LabelReplicaIndex] {
			t.Errorf("replica %s: %d pods, labels %v / %v", name, len(pods), pods[0].Labels, pods[len(pods)-1].Labels)
		}
		indices[pods[0].Labels[rayv1.LabelReplicaIndex]] = true
	}
	if !indices["0"] || !indices["1"] {
		t.Errorf("replica indices %v", indices)
	}
	var victim string
	for name, pods := range reps {
		victim = name
		testutil.SetPodPhase(t, e.cl, &pods[0], corev1.PodFailed, false, "")
		break
	}
	e.Eventually(t, "whole replica replaced", func() (bool, string) {
		now := byReplica()
		_, still := now[victim]
		n := 0
		for _, pods := range now {
			n += len(pods)
		}
		return !still && len(now) == 2 && n == 4, fmt.Sprintf("%d replicas, %d pods, old present %v", len(now), n, still)
	})

	// A host that is deleted outright (node drained, pod evicted) costs its replica too: a TPU slice cannot take
	// in a single new host, so no pod is created into the old replica.
	for name, pods := range byReplica() {
		victim = name
		if err := e.cl.Delete(context.Background(), &pods[0]); err != nil {
			t.Fatal(err)
		}
		break
	}
	e.Eventually(t, "replica of a deleted host replaced", func() (bool, string) {
		now := byReplica()
		_, still := now[victim]
		n := 0
		for _, pods := range now {
			n += len(pods)
		}
		return !still && len(now) == 2 && n == 4, fmt.Sprintf("%d replicas, %d pods, old present %v", len(now), n, still)
	})
}

// The head and serve Services follow the spec: ports, headServiceAnnotations and the service type, without
// dropping what others wrote on them and without rewriting them when nothing changed.
func testServicesFollowSpec(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	rc.Annotations = map[string]string{clusterbuild.AnnotationEnableServeService: "true"}
	e.Create(t, rc)
	e.waitPods(t, rc, 2)
	getSvc := func(name string) *corev1.Service {
		svc := &corev1.Service{}
		if err := e.cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, svc); err != nil {
			t.Fatalf("service %s: %v", name, err)
		}
		return svc
	}
	head := getSvc("rc-head-svc")
	patch := client.MergeFrom(head.DeepCopy())
	head.Annotations = map[string]string{"someone/else": "keep"}
	if err := e.cl.Patch(context.Background(), head, patch); err != nil {
		t.Fatal(err)
	}

	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) {
		c.Spec.HeadServiceAnnotations = map[string]string{"prometheus.io/scrape": "true"}
		c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{
			{Name: "gcs-server", ContainerPort: 6379}, {Name: "dashboard", ContainerPort: 8265},
			{Name: "client", ContainerPort: 10001}, {Name: "serve", ContainerPort: 9000}, {Name: "extra", ContainerPort: 1234},
		}
	})
	e.Eventually(t, "head and serve Services updated", func() (bool, string) {
		head, serve := getSvc("rc-head-svc"), getSvc("rc-serve-svc")
		ports := map[string]int32{}
		for _, p := range head.Spec.Ports {
			ports[p.Name] = p.Port
		}
		ok := head.Annotations["prometheus.io/scrape"] == "true" && head.Annotations["someone/else"] == "keep" &&
			ports["extra"] == 1234 && len(serve.Spec.Ports) == 1 && serve.Spec.Ports[0].Port == 9000
		return ok, fmt.Sprintf("head annotations %v ports %v, serve ports %+v", head.Annotations, ports, serve.Spec.Ports)
	})
	waitEvent(t, e, ns, "UpdatedService")

	// Settled: another reconcile does not write the Services again.
	rvHead, rvServe := getSvc("rc-head-svc").ResourceVersion, getSvc("rc-serve-svc").ResourceVersion
	// A spec change that leaves the Services as they are: once the controller has reconciled it, they are unwritten.
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].MaxReplicas = ptr.To[int32](7) })
	e.waitObserved(t, rc)
	if h, s := getSvc("rc-head-svc").ResourceVersion, getSvc("rc-serve-svc").ResourceVersion; h != rvHead || s != rvServe {
		t.Errorf("settled Services rewritten: head %s -> %s, serve %s -> %s", rvHead, h, rvServe, s)
	}

	// A headless Service cannot become a NodePort one in place: it is recreated, and the endpoints follow.
	oldUID := getSvc("rc-head-svc").UID
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.HeadGroupSpec.ServiceType = corev1.ServiceTypeNodePort })
	e.Eventually(t, "head Service recreated as NodePort", func() (bool, string) {
		svc := &corev1.Service{}
		if err := e.cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "rc-head-svc"}, svc); err != nil {
			return false, err.Error()
		}
		return svc.UID != oldUID && svc.Spec.Type == corev1.ServiceTypeNodePort, fmt.Sprintf("type %s", svc.Spec.Type)
	})
	e.Eventually(t, "endpoints are node ports", func() (bool, string) {
		ep := testutil.Get(t, e.Env, rc).Status.Endpoints
		n, _ := strconv.Atoi(ep["dashboard"])
		return n >= 30000, fmt.Sprint(ep)
	})

	// The serve Service goes when the cluster no longer asks for it; the head Service stays.
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { delete(c.Annotations, clusterbuild.AnnotationEnableServeService) })
	e.Eventually(t, "serve Service deleted", func() (bool, string) {
		err := e.cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "rc-serve-svc"}, &corev1.Service{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	waitEvent(t, e, ns, "DeletedService")
	getSvc("rc-head-svc")
}

// Under restartPolicy Never a pod whose Ray container terminated stays Running (its sidecars run on) but is dead
// for Ray: head and workers are replaced.
func testRayContainerTerminated(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	rc.Spec.HeadGroupSpec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	rc.Spec.WorkerGroupSpecs[0].Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	e.Create(t, rc)
	pods := e.waitPods(t, rc, 2)
	for i := range pods {
		p := &pods[i]
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image, ImageID: "x",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}},
		}}
		if err := e.cl.Status().Update(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	old := uids(pods)
	e.Eventually(t, "head and worker replaced", func() (bool, string) {
		now := e.pods(t, rc)
		for _, p := range now {
			if old[p.UID] {
				return false, "old pod " + p.Name + " still there"
			}
		}
		return len(now) == 2, fmt.Sprintf("%d pods", len(now))
	})
}

// A RayCluster managed by another controller (MultiKueue) is left alone: no pods, no Services, no status.
func testManagedByOther(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	rc.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue")
	e.Create(t, rc)
	ours := testutil.MakeRayCluster(ns, "ours").Obj()
	e.Create(t, ours)
	// Once the controller has handled a cluster created after it, it has seen the other one too.
	e.waitPods(t, ours, 1)
	e.waitObserved(t, ours)
	if n := len(e.pods(t, rc)); n != 0 {
		t.Errorf("%d pods created for a cluster managed by another controller", n)
	}
	if err := e.cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "rc-head-svc"}, &corev1.Service{}); err == nil {
		t.Error("head Service created for a cluster managed by another controller")
	}
	if st := testutil.Get(t, e.Env, rc).Status; st.ObservedGeneration != 0 || len(st.Conditions) != 0 || st.State != "" {
		t.Errorf("status written for a cluster managed by another controller: %+v", st)
	}
}

// A cluster labelled ray.io/disable-provisioned-head-restart=true (a SidecarMode RayJob's) keeps its terminated
// head once provisioned and makes no new one; before provisioning, a lost head is replaced as usual.
func testHeadRestartDisabled(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	rc.Annotations = map[string]string{rayv1.LabelDisableProvisionedHeadRestart: "true"}
	rc.Spec.HeadGroupSpec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	e.Create(t, rc)
	e.waitPods(t, rc, 2)
	e.setReady(t, rc)
	e.waitState(t, rc, rayv1.Ready)
	head := e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeHead)[0]
	head.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: head.Spec.Containers[0].Name, Image: head.Spec.Containers[0].Image, ImageID: "x",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}},
	}}
	head.Status.Phase = corev1.PodFailed
	if err := e.cl.Status().Update(context.Background(), &head); err != nil {
		t.Fatal(err)
	}
	// The event comes from the reconcile that saw the terminated head and chose to keep it.
	waitEvent(t, e, ns, "HeadPodNotRestarted")
	heads := e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeHead)
	if len(heads) != 1 || heads[0].UID != head.UID {
		t.Fatalf("heads after the head terminated = %d (want the terminated one kept, no new one)", len(heads))
	}
}

// A cluster that carries the Redis cleanup finalizer without a Redis-backed GCS (the annotation was removed, say)
// has nothing to clean; deleting it must not hang forever (issue 11). Manta removes the finalizer and says, in a
// Warning event, that Redis was not cleaned.
func testGCSFinalizerReleased(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Obj()
	rc.Finalizers = []string{clusterbuild.FinalizerGCSFTRedisCleanup}
	e.Create(t, rc)
	e.waitPods(t, rc, 1)
	if err := e.cl.Delete(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "cluster deleted", func() (bool, string) {
		err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(rc), &rayv1.RayCluster{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	e.Eventually(t, "warning event", func() (bool, string) {
		list := &corev1.EventList{}
		if err := e.cl.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, ev := range list.Items {
			if ev.Reason == raycluster.ReasonRedisCleanupSkipped && ev.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none %s", len(list.Items), raycluster.ReasonRedisCleanupSkipped)
	})
}
