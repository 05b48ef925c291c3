package real

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

// rayImage is the image package images builds and the dev cluster serves; the samples name it as rayproject/ray.
const rayImage = "rayproject/ray:2.52.0"

// testDNSAndServices: CoreDNS answers a headless Service with its pod's address and a ClusterIP Service with its
// ClusterIP, kube-proxy forwards the ClusterIP to the pod, and pods reach the API server through the kubernetes
// Service; from this machine, the ClusterIP and the cluster DNS names lead to the pod too (as the operator
// reaches heads).
func testDNSAndServices(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "net")
	web := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: rayImage,
			Command: []string{"bash", "-c", "mkdir -p /tmp/w && echo hello-from-web > /tmp/w/index.html && cd /tmp/w && exec python3 -m http.server 8080"},
			Ports:   []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
				PeriodSeconds: 1},
			Resources: smallResources("100m"),
		}}},
	}
	port := []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}
	for _, obj := range []client.Object{
		web,
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: corev1.ServiceSpec{Selector: web.Labels, Ports: port}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-headless", Namespace: ns}, Spec: corev1.ServiceSpec{Selector: web.Labels, Ports: port, ClusterIP: corev1.ClusterIPNone}},
	} {
		if err := e.cl.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	// Pulling the Ray image (the first time on this node) and starting Python take a while on 2 CPUs.
	waitFor(t, ctx, 5*time.Minute, "web pod ready", func() (bool, string) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return testutil.PodReady(p), e.podReport(ctx, ns, "web")
	})
	webPod, err := e.cs.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := e.cs.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Inside the cluster: a pod resolves both Services by name and fetches through the ClusterIP.
	script := strings.Join([]string{
		"set -e",
		"echo headless $(getent hosts web-headless.net.svc.cluster.local | cut -d' ' -f1)",
		"echo clusterip $(getent hosts web | cut -d' ' -f1)",
		"echo body $(wget -qO- http://web/)",
		"echo fqdn $(wget -qO- http://web.net.svc.cluster.local/)",
		"echo apiserver $(wget -qO- --no-check-certificate https://kubernetes.default.svc/livez)",
	}, "\n")
	client := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: ns},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "client", Image: rayImage, Command: []string{"bash", "-c", script}, Resources: smallResources("100m"),
		}}},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 3*time.Minute, "client pod done", func() (bool, string) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, "client", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase == corev1.PodFailed {
			out, _ := e.logs(ctx, ns, "client", "client")
			t.Fatalf("client pod failed: %s\nlogs:\n%s", e.podReport(ctx, ns, "client"), out)
		}
		return p.Status.Phase == corev1.PodSucceeded, e.podReport(ctx, ns, "client")
	})
	out, err := e.logs(ctx, ns, "client", "client")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("client pod's output:\n%s", out)
	for _, want := range []string{
		"headless " + webPod.Status.PodIP + "\n",
		"clusterip " + svc.Spec.ClusterIP + "\n",
		"body hello-from-web\n",
		"fqdn hello-from-web\n",
		"apiserver ok\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("client pod's output lacks %q", want)
		}
	}

	// From this machine: the ClusterIP through the route to the node, and the DNS name through its CoreDNS.
	for _, url := range []string{"http://" + net.JoinHostPort(svc.Spec.ClusterIP, "80") + "/", "http://web.net.svc.cluster.local/"} {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DialContext: e.cluster.DialContext}}
		resp, err := hc.Get(url)
		if err != nil {
			t.Errorf("GET %s from the host: %v", url, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if strings.TrimSpace(string(body)) != "hello-from-web" {
			t.Errorf("GET %s from the host: %q", url, body)
		}
	}
	e.deleteNamespace(t, ctx, ns)
}

func smallResources(cpu string) corev1.ResourceRequirements {
	q := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("256Mi")}
	return corev1.ResourceRequirements{Requests: q, Limits: q}
}

// fitRayResources is the patch that makes a sample fit the real node's 2 CPUs beside the submitter pod (500m
// requested) on a machine that other work keeps busy:
//   - every Ray container requests 500m CPU and has no CPU limit: Ray counts one CPU (--num-cpus rounds the request
//     up) and the kernel does not throttle a head's dozen processes while they start;
//   - the dashboard waits up to 10 minutes, not 30 s, for its modules' processes to start
//     (RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT): each imports Ray for about 1.3 s of CPU, and with the
//     machine's load at 15-20 on 2 cores, nine of them at once missed the 30 s, the dashboard exited and the head
//     never passed its readiness probe (GCS health on :8265).
//
// Memory stays as the sample asks. Samples whose heads already set the dashboard's wait keep theirs.
func fitRayResources(spec *rayv1.RayClusterSpec) {
	const dashboardWait = "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT"
	patch := func(cs []corev1.Container) {
		for i := range cs {
			cs[i].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("500m")
			delete(cs[i].Resources.Limits, corev1.ResourceCPU)
			if !slices.ContainsFunc(cs[i].Env, func(e corev1.EnvVar) bool { return e.Name == dashboardWait }) {
				cs[i].Env = append(cs[i].Env, corev1.EnvVar{Name: dashboardWait, Value: "600"})
			}
		}
	}
	patch(spec.HeadGroupSpec.Template.Spec.Containers)
	for i := range spec.WorkerGroupSpecs {
		patch(spec.WorkerGroupSpecs[i].Template.Spec.Containers)
	}
}

