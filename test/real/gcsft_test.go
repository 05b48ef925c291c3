package real

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

const redisPassword = "5241590000000000"

// testGCSFaultTolerance: a RayCluster (config/samples/raycluster.yaml with one worker, fitRayResources, and a head
// that offers Ray no CPU so actors run on the worker) keeps its GCS in a real Redis, with the password from a
// Secret. A detached actor counts to 2; the head pod is deleted; Manta's new head recovers the GCS from Redis and
// the actor, still on the worker, counts on to 3. Deleting the cluster runs Manta's Redis cleanup Job, whose pod
// completes, and the cluster's storage namespace, whose keys were in Redis before, is gone from it.
func testGCSFaultTolerance(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "gcsft")
	e.startRedis(t, ctx, ns)

	var rc rayv1.RayCluster
	readSample(t, "raycluster.yaml", &rc)
	rc.Namespace = ns
	rc.Spec.WorkerGroupSpecs[0].Replicas = ptrTo(int32(1))
	fitRayResources(&rc.Spec)
	rc.Spec.HeadGroupSpec.RayStartParams = map[string]string{"num-cpus": "0"}
	rc.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{
		RedisAddress: "redis:6379",
		RedisPassword: &rayv1.RedisCredential{ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "redis-password"}, Key: "password"}}},
	}
	if err := e.cl.Create(ctx, &rc); err != nil {
		t.Fatal(err)
	}
	storageNS := clusterbuild.ExternalStorageNamespace(&rc)
	start := time.Now()
	head := e.waitRayClusterReady(t, ctx, &rc, "")
	t.Logf("GCS FT cluster ready in %s (head %s, storage namespace %s)", time.Since(start).Round(time.Second), head.Name, storageNS)

	out := e.headPython(t, ctx, ns, head.Name, strings.Join([]string{
		"import ray",
		"ray.init(namespace='gcsft')",
		"@ray.remote(num_cpus=1)",
		"class Counter:",
		"    def __init__(self): self.n = 0",
		"    def incr(self):",
		"        self.n += 1",
		"        return self.n",
		"    def node(self): return ray.get_runtime_context().get_node_id()",
		"c = Counter.options(name='counter', lifetime='detached').remote()",
		"ray.get(c.incr.remote())",
		"print('count', ray.get(c.incr.remote()))",
		"print('node', ray.get(c.node.remote()))",
		"print('head', ray.get_runtime_context().get_node_id())",
	}, "\n"))
	if !strings.Contains(out, "count 2\n") {
		t.Fatalf("the detached actor did not count to 2:\n%s", out)
	}
	// The actor's state can outlive the head only on another node.
	if actorNode, headNode := outputField(out, "node"), outputField(out, "head"); actorNode == "" || actorNode == headNode {
		t.Fatalf("the actor runs on node %q, the head is %q: want it on the worker\n%s", actorNode, headNode, out)
	}
	keys := e.redisKeys(t, ctx, ns, storageNS)
	if keys == 0 {
		t.Fatalf("no keys of storage namespace %s in Redis while the cluster runs", storageNS)
	}
	t.Logf("%d keys of storage namespace %s in Redis; actor: %s", keys, storageNS, out)
	worker := e.rayPods(t, ctx, ns, rayv1.NodeTypeWorker)
	if len(worker) != 1 {
		t.Fatalf("%d worker pods, want 1: %s", len(worker), e.nsReport(ctx, ns))
	}

	grace := int64(1)
	start = time.Now()
	if err := e.cs.CoreV1().Pods(ns).Delete(ctx, head.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	newHead := e.waitRayClusterReady(t, ctx, &rc, head.UID)
	t.Logf("new head %s ready %s after the old one was deleted", newHead.Name, time.Since(start).Round(time.Second))
	out = e.headPython(t, ctx, ns, newHead.Name, strings.Join([]string{
		"import ray",
		"ray.init(namespace='gcsft')",
		"c = ray.get_actor('counter')",
		"print('count', ray.get(c.incr.remote()))",
	}, "\n"))
	if !strings.Contains(out, "count 3\n") {
		t.Errorf("after the head's restart the detached actor answered %q, want count 3 (its state kept)", out)
	} else {
		t.Logf("after the head's restart the actor, found by name, answers count %s", outputField(out, "count"))
	}
	after := e.rayPods(t, ctx, ns, rayv1.NodeTypeWorker)
	if len(after) != 1 || after[0].UID != worker[0].UID || after[0].Status.ContainerStatuses[0].RestartCount != worker[0].Status.ContainerStatuses[0].RestartCount {
		t.Errorf("the worker was replaced or restarted while the head restarted: before %s, after %s", podIdentity(worker), podIdentity(after))
	}

	// The cleanup Job and its pod are garbage-collected with the cluster once the finalizer is released, so watch
	// them from before the delete.
	cleanup := e.watchCleanup(t, ctx, ns)
	start = time.Now()
	if err := e.cl.Delete(ctx, &rc); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 6*time.Minute, "RayCluster gone after its Redis cleanup", func() (bool, string) {
		err := e.cl.Get(ctx, client.ObjectKeyFromObject(&rc), &rayv1.RayCluster{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%v; cleanup %s; %s", err, cleanup.String(), e.nsReport(ctx, ns))
	})
	cleanup.stop()
	t.Logf("cluster deleted in %s; cleanup: %s", time.Since(start).Round(time.Second), cleanup.String())
	if !cleanup.jobComplete || !cleanup.podSucceeded {
		t.Errorf("the Redis cleanup Job did not run to completion: %s", cleanup.String())
	}
	if keys := e.redisKeys(t, ctx, ns, storageNS); keys != 0 {
		t.Errorf("%d keys of storage namespace %s left in Redis after the cleanup", keys, storageNS)
	}
	e.deleteNamespace(t, ctx, ns)
}

// startRedis runs the dev cluster's Redis image as a pod behind Service redis, with the password of Secret
// redis-password.
func (e *env) startRedis(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	labels := map[string]string{"app": "redis"}
	pw := corev1.EnvVar{Name: "REDIS_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "redis-password"}, Key: "password"}}}
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "redis-password", Namespace: ns}, StringData: map[string]string{"password": redisPassword}},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "redis", Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "redis", Image: "redis:7.4.0",
				// The image's entrypoint passes leading options to redis-server.
				Args:  []string{"--requirepass", "$(REDIS_PASSWORD)"},
				Env:   []corev1.EnvVar{pw},
				Ports: []corev1.ContainerPort{{ContainerPort: 6379}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(6379)}},
					PeriodSeconds: 1},
				Resources: smallResources("100m"),
			}}},
		},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "redis", Namespace: ns},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 6379, TargetPort: intstr.FromInt32(6379)}}}},
	} {
		if err := e.cl.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, 3*time.Minute, "redis ready", func() (bool, string) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, "redis", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return testutil.PodReady(p), e.podReport(ctx, ns, "redis")
	})
}

