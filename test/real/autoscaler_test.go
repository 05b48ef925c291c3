package real

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

// pendingTasks runs three tasks of one CPU each, one after the other, on a cluster whose head offers no CPU: each
// waits for the autoscaler's worker (one CPU: the whole demand at any time), and the script prints the hosts (pod
// names) they ran on.
const pendingTasks = `import socket, time
import ray

ray.init()


@ray.remote(num_cpus=1)
def where():
    time.sleep(1)
    return socket.gethostname()


print("ran on", sorted({ray.get(where.remote()) for _ in range(3)}))`

// scaleRecord is what a watch of the RayCluster saw the autoscaler write into its only worker group.
type scaleRecord struct {
	mu         sync.Mutex
	maxReplica int32
	deleted    map[string]bool
	// zeroAt is when replicas went from above 0 back to 0.
	zeroAt time.Time
}

func (r *scaleRecord) observe(c *rayv1.RayCluster) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := c.Spec.WorkerGroupSpecs[0]
	n := *g.Replicas
	if n == 0 && r.maxReplica > 0 && r.zeroAt.IsZero() {
		r.zeroAt = time.Now()
	}
	r.maxReplica = max(r.maxReplica, n)
	for _, p := range g.ScaleStrategy.WorkersToDelete {
		r.deleted[p] = true
	}
}