func readSample[T any](t testing.TB, name string, into *T) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.MustRepoRoot(t), "config", "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// testRayJobSample: config/samples/rayjob.yaml, with its Ray containers' CPU requests at 500m (fitRayResources),
// runs its entrypoint in a real Ray cluster through a real submitter pod, ends SUCCEEDED / Complete, and the
// submitter's logs (`kubectl logs job/rayjob-sample`) hold the entrypoint's output.
func testRayJobSample(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "rayjob")
	var job rayv1.RayJob
	readSample(t, "rayjob.yaml", &job)
	job.Namespace = ns
	fitRayResources(job.Spec.RayClusterSpec)
	if err := e.cl.Create(ctx, &job); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 10*time.Minute, "RayJob "+job.Name+" SUCCEEDED", func() (bool, string) {
		var got rayv1.RayJob
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(&job), &got); err != nil {
			return false, err.Error()
		}
		if got.Status.JobStatus == rayv1.JobStatusFailed || got.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusFailed {
			t.Fatalf("RayJob failed: %s / %s: %s\n%s", got.Status.JobStatus, got.Status.JobDeploymentStatus, got.Status.Message, e.nsReport(ctx, ns))
		}
		return got.Status.JobStatus == rayv1.JobStatusSucceeded && got.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusComplete,
			fmt.Sprintf("%s / %s: %s; %s", got.Status.JobStatus, got.Status.JobDeploymentStatus, got.Status.Message, e.nsReport(ctx, ns))
	})
	out, err := e.kubectlOut(ctx, "-n", ns, "logs", "job/"+job.Name)
	if err != nil {
		t.Fatalf("kubectl logs job/%s: %v: %s", job.Name, err, out)
	}
	t.Logf("kubectl logs job/%s:\n%s", job.Name, out)
	// The entrypoint prints ray.cluster_resources(): the head's and the worker's CPU, one each.
	if !strings.Contains(out, "'CPU': 2.0") || !strings.Contains(out, "succeeded") {
		t.Errorf("the submitter's logs lack the entrypoint's output ('CPU': 2.0) or the job's success")
	}
	e.deleteNamespace(t, ctx, ns)
}

// testRayClusterWorkerJoins: config/samples/raycluster.yaml with one worker (and fitRayResources) reaches ready,
// the worker's ray start names the head Service's DNS name, and `ray status` in the head shows both nodes.
func testRayClusterWorkerJoins(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "raycluster")
	var rc rayv1.RayCluster
	readSample(t, "raycluster.yaml", &rc)
	rc.Namespace = ns
	rc.Spec.WorkerGroupSpecs[0].Replicas = ptrTo(int32(1))
	fitRayResources(&rc.Spec)
	if err := e.cl.Create(ctx, &rc); err != nil {
		t.Fatal(err)
	}
	e.waitClusterReady(t, ctx, &rc, 1)
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var head string
	for _, p := range pods.Items {
		switch p.Labels["ray.io/node-type"] {
		case "head":
			head = p.Name
		case "worker":
			all := strings.Join(append(p.Spec.Containers[0].Command, p.Spec.Containers[0].Args...), " ")
			if !strings.Contains(all, ".svc.cluster.local") {
				t.Errorf("worker %s does not reach the head through its Service's DNS name: %s", p.Name, all)
			}
		}
	}
	if head == "" {
		t.Fatalf("no head pod: %s", e.nsReport(ctx, ns))
	}
	var status string
	waitFor(t, ctx, 3*time.Minute, "ray status shows 2 nodes", func() (bool, string) {
		out, err := e.kubectlOut(ctx, "-n", ns, "exec", head, "-c", "ray-head", "--", "ray", "status")
		status = out
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		return rayStatusNodes(out) == 2, out
	})
	t.Logf("ray status in the head:\n%s", status)
	e.checkProbesAndInit(t, ctx, ns)
	e.killRaylet(t, ctx, &rc)
	e.deleteNamespace(t, ctx, ns)
}