// redisKeys counts the keys of Redis whose name holds storage namespace sns (Ray prefixes every GCS table's key
// with it).
func (e *env) redisKeys(t *testing.T, ctx context.Context, ns, sns string) int {
	t.Helper()
	out, err := e.kubectlOut(ctx, "-n", ns, "exec", "redis", "--", "redis-cli", "-a", redisPassword, "--no-auth-warning",
		"--scan", "--pattern", "*"+sns+"*")
	if err != nil {
		t.Fatalf("redis-cli --scan: %v: %s", err, out)
	}
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

// waitRayClusterReady waits for rc's state ready with a ready head other than notUID and its workers ready, and
// returns the head pod.
func (e *env) waitRayClusterReady(t *testing.T, ctx context.Context, rc *rayv1.RayCluster, notUID types.UID) *corev1.Pod {
	t.Helper()
	var head *corev1.Pod
	waitFor(t, ctx, 10*time.Minute, "RayCluster "+rc.Name+" ready", func() (bool, string) {
		var got rayv1.RayCluster
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(rc), &got); err != nil {
			return false, err.Error()
		}
		why := fmt.Sprintf("state %q, %d ready workers; %s", got.Status.State, got.Status.ReadyWorkerReplicas, e.nsReport(ctx, rc.Namespace))
		want := int32(0)
		for _, g := range got.Spec.WorkerGroupSpecs {
			want += ptr.Deref(g.Replicas, 0)
		}
		if got.Status.State != rayv1.Ready || got.Status.ReadyWorkerReplicas != want {
			return false, why
		}
		for _, p := range e.rayPods(t, ctx, rc.Namespace, rayv1.NodeTypeHead) {
			if p.UID != notUID && p.DeletionTimestamp == nil && testutil.PodReady(&p) {
				head = &p
				return true, ""
			}
		}
		return false, "no new ready head; " + why
	})
	return head
}

