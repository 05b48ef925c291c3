package real

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The sample's two Serve applications, written for this test (the sample fetches them from GitHub, which this
// machine cannot reach). They keep the sample's module names, import paths, deployment names and user_config keys,
// so the sample's serveConfigV2 runs them unchanged but for working_dir.
const (
	fruitApp = `from ray import serve
from starlette.requests import Request


class Stand:
    """Sells one fruit at the price its user_config sets."""

    def __init__(self):
        self.price = 0

    def reconfigure(self, config):
        self.price = config["price"]

    def quote(self, amount):
        return self.price * amount


@serve.deployment
class MangoStand(Stand):
    pass


@serve.deployment
class OrangeStand(Stand):
    pass


@serve.deployment
class PearStand(Stand):
    pass


@serve.deployment
class FruitMarket:
    """Answers a JSON ["FRUIT", amount] with the price of that order."""

    def __init__(self, mango, orange, pear):
        self.stands = {"MANGO": mango, "ORANGE": orange, "PEAR": pear}

    async def __call__(self, request: Request):
        fruit, amount = await request.json()
        stand = self.stands.get(fruit)
        if stand is None:
            return "no stand sells " + fruit
        return await stand.quote.remote(amount)


deployment_graph = FruitMarket.bind(MangoStand.bind(), OrangeStand.bind(), PearStand.bind())
`
	mathApp = `from ray import serve
from starlette.requests import Request


@serve.deployment
class Adder:
    def __init__(self):
        self.increment = 0

    def reconfigure(self, config):
        self.increment = config["increment"]

    def apply(self, x):
        return x + self.increment


@serve.deployment
class Multiplier:
    def __init__(self):
        self.factor = 1

    def reconfigure(self, config):
        self.factor = config["factor"]

    def apply(self, x):
        return x * self.factor


@serve.deployment
class Router:
    """Answers a JSON ["ADD" or "MUL", x] with the operation's result."""

    def __init__(self, adder, multiplier):
        self.ops = {"ADD": adder, "MUL": multiplier}

    async def __call__(self, request: Request):
        op, x = await request.json()
        result = await self.ops[op].apply.remote(x)
        return f"{result} pizzas please!"


serve_dag = Router.bind(Adder.bind(), Multiplier.bind())
`
	// postScript POSTs argv[2] as JSON to argv[1] and prints the response body.
	postScript = `import sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=10) as r:
    print(r.read().decode())`

	// loadClient POSTs argv[2] to argv[1] one request after the other, a fresh connection each, until /tmp/stop
	// exists, counting the answers that are 200 with the body argv[3] and every other outcome (status, body or error
	// printed). It prints its counts every 20 requests and once at the end.
	loadClient = `import json, os, sys, time, urllib.request
url, body, want = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
ok = failed = 0
while not os.path.exists("/tmp/stop"):
    try:
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            got = r.read().decode().strip()
            if r.status == 200 and got == want:
                ok += 1
            else:
                failed += 1
                print("failed: status", r.status, "body", repr(got), flush=True)
    except Exception as e:
        failed += 1
        print("failed:", repr(e), flush=True)
    if (ok + failed) % 20 == 0:
        print(f"progress ok={ok} failed={failed}", flush=True)
    time.sleep(0.1)
print(f"result ok={ok} failed={failed}", flush=True)`
)

const (
	// sampleWorkingDir is the sample's working_dir.
	sampleWorkingDir = "https://github.com/ray-project/test_dag/archive/78b4a5da38796123d9f9ffff59bab2792a043e95.zip"
	// appsDir is where the Ray containers mount the ConfigMap holding the applications' zip.
	appsDir = "/home/ray/serve-apps"
)