// checkProbesAndInit: the Ray containers carry the readiness and liveness probes Manta writes and are Ready (the
// readiness probe passed), and the worker's wait-for-GCS init container ran and exited 0.
func (e *env) checkProbesAndInit(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	workers := 0
	for _, p := range pods.Items {
		c := p.Spec.Containers[0]
		if c.ReadinessProbe == nil || c.LivenessProbe == nil {
			t.Errorf("%s: container %s lacks Manta's probes (readiness %v, liveness %v)", p.Name, c.Name, c.ReadinessProbe != nil, c.LivenessProbe != nil)
		}
		if !testutil.PodReady(&p) {
			t.Errorf("%s is not Ready: %s", p.Name, e.podReport(ctx, ns, p.Name))
		}
		if p.Labels["ray.io/node-type"] != "worker" {
			continue
		}
		workers++
		var ran bool
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == clusterbuild.WaitGCSInitContainerName && s.State.Terminated != nil {
				ran = true
				if s.State.Terminated.ExitCode != 0 {
					t.Errorf("%s: %s exited %d", p.Name, s.Name, s.State.Terminated.ExitCode)
				}
			}
		}
		if !ran {
			t.Errorf("%s: no terminated %s init container: %s", p.Name, clusterbuild.WaitGCSInitContainerName, e.podReport(ctx, ns, p.Name))
		}
	}
	if workers != 1 {
		t.Errorf("%d worker pods, want 1", workers)
	}
}

// killRaylet: SIGKILL to the worker's raylet ends its `ray start --block`, so the kubelet restarts the container
// (or Manta replaces the pod, as KubeRay would), and the cluster is back to one ready worker.
func (e *env) killRaylet(t *testing.T, ctx context.Context, rc *rayv1.RayCluster) {
	t.Helper()
	ns := rc.Namespace
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "ray.io/node-type=worker"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("one worker pod: %v %s", err, e.nsReport(ctx, ns))
	}
	w := pods.Items[0]
	restarts := int32(0)
	for _, s := range w.Status.ContainerStatuses {
		restarts += s.RestartCount
	}
	kill := `import os, signal
n = 0
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        argv0 = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")[0]
    except OSError:
        continue
    if argv0.endswith(b"/raylet"):
        os.kill(int(p), signal.SIGKILL)
        n += 1
print("killed", n)`
	out, err := e.kubectlOut(ctx, "-n", ns, "exec", w.Name, "-c", w.Spec.Containers[0].Name, "--", "python", "-c", kill)
	if err != nil || !strings.Contains(out, "killed 1") {
		t.Fatalf("kill the raylet in %s: %v: %s", w.Name, err, out)
	}
	waitFor(t, ctx, 5*time.Minute, "the worker restarted or replaced after its raylet was killed", func() (bool, string) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, w.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && p.UID != w.UID) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		n := int32(0)
		for _, s := range p.Status.ContainerStatuses {
			n += s.RestartCount
		}
		return n > restarts, e.podReport(ctx, ns, w.Name)
	})
	e.waitClusterReady(t, ctx, rc, 1)
}

// rayStatusNodes counts the nodes `ray status` lists as active or idle: lines such as " 1 headgroup" (Ray 2.52
// groups them by node type) under "Active:" and "Idle:".
func rayStatusNodes(out string) int {
	n, counting := 0, false
	for _, line := range strings.Split(out, "\n") {
		switch strings.TrimSpace(line) {
		case "Active:", "Idle:":
			counting = true
			continue
		case "Pending:", "Recent failures:":
			counting = false
		}
		if f := strings.Fields(line); counting && len(f) == 2 {
			if c, err := strconv.Atoi(f[0]); err == nil {
				n += c
			}
		}
	}
	return n
}

func ptrTo[T any](v T) *T { return &v }

// nsReport lists a namespace's pods with their state, for failure messages.
func (e *env) nsReport(ctx context.Context, ns string) string {
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, p := range pods.Items {
		parts = append(parts, p.Name+": "+e.podReport(ctx, ns, p.Name))
	}
	return "pods: " + strings.Join(parts, " | ")
}

func TestRayStatusNodes(t *testing.T) {
	out := "Node status\n---\nActive:\n (no active nodes)\nIdle:\n 1 headgroup\n 1 workers\nPending:\n (no pending nodes)\nRecent failures:\n (no failures)\n"
	if got := rayStatusNodes(out); got != 2 {
		t.Errorf("rayStatusNodes = %d, want 2", got)
	}
	if got := rayStatusNodes("Active:\n 1 node_abc\nPending:\n 3 workers\n"); got != 1 {
		t.Errorf("rayStatusNodes counts pending nodes: %d, want 1", got)
	}
}