func (e *env) rayPods(t *testing.T, ctx context.Context, ns, nodeType string) []corev1.Pod {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: rayv1.LabelNodeType + "=" + nodeType})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// outputField is the value after "<key> " on a line of out, "" when no line starts so.
func outputField(out, key string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func podIdentity(pods []corev1.Pod) string {
	var parts []string
	for _, p := range pods {
		restarts := int32(0)
		for _, s := range p.Status.ContainerStatuses {
			restarts += s.RestartCount
		}
		parts = append(parts, fmt.Sprintf("%s (uid %s, %d restarts)", p.Name, p.UID, restarts))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// headPython runs a Python program in the head's Ray container and returns its output.
func (e *env) headPython(t *testing.T, ctx context.Context, ns, head, program string) string {
	t.Helper()
	out, err := e.kubectlOut(ctx, "-n", ns, "exec", head, "-c", "ray-head", "--", "python", "-c", program)
	if err != nil {
		t.Fatalf("python in %s: %v:\n%s", head, err, out)
	}
	return out
}

// cleanupWatch follows the Redis cleanup Job and its pod of a namespace.
type cleanupWatch struct {
	mu           sync.Mutex
	jobComplete  bool
	jobFailed    bool
	podSucceeded bool
	podExit      string
	pod          string
	cancel       context.CancelFunc
	done         sync.WaitGroup
}

func (e *env) watchCleanup(t *testing.T, ctx context.Context, ns string) *cleanupWatch {
	t.Helper()
	sel := rayv1.LabelNodeType + "=" + clusterbuild.NodeTypeRedisCleanup
	wctx, cancel := context.WithCancel(ctx)
	w := &cleanupWatch{cancel: cancel}
	jobs, err := e.cs.BatchV1().Jobs(ns).Watch(wctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := e.cs.CoreV1().Pods(ns).Watch(wctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	w.done.Add(2)
	go func() {
		defer w.done.Done()
		for ev := range jobs.ResultChan() {
			if j, ok := ev.Object.(*batchv1.Job); ok {
				w.mu.Lock()
				for _, c := range j.Status.Conditions {
					w.jobComplete = w.jobComplete || (c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue)
					w.jobFailed = w.jobFailed || (c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue)
				}
				w.mu.Unlock()
			}
		}
	}()
	go func() {
		defer w.done.Done()
		for ev := range pods.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				w.mu.Lock()
				w.pod = p.Name
				w.podSucceeded = w.podSucceeded || p.Status.Phase == corev1.PodSucceeded
				for _, s := range p.Status.ContainerStatuses {
					if s.State.Terminated != nil {
						w.podExit = s.State.Terminated.Reason + " (" + strconv.Itoa(int(s.State.Terminated.ExitCode)) + ")"
					}
				}
				w.mu.Unlock()
			}
		}
	}()
	go func() { <-wctx.Done(); jobs.Stop(); pods.Stop() }()
	return w
}

func (w *cleanupWatch) stop() { w.cancel(); w.done.Wait() }

func (w *cleanupWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("job complete %v failed %v, pod %q succeeded %v exit %q", w.jobComplete, w.jobFailed, w.pod, w.podSucceeded, w.podExit)
}