// testRayServiceSample: config/samples/rayservice.yaml (KubeRay's ray-service.sample.yaml) with
//   - fitRayResources, and the head's Ray CPU count kept at the sample's 2 (rayStartParams num-cpus: the sample's
//     CPU limit of 2 made Ray count 2, and its Router replica asks for a whole CPU beside the others' 0.7);
//   - working_dir pointing at a zip of this test's own fruit and calculator applications (there is no internet
//     here), from a ConfigMap mounted into every Ray container: Ray 2.52 fetches a remote working_dir over https,
//     s3, gs, azure or file only, not plain http, so a pod serving the zip would need TLS the image does not trust;
//
// serves HTTP through <name>-serve-svc (a ClusterIP Service, through kube-proxy, from a pod); a serveConfigV2
// change is applied to the same cluster and served; a rayClusterConfig change rolls to a new cluster while a client
// pod sends requests through the serve Service, and not one of them fails.
func testRayServiceSample(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "rayservice")
	// A failed step leaves no Ray pods behind to take the next step's CPUs.
	t.Cleanup(func() {
		if t.Failed() {
			e.deleteNamespace(t, ctx, ns)
		}
	})
	e.createAppsConfigMap(t, ctx, ns)
	e.startClientPod(t, ctx, ns)

	var rs rayv1.RayService
	readSample(t, "rayservice.yaml", &rs)
	rs.Namespace = ns
	if !strings.Contains(rs.Spec.ServeConfigV2, sampleWorkingDir) {
		t.Fatalf("the sample's serveConfigV2 no longer names %s: update the test's patch", sampleWorkingDir)
	}
	rs.Spec.ServeConfigV2 = strings.ReplaceAll(rs.Spec.ServeConfigV2, sampleWorkingDir, "file://"+appsDir+"/apps.zip")
	mountApps(&rs.Spec.RayClusterSpec)
	fitRayResources(&rs.Spec.RayClusterSpec)
	rs.Spec.RayClusterSpec.HeadGroupSpec.RayStartParams["num-cpus"] = "2"
	if err := e.cl.Create(ctx, &rs); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(&rs)
	serveURL := fmt.Sprintf("http://%s-serve-svc.%s.svc.cluster.local:8000", rs.Name, ns)

	start := time.Now()
	first := e.waitRayServiceServes(t, ctx, key, 15*time.Minute, "")
	t.Logf("RayService ready on RayCluster %s after %s", first, time.Since(start).Round(time.Second))
	e.checkServeEndpoints(t, ctx, ns, rs.Name+"-serve-svc", first)
	// Ready means the Service has endpoints; kube-proxy programs a new Service's ClusterIP a little later (until
	// then the node answers "network unreachable"), as anywhere.
	waitFor(t, ctx, 2*time.Minute, "a first answer through the serve Service", func() (bool, string) {
		got, err := e.tryPost(ctx, ns, serveURL+"/fruit/", `["MANGO", 2]`)
		return err == nil, fmt.Sprintf("%q %v", got, err)
	})
	for _, c := range []struct{ path, body, want string }{
		{"/fruit/", `["MANGO", 2]`, "6"},
		{"/fruit/", `["PEAR", 3]`, "3"},
		{"/calc/", `["MUL", 3]`, "15 pizzas please!"},
		{"/calc/", `["ADD", 1]`, "4 pizzas please!"},
	} {
		if got := e.post(t, ctx, ns, serveURL+c.path, c.body); got != c.want {
			t.Errorf("POST %s %s through the serve Service: %q, want %q", c.path, c.body, got, c.want)
		}
	}

	// In place: a new mango price reaches the running replicas through user_config; the cluster stays.
	start = time.Now()
	e.updateRayService(t, ctx, key, func(rs *rayv1.RayService) {
		rs.Spec.ServeConfigV2 = strings.Replace(rs.Spec.ServeConfigV2, "price: 3", "price: 4", 1)
	})
	waitFor(t, ctx, 5*time.Minute, "the new mango price served", func() (bool, string) {
		got, err := e.tryPost(ctx, ns, serveURL+"/fruit/", `["MANGO", 2]`)
		return err == nil && got == "8", fmt.Sprintf("%q %v", got, err)
	})
	var got rayv1.RayService
	if err := e.cl.Get(ctx, key, &got); err != nil {
		t.Fatal(err)
	}
	var clusters rayv1.RayClusterList
	if err := e.cl.List(ctx, &clusters, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if got.Status.ActiveServiceStatus.RayClusterName != first || got.Status.PendingServiceStatus.RayClusterName != "" || len(clusters.Items) != 1 {
		t.Fatalf("a serveConfigV2 change moved the service off RayCluster %s: active %q, pending %q, %d RayClusters", first,
			got.Status.ActiveServiceStatus.RayClusterName, got.Status.PendingServiceStatus.RayClusterName, len(clusters.Items))
	}
	t.Logf("serveConfigV2 change served in place after %s", time.Since(start).Round(time.Second))

	// A new cluster under load: the client counts every request while the service moves to the new cluster and
	// the old one is deleted.
	e.startLoadClient(t, ctx, ns, serveURL+"/fruit/", `["MANGO", 2]`, "8")
	waitLoad := func(what string, atLeast int) int {
		var ok int
		waitFor(t, ctx, 3*time.Minute, what, func() (bool, string) {
			out, err := e.logs(ctx, ns, "load", "load")
			if err != nil {
				return false, err.Error()
			}
			if failedLineRE.MatchString(out) {
				t.Fatalf("the load client saw a failed request:\n%s", out)
			}
			ok, _ = loadCounts(out, "progress")
			return ok >= atLeast, lastLine(out)
		})
		return ok
	}
	base := waitLoad("the load client's first 20 answers", 20)

	start = time.Now()
	e.updateRayService(t, ctx, key, func(rs *rayv1.RayService) {
		c := &rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "SERVICE_REVISION", Value: "2"})
	})
	second := e.waitRayServiceServes(t, ctx, key, 15*time.Minute, first)
	t.Logf("traffic moved from RayCluster %s to %s after %s", first, second, time.Since(start).Round(time.Second))
	e.checkServeEndpoints(t, ctx, ns, rs.Name+"-serve-svc", second)
	waitFor(t, ctx, 5*time.Minute, "old RayCluster "+first+" and its pods gone", func() (bool, string) {
		var c rayv1.RayCluster
		err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, &c)
		pods, perr := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: rayv1.LabelCluster + "=" + first})
		if perr != nil {
			return false, perr.Error()
		}
		return err != nil && len(pods.Items) == 0, fmt.Sprintf("cluster: %v; %d pods", err, len(pods.Items))
	})
	// Requests after the old cluster is gone too: the last progress line must come after this point.
	now, _ := loadCounts(e.mustLogs(t, ctx, ns, "load", "load"), "progress")
	waitLoad("20 more answers after the old cluster is gone", now+20)

	if _, err := e.kubectlOut(ctx, "-n", ns, "exec", "load", "--", "touch", "/tmp/stop"); err != nil {
		t.Fatal(err)
	}
	e.waitPodPhase(t, ctx, ns, "load", 2*time.Minute, corev1.PodSucceeded)
	out := e.mustLogs(t, ctx, ns, "load", "load")
	ok, failed := loadCounts(out, "result")
	t.Logf("load client through %s-serve-svc during the upgrade: %d requests answered, %d failed (%d before the change)", rs.Name, ok, failed, base)
	if failed != 0 || ok == 0 {
		t.Errorf("requests during the upgrade: %d ok, %d failed; the client's output:\n%s", ok, failed, out)
	}
	e.deleteNamespace(t, ctx, ns)
}