// testAutoscaler: config/samples/raycluster-autoscaler.yaml (KubeRay's ray-cluster.autoscaler.yaml) with
// fitRayResources and idleTimeoutSeconds 30 instead of 60. The autoscaler sidecar runs in the head pod under the
// ServiceAccount, Role and RoleBinding Manta creates, reaching the API server at kubernetes.default through
// kube-proxy. Tasks that need a CPU the head lacks make it raise the worker group from 0 to 1; the worker joins
// and runs them; once it has been idle for idleTimeoutSeconds the autoscaler names it in workersToDelete with
// replicas 0, and Manta deletes it.
func testAutoscaler(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "autoscaler")
	// A failed step leaves no Ray pods behind to take the next step's CPUs.
	t.Cleanup(func() {
		if t.Failed() {
			e.deleteNamespace(t, ctx, ns)
		}
	})
	var rc rayv1.RayCluster
	readSample(t, "raycluster-autoscaler.yaml", &rc)
	rc.Namespace = ns
	fitRayResources(&rc.Spec)
	const idle = 30
	rc.Spec.AutoscalerOptions.IdleTimeoutSeconds = ptrTo(int32(idle))

	wcl, err := client.NewWithWatch(e.cluster.RESTConfig(), client.Options{Scheme: e.cl.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wcl.Watch(ctx, &rayv1.RayClusterList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	rec := &scaleRecord{deleted: map[string]bool{}}
	go func() {
		for ev := range w.ResultChan() {
			if c, ok := ev.Object.(*rayv1.RayCluster); ok && ev.Type != watch.Deleted {
				rec.observe(c)
			}
		}
	}()

	if err := e.cl.Create(ctx, &rc); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, ctx, 10*time.Minute, "RayCluster ready", func() (bool, string) {
		var got rayv1.RayCluster
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(&rc), &got); err != nil {
			return false, err.Error()
		}
		return got.Status.State == rayv1.Ready, fmt.Sprintf("state %q; %s", got.Status.State, e.nsReport(ctx, ns))
	})
	t.Logf("RayCluster ready after %s", time.Since(start).Round(time.Second))

	// The ServiceAccount under the cluster's name, as KubeRay; the Role and RoleBinding as <cluster>-autoscaler.
	sa, role := rc.Name, rc.Name+"-autoscaler"
	if _, err := e.cs.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{}); err != nil {
		t.Errorf("the autoscaler's ServiceAccount: %v", err)
	}
	if _, err := e.cs.RbacV1().Roles(ns).Get(ctx, role, metav1.GetOptions{}); err != nil {
		t.Errorf("the autoscaler's Role: %v", err)
	}
	rb, err := e.cs.RbacV1().RoleBindings(ns).Get(ctx, role, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the autoscaler's RoleBinding: %v", err)
	}
	if want := (rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}); len(rb.Subjects) != 1 || rb.Subjects[0] != want {
		t.Errorf("RoleBinding subjects %v, want %v", rb.Subjects, want)
	}
	head := e.readyHeadPod(t, ctx, ns)
	if head.Spec.ServiceAccountName != sa {
		t.Errorf("head pod's ServiceAccount %q, want %q", head.Spec.ServiceAccountName, sa)
	}
	waitFor(t, ctx, 3*time.Minute, "the autoscaler container ready", func() (bool, string) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, head.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == clusterbuild.AutoscalerContainerName {
				return s.Ready && s.RestartCount == 0, e.podReport(ctx, ns, head.Name)
			}
		}
		return false, "no autoscaler container: " + e.podReport(ctx, ns, head.Name)
	})

	type result struct {
		out string
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	start = time.Now()
	go func() {
		out, err := e.kubectlOut(ctx, "-n", ns, "exec", head.Name, "-c", "ray-head", "--", "python", "-c", pendingTasks)
		done <- result{out, err, time.Now()}
	}()
	var worker string
	waitFor(t, ctx, 10*time.Minute, "a worker pod running", func() (bool, string) {
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: rayv1.LabelNodeType + "=" + rayv1.NodeTypeWorker})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				worker = p.Name
				return true, ""
			}
		}
		return false, e.nsReport(ctx, ns)
	})
	t.Logf("worker %s running %s after the tasks were submitted", worker, time.Since(start).Round(time.Second))
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Minute):
		t.Fatalf("the tasks did not finish: %s\nautoscaler:\n%s", e.nsReport(ctx, ns), e.autoscalerLog(ctx, ns, head.Name))
	}
	if res.err != nil {
		t.Fatalf("the tasks: %v\n%s", res.err, res.out)
	}
	t.Logf("tasks done after %s: %s", res.at.Sub(start).Round(time.Second), strings.TrimSpace(res.out))
	if !strings.Contains(res.out, "ran on ['"+worker+"']") {
		t.Errorf("the tasks did not run on the worker %s alone: %s", worker, res.out)
	}
	rec.mu.Lock()
	up := rec.maxReplica
	rec.mu.Unlock()
	if up != 1 {
		t.Errorf("the autoscaler raised replicas to %d, want 1 (one one-CPU task at a time fits one worker)", up)
	}

	waitFor(t, ctx, 5*time.Minute, "the idle worker removed", func() (bool, string) {
		var got rayv1.RayCluster
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(&rc), &got); err != nil {
			return false, err.Error()
		}
		_, err := e.cs.CoreV1().Pods(ns).Get(ctx, worker, metav1.GetOptions{})
		replicas := *got.Spec.WorkerGroupSpecs[0].Replicas
		return replicas == 0 && err != nil, fmt.Sprintf("replicas %d, worker pod: %v", replicas, err)
	})
	rec.mu.Lock()
	named, zeroAt := rec.deleted[worker], rec.zeroAt
	rec.mu.Unlock()
	t.Logf("replicas back to 0 %s after the tasks ended", zeroAt.Sub(res.at).Round(time.Second))
	if !named {
		t.Errorf("the worker %s was removed without the autoscaler naming it in workersToDelete", worker)
	}
	// The worker went idle before kubectl exec returned, by at most the time the answer took to come back.
	if zeroAt.Sub(res.at) < (idle-5)*time.Second {
		t.Errorf("the worker was removed %s after its tasks ended, before idleTimeoutSeconds (%ds)", zeroAt.Sub(res.at), idle)
	}
	// Events reach the API server after the writes they report: wait for it.
	var deletion string
	waitFor(t, ctx, time.Minute, "an event of the deletion for workersToDelete", func() (bool, string) {
		evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + rc.Name})
		if err != nil {
			return false, err.Error()
		}
		var all []string
		for _, ev := range evs.Items {
			all = append(all, ev.Reason+": "+ev.Message)
			if strings.Contains(ev.Message, worker) && strings.Contains(ev.Message, "workersToDelete") {
				deletion = ev.Reason + ": " + ev.Message
			}
		}
		return deletion != "", "events of the RayCluster: " + strings.Join(all, " | ")
	})
	t.Logf("event: %s", deletion)
	e.deleteNamespace(t, ctx, ns)
}

// readyHeadPod returns the namespace's running head pod.
func (e *env) readyHeadPod(t *testing.T, ctx context.Context, ns string) *corev1.Pod {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: rayv1.LabelNodeType + "=" + rayv1.NodeTypeHead})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if testutil.PodReady(&pods.Items[i]) {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no ready head pod: %s", e.nsReport(ctx, ns))
	return nil
}

func (e *env) autoscalerLog(ctx context.Context, ns, head string) string {
	out, err := e.logs(ctx, ns, head, clusterbuild.AutoscalerContainerName)
	if err != nil {
		return err.Error()
	}
	return out
}