// createAppsConfigMap stores the applications as apps.zip, under one top-level directory: Ray unpacks a remote
// working_dir and takes that directory as the working directory.
func (e *env) createAppsConfigMap(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range []struct{ name, code string }{{"apps/fruit.py", fruitApp}, {"apps/conditional_dag.py", mathApp}} {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, f.code); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "serve-apps", Namespace: ns}, BinaryData: map[string][]byte{"apps.zip": buf.Bytes()}}
	if err := e.cl.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
}

// mountApps mounts the ConfigMap of createAppsConfigMap at appsDir in the Ray container of every group: Serve
// replicas run on the head and on the worker.
func mountApps(spec *rayv1.RayClusterSpec) {
	templates := []*corev1.PodTemplateSpec{&spec.HeadGroupSpec.Template}
	for i := range spec.WorkerGroupSpecs {
		templates = append(templates, &spec.WorkerGroupSpecs[i].Template)
	}
	for _, tpl := range templates {
		tpl.Spec.Volumes = append(tpl.Spec.Volumes, corev1.Volume{Name: "serve-apps", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "serve-apps"}},
		}})
		c := &tpl.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "serve-apps", MountPath: appsDir, ReadOnly: true})
	}
}

// startClientPod starts the pod "client" that single requests are sent from. It requests no CPU (nor does the load
// client): during an upgrade the two Ray clusters take the node's 2 CPUs.
func (e *env) startClientPod(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "client", Image: rayImage, Command: []string{"sleep", "infinity"},
		}}},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPodPhase(t, ctx, ns, "client", 3*time.Minute, corev1.PodRunning)
}

// startLoadClient starts the pod "load" running loadClient against url.
func (e *env) startLoadClient(t *testing.T, ctx context.Context, ns, url, body, want string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "load", Namespace: ns},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "load", Image: rayImage, Command: []string{"python3", "-c", loadClient, url, body, want},
		}}},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPodPhase(t, ctx, ns, "load", 3*time.Minute, corev1.PodRunning)
}

var (
	loadCountsRE = regexp.MustCompile(`(?m)^(progress|result) ok=(\d+) failed=(\d+)$`)
	failedLineRE = regexp.MustCompile(`(?m)^failed:`)
)

// loadCounts reads the last line of the given kind ("progress" or "result") that loadClient printed.
func loadCounts(out, kind string) (ok, failed int) {
	for _, m := range loadCountsRE.FindAllStringSubmatch(out, -1) {
		if m[1] == kind {
			ok, _ = strconv.Atoi(m[2])
			failed, _ = strconv.Atoi(m[3])
		}
	}
	return ok, failed
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

func (e *env) mustLogs(t *testing.T, ctx context.Context, ns, pod, container string) string {
	t.Helper()
	out, err := e.logs(ctx, ns, pod, container)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryPost POSTs body to url from the client pod (inside the cluster, so through kube-proxy) and returns the answer.
func (e *env) tryPost(ctx context.Context, ns, url, body string) (string, error) {
	out, err := e.kubectlOut(ctx, "-n", ns, "exec", "client", "--", "python3", "-c", postScript, url, body)
	if err != nil {
		return out, fmt.Errorf("%w: %s", err, out)
	}
	return strings.TrimSpace(out), nil
}

func (e *env) post(t *testing.T, ctx context.Context, ns, url, body string) string {
	t.Helper()
	out, err := e.tryPost(ctx, ns, url, body)
	if err != nil {
		t.Fatalf("POST %s %s: %v", url, body, err)
	}
	return out
}

// waitRayServiceServes waits until the service is Ready with no pending cluster on an active cluster other than
// notOn, and returns that cluster's name.
func (e *env) waitRayServiceServes(t *testing.T, ctx context.Context, key client.ObjectKey, timeout time.Duration, notOn string) string {
	t.Helper()
	var active string
	waitFor(t, ctx, timeout, "RayService "+key.Name+" serving on a new cluster", func() (bool, string) {
		var rs rayv1.RayService
		if err := e.cl.Get(ctx, key, &rs); err != nil {
			return false, err.Error()
		}
		st := rs.Status
		active = st.ActiveServiceStatus.RayClusterName
		ready := meta.IsStatusConditionTrue(st.Conditions, string(rayv1.RayServiceReady))
		var apps []string
		for _, s := range []rayv1.RayServiceStatus{st.ActiveServiceStatus, st.PendingServiceStatus} {
			for name, a := range s.Applications {
				apps = append(apps, s.RayClusterName+"/"+name+"="+a.Status)
			}
		}
		slices.Sort(apps)
		return ready && active != "" && active != notOn && st.PendingServiceStatus.RayClusterName == "",
			fmt.Sprintf("ready %v, active %q, pending %q, %d endpoints, apps %v; %s", ready, active,
				st.PendingServiceStatus.RayClusterName, st.NumServeEndpoints, apps, e.nsReport(ctx, key.Namespace))
	})
	return active
}

// checkServeEndpoints checks that the serve Service's ready endpoints are pods of the cluster, and that there is
// at least one.
func (e *env) checkServeEndpoints(t *testing.T, ctx context.Context, ns, svc, cluster string) {
	t.Helper()
	waitFor(t, ctx, 2*time.Minute, svc+" endpoints on "+cluster, func() (bool, string) {
		eps, err := e.cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
		if err != nil {
			return false, err.Error()
		}
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: rayv1.LabelCluster + "=" + cluster})
		if err != nil {
			return false, err.Error()
		}
		ips := map[string]bool{}
		for _, p := range pods.Items {
			ips[p.Status.PodIP] = true
		}
		var ready, foreign []string
		for _, s := range eps.Items {
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready == nil || !*ep.Conditions.Ready {
					continue
				}
				for _, a := range ep.Addresses {
					if ips[a] {
						ready = append(ready, a)
					} else {
						foreign = append(foreign, a)
					}
				}
			}
		}
		return len(ready) > 0 && len(foreign) == 0, fmt.Sprintf("ready endpoints of %s: %v, of others: %v", cluster, ready, foreign)
	})
}

// updateRayService applies change to the stored RayService, retrying on conflicts.
func (e *env) updateRayService(t *testing.T, ctx context.Context, key client.ObjectKey, change func(*rayv1.RayService)) {
	t.Helper()
	waitFor(t, ctx, time.Minute, "update RayService "+key.Name, func() (bool, string) {
		var rs rayv1.RayService
		if err := e.cl.Get(ctx, key, &rs); err != nil {
			return false, err.Error()
		}
		change(&rs)
		err := e.cl.Update(ctx, &rs)
		return err == nil, fmt.Sprint(err)
	})
}
