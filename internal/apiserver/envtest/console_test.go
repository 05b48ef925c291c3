package envtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/code"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/apiserver/apiservertest"
	"github.com/manta-dev/manta/internal/testutil"
)

// consoleBrowser is Debian's chromium, which `make tools` installs (hack/node-packages.sh).
const consoleBrowser = "/usr/bin/chromium"

// consoleFixture is what the console tests look at: a viewer who may use Ray objects, pods, logs and events in one
// namespace, and a second namespace with a cluster the viewer must never see.
type consoleFixture struct {
	url          string
	ns, hiddenNS string
	viewer       string // the viewer's token
	scraper      string // a token that may read /metrics
}

// consoleKinds is how many kinds a console stream lists and watches: RayCluster, RayJob, RayService, RayCronJob
// and ImagePullJob.
const consoleKinds = 5

// watches is how many list+watch loops the server holds for console streams, as its /metrics says.
func (f consoleFixture) watches(t *testing.T) int {
	t.Helper()
	r := call(t, f.url, "GET", "/metrics", nil, f.scraper)
	if r.code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", r.code, r.body)
	}
	for line := range strings.Lines(string(r.body)) {
		if v, ok := strings.CutPrefix(line, "manta_apiserver_console_watches "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("/metrics: %q: %v", line, err)
			}
			return int(n)
		}
	}
	t.Fatalf("/metrics has no manta_apiserver_console_watches:\n%s", r.body)
	return 0
}

func (e *testEnv) consoleFixture(t *testing.T) consoleFixture {
	ctx := context.Background()
	f := consoleFixture{ns: e.Namespace(t), hiddenNS: e.Namespace(t)}
	f.viewer = e.serviceAccountToken(t, f.ns, "viewer")
	f.scraper = e.metricsToken(t, f.ns)
	e.grant(t, f.ns, "viewer",
		rbacv1.PolicyRule{APIGroups: []string{"ray.io"}, Resources: []string{"rayclusters", "rayjobs", "rayservices", "raycronjobs"},
			Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{"manta.dev"}, Resources: []string{"imagepulljobs"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
	)
	s, err := apiserver.New(e.cfg, apiserver.Options{Auth: apiserver.AuthKubernetes, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	// Served as manta apiserver serves, with its http.Server and timeouts: how long a stream lives is theirs too.
	f.url = apiservertest.NewLoopbackServer(t, s)

	// Right after the control plane starts, Kubernetes answers a list 429 until its cache of the resource is filled.
	for _, l := range []client.ObjectList{&rayv1.RayClusterList{}, &rayv1.RayJobList{}} {
		if err := e.k.List(ctx, l, client.InNamespace(f.ns)); err != nil {
			t.Fatal(err)
		}
	}
	cluster := testutil.MakeRayCluster(f.ns, "alpha").Obj()
	hidden := testutil.MakeRayCluster(f.hiddenNS, "hidden-cluster").Obj()
	e.Create(t, cluster, hidden)
	cluster.Status.State = rayv1.Ready
	cluster.Status.Head.ServiceName = "alpha-head-svc"
	cluster.Status.ReadyWorkerReplicas, cluster.Status.DesiredWorkerReplicas = 0, 0
	if err := e.k.Status().Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	// The cluster's head pod, on a node, running and ready, as a kubelet would report it.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "alpha-head-x7k2p",
			Labels: map[string]string{rayv1.LabelCluster: "alpha", rayv1.LabelNodeType: "head", rayv1.LabelGroup: "headgroup"}},
		Spec: corev1.PodSpec{NodeName: "node-7", Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray:2.52.0"}}},
	}
	e.Create(t, pod)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "ray-head", Ready: true, RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	if err := e.k.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	e.Create(t, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: f.ns, Name: "alpha.created"},
		InvolvedObject: corev1.ObjectReference{APIVersion: "ray.io/v1", Kind: "RayCluster", Namespace: f.ns, Name: "alpha"},
		Reason:         "CreatedHeadPod", Message: "created head pod alpha-head-x7k2p", Type: corev1.EventTypeNormal,
		Count: 1, LastTimestamp: metav1.Now(), Source: corev1.EventSource{Component: "manta-operator"},
	})
	return f
}

// sseEvents reads a console stream as the given token until stop says enough, and returns the events read.
func sseEvents(t *testing.T, url, token string, stop func(event, data string) bool) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream %s: %d %s", url, res.StatusCode, res.Header.Get("Content-Type"))
	}
	var out []string
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<22)
	var event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			out = append(out, event+" "+data)
			if stop(event, data) {
				return out
			}
		}
	}
	t.Fatalf("stream %s ended before it said enough: %v (%v)", url, out, sc.Err())
	return nil
}

// testConsoleAPI checks the console's data endpoints with a token: what the viewer sees across namespaces, and
// that Kubernetes refuses what its RBAC does not allow.
func (e *testEnv) testConsoleAPI(t *testing.T, f consoleFixture) {
	r := call(t, f.url, "GET", "/console/api/namespaces", nil, f.viewer)
	var nss struct {
		Namespaces []struct {
			Name string `json:"name"`
		} `json:"namespaces"`
		Everywhere []string `json:"everywhere"`
	}
	mustOK(t, r, &nss)
	if len(nss.Namespaces) != 1 || nss.Namespaces[0].Name != f.ns || len(nss.Everywhere) != 0 {
		t.Errorf("viewer's namespaces: %+v, want only %s and no cluster-wide kinds", nss, f.ns)
	}

	// The all-namespaces stream: one list per kind in the viewer's namespace, the hidden namespace never named.
	snapshots, open := 0, 0
	events := sseEvents(t, f.url+"/console/api/stream", f.viewer, func(event, data string) bool {
		if event == "snapshot" {
			snapshots++
		}
		if snapshots == consoleKinds {
			open = f.watches(t)
			return true
		}
		return false
	})
	// sseEvents has closed its connection: the stream's watches end with it, not at their timeout.
	if open != consoleKinds {
		t.Errorf("an open list stream of one namespace holds %d watches, want one per kind (%d)", open, consoleKinds)
	}
	testutil.Eventually(t, 30*time.Second, "the stream's watches ended after its client went away", func() (bool, string) {
		return f.watches(t) == 0, fmt.Sprintf("%d watches open", f.watches(t))
	})
	all := strings.Join(events, "\n")
	if !strings.Contains(all, `"name":"alpha"`) || !strings.Contains(all, `"state":"ready"`) {
		t.Errorf("the stream lacks cluster alpha and its state: %s", all)
	}
	if strings.Contains(all, f.hiddenNS) || strings.Contains(all, "hidden-cluster") {
		t.Errorf("the stream names the namespace the viewer may not list: %s", all)
	}

	// Asking for the hidden namespace outright: Kubernetes refuses each list, and the stream says so, with no data.
	errs := 0
	events = sseEvents(t, f.url+"/console/api/stream?namespace="+f.hiddenNS, f.viewer, func(event, data string) bool {
		if event == "error" {
			errs++
		}
		return errs == consoleKinds
	})
	for _, ev := range events {
		if !strings.HasPrefix(ev, "targets ") && (!strings.HasPrefix(ev, "error ") || !strings.Contains(ev, `"forbidden":true`)) {
			t.Errorf("hidden namespace: want only forbidden errors, got %s", ev)
		}
	}

	// An object's stream: the object, its pod with phase, readiness, restarts and node, and its event.
	var sawPods, sawEvents bool
	sseEvents(t, f.url+"/console/api/namespaces/"+f.ns+"/rayclusters/alpha/stream", f.viewer, func(event, data string) bool {
		switch event {
		case "pods":
			var pods []struct {
				Name     string `json:"name"`
				Role     string `json:"role"`
				Phase    string `json:"phase"`
				Ready    string `json:"ready"`
				Restarts int32  `json:"restarts"`
				Node     string `json:"node"`
			}
			_ = json.Unmarshal([]byte(data), &pods)
			sawPods = len(pods) == 1 && pods[0].Name == "alpha-head-x7k2p" && pods[0].Phase == "Running" && pods[0].Ready == "1/1" &&
				pods[0].Restarts == 2 && pods[0].Node == "node-7" && pods[0].Role == "head"
		case "events":
			sawEvents = strings.Contains(data, "created head pod alpha-head-x7k2p")
		}
		return sawPods && sawEvents
	})

	// Logs go to Kubernetes with the caller's token: a pod in the hidden namespace is refused by Kubernetes' RBAC.
	r = call(t, f.url, "GET", "/console/api/namespaces/"+f.hiddenNS+"/pods/any/log", nil, f.viewer)
	if r.code != http.StatusForbidden || !strings.Contains(string(r.body), "system:serviceaccount:"+f.ns+":viewer") {
		t.Errorf("log in the hidden namespace: %d %s, want Kubernetes' 403 for the viewer", r.code, r.body)
	}

	// Signing in takes a token in the Authorization header: the cookie alone (or --anonymous-as) is no sign-in.
	r = callWith(t, f.url, "POST", "/console/api/session", nil, http.Header{"X-Manta-Console": {"1"}, "Cookie": {"manta-console-token" + "=" + f.viewer}})
	mustFail(t, r, http.StatusBadRequest, code.Code_INVALID_ARGUMENT, "Authorization")
	r = callWith(t, f.url, "POST", "/console/api/session", nil, http.Header{"X-Manta-Console": {"1"}, "Authorization": {"Bearer " + f.viewer}})
	if c := r.header.Get("Set-Cookie"); r.code != http.StatusOK || !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Strict") {
		t.Errorf("sign-in: %d, Set-Cookie %q; want 200 and an HttpOnly SameSite=Strict cookie", r.code, c)
	}

	// The form's validation names the form's fields; without the console's header the cookie-less write is refused.
	bad := map[string]any{"name": "Bad_Name", "entrypoint": "", "image": "rayproject/ray:2.52.0", "headCPU": "lots", "headMemory": "1Gi", "workers": 0, "shutdown": true,
		"env": []map[string]string{{"name": "GOOD", "value": "1"}, {"name": "1BAD", "value": "x"}, {"name": "GOOD", "value": "2"}}}
	r = callWith(t, f.url, "POST", "/console/api/namespaces/"+f.ns+"/rayjobs", bad, http.Header{"Authorization": {"Bearer " + f.viewer}, "X-Manta-Console": {"1"}})
	mustFail(t, r, http.StatusBadRequest, code.Code_INVALID_ARGUMENT, "name")
	for _, field := range []string{"entrypoint", "headCPU", "env[1].name", "env[2].name"} {
		if !strings.Contains(string(r.body), `"field":"`+field+`"`) {
			t.Errorf("form errors lack %s: %s", field, r.body)
		}
	}
	r = call(t, f.url, "POST", "/console/api/namespaces/"+f.hiddenNS+"/rayjobs", bad, f.viewer)
	mustFail(t, r, http.StatusBadRequest, code.Code_INVALID_ARGUMENT, "X-Manta-Console")
	good := map[string]any{"name": "api-job", "entrypoint": "python -c 'print(1)'", "image": "rayproject/ray:2.52.0", "headCPU": "1", "headMemory": "1Gi", "workers": 0, "shutdown": true}
	r = callWith(t, f.url, "POST", "/console/api/namespaces/"+f.hiddenNS+"/rayjobs", good, http.Header{"Authorization": {"Bearer " + f.viewer}, "X-Manta-Console": {"1"}})
	if r.code != http.StatusForbidden {
		t.Errorf("create in the hidden namespace: %d %s, want 403", r.code, r.body)
	}
}

// TestConsole runs the console against a kube-apiserver that keeps an audit log: its data endpoints with a token,
// then Chromium driving the pages (sign in with the viewer's token, see its namespace only, live; open a cluster and
// read its pods and events; create a RayJob from the form, a field error for bad input and the object for good
// input; suspend and delete it), and then the audit: every request Kubernetes saw from the viewer about the other
// namespace was refused. Screenshots go to test-artifacts/console/ at the repository root.
func TestConsole(t *testing.T) {
	cfg, k, audit := testutil.StartEnvtestAudited(t)
	e := newTestEnv(t, cfg, k)
	f := e.consoleFixture(t)
	t.Run("API", func(t *testing.T) { e.testConsoleAPI(t, f) })
	t.Run("Browser", func(t *testing.T) { e.testConsoleBrowser(t, f) })
	t.Run("Audit", func(t *testing.T) { e.testConsoleAudit(t, f, audit) })
}

// auditEvent is what the audit check reads of kube-apiserver's audit events.
type auditEvent struct {
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Namespace string `json:"namespace"`
		Resource  string `json:"resource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// testConsoleAudit reads what Kubernetes recorded of the viewer's requests, all of which the console made with the
// viewer's token: some reached its own namespace, and each that named the other namespace was refused (403).
func (e *testEnv) testConsoleAudit(t *testing.T, f consoleFixture, path string) {
	ctx := context.Background()
	viewer := "system:serviceaccount:" + f.ns + ":viewer"
	// A last request as the viewer: once its event is in the log, every earlier request of the viewer is too.
	vc := rest.AnonymousClientConfig(e.cfg)
	vc.BearerToken = f.viewer
	cs, err := kubernetes.NewForConfig(vc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(f.ns).Get(ctx, "console-audit-marker", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the marker request: %v, want NotFound", err)
	}
	var events []auditEvent
	testutil.Eventually(t, 2*time.Minute, "the marker request in the audit log", func() (bool, string) {
		raw, err := os.ReadFile(path)
		if err != nil {
			return false, err.Error()
		}
		events = events[:0]
		marker := false
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var ev auditEvent
			if json.Unmarshal([]byte(line), &ev) != nil || ev.User.Username != viewer {
				continue
			}
			events = append(events, ev)
			marker = marker || (ev.Stage == "ResponseComplete" && strings.Contains(ev.RequestURI, "console-audit-marker"))
		}
		return marker, fmt.Sprintf("%d events of the viewer so far", len(events))
	})
	own, refused := 0, 0
	for _, ev := range events {
		if ev.ResponseStatus == nil || ev.ObjectRef == nil {
			continue
		}
		switch {
		case ev.ObjectRef.Namespace == f.hiddenNS || strings.Contains(ev.RequestURI, "/namespaces/"+f.hiddenNS+"/"):
			if ev.ResponseStatus.Code != http.StatusForbidden {
				t.Errorf("Kubernetes answered the viewer %d for %s %s in the namespace it may not use", ev.ResponseStatus.Code, ev.Verb, ev.RequestURI)
			}
			refused++
		case ev.ObjectRef.Namespace == "" && ev.ResponseStatus.Code < 300:
			t.Errorf("the viewer read at the cluster scope: %s %s (%d)", ev.Verb, ev.RequestURI, ev.ResponseStatus.Code)
		case ev.ObjectRef.Namespace == f.ns && ev.ResponseStatus.Code < 300:
			own++
		}
	}
	// The API test asks for the other namespace's lists, log and create: those must be there, refused.
	if refused == 0 || own == 0 {
		t.Errorf("the audit holds %d refused requests about the other namespace and %d answered in the viewer's; want both", refused, own)
	}
	t.Logf("audit: %d requests of the viewer, %d answered in its namespace, %d about the other namespace, all refused", len(events), own, refused)
}

func (e *testEnv) testConsoleBrowser(t *testing.T, f consoleFixture) {
	if _, err := exec.LookPath(consoleBrowser); err != nil {
		t.Fatalf("the console test drives %s, which make tools installs (Debian's chromium): %v", consoleBrowser, err)
	}
	shots := filepath.Join(testutil.MustRepoRoot(t), "test-artifacts", "console")
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(consoleBrowser),
		chromedp.NoSandbox, // tests run as root in containers, where Chromium's sandbox cannot start
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1440, 900), // a laptop screen
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	bctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancel)
	// The browser starts with the first action and lives as long as that action's context: start it with bctx, so
	// the per-step timeouts below end steps, not the browser.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", consoleBrowser, err)
	}
	// Every step waits on what the page shows; the bound is for a busy 2-core machine.
	fail := func(what string, err error) {
		t.Helper()
		// Bounded: after a step timed out, the page may never answer.
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		body, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("%s: %v\npage text:\n%s", what, err, body)
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
		defer cancel()
		if err := chromedp.Do(ctx, actions...); err != nil {
			fail(what, err)
		}
	}
	get := func(what string, a chromedp.Action[string]) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
		defer cancel()
		v, err := chromedp.Run(ctx, a)
		if err != nil {
			fail(what, err)
		}
		return v
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg) // 100: PNG; less is JPEG
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644)
		})
	}
	css, id := func(s string) chromedp.CSS { return chromedp.CSS(s) }, func(s string) chromedp.ID { return chromedp.ID(s) }

	run("sign in",
		chromedp.Navigate(f.url+"/console/"),
		chromedp.WaitVisible(id("token")),
		shot("01-sign-in"),
		chromedp.SendKeys(id("token"), f.viewer),
		chromedp.Click(id("signin")),
		chromedp.WaitVisible(css(`table[data-kind="RayCluster"] tr[data-name="alpha"]`)),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="stream-status" and starts-with(text(), "Live")]`)),
	)
	run("screenshot the list", shot("02-all-namespaces"))
	body := get("read the page", chromedp.Text(css("body")))
	options := get("read the namespace switcher", chromedp.Evaluate[string](`[...document.querySelectorAll("#namespace option")].map(o => o.value).join(",")`))
	if strings.Contains(body, "hidden-cluster") || strings.Contains(body, f.hiddenNS) || strings.Contains(options, f.hiddenNS) {
		t.Errorf("the viewer sees the namespace it may not list: options %q, page:\n%s", options, body)
	}
	if options != ","+f.ns {
		t.Errorf("namespace switcher offers %q, want all namespaces and %s", options, f.ns)
	}
	if !strings.Contains(body, "Signed in as system:serviceaccount:"+f.ns+":viewer") {
		t.Errorf("the page does not say who is signed in:\n%s", body)
	}

	// Live: a cluster created now appears without reloading.
	e.Create(t, testutil.MakeRayCluster(f.ns, "beta").Obj())
	run("see a new cluster appear", chromedp.WaitVisible(css(`table[data-kind="RayCluster"] tr[data-name="beta"]`)))

	run("open a cluster",
		chromedp.Click(css(`tr[data-name="alpha"] a`)),
		chromedp.WaitVisible(css(`#pods tr[data-pod="alpha-head-x7k2p"]`)),
		chromedp.WaitVisible(chromedp.Search(`//div[@id="events"]//td[contains(., "created head pod alpha-head-x7k2p")]`)),
		chromedp.WaitVisible(id("ray-dashboard")),
		shot("03-cluster"),
	)
	body = get("read the pod row", chromedp.Text(css(`#pods tr[data-pod="alpha-head-x7k2p"]`)))
	for _, want := range []string{"head", "Running", "1/1", "2", "node-7"} {
		if !strings.Contains(body, want) {
			t.Errorf("the pod row %q lacks %q", body, want)
		}
	}
	href := get("read the Ray dashboard link", chromedp.Evaluate[string](`document.getElementById("ray-dashboard").getAttribute("href")`))
	if want := "/api/v1/namespaces/" + f.ns + "/services/alpha-head-svc:dashboard/proxy/"; !strings.HasSuffix(href, want) {
		t.Errorf("Ray dashboard link %q, want the services proxy path %s", href, want)
	}

	run("create a RayJob with bad input",
		chromedp.Navigate(f.url+"/console/#/new-rayjob?ns="+f.ns),
		chromedp.WaitVisible(id("job-name")),
		chromedp.SendKeys(id("job-name"), "Bad_Name"),
		chromedp.SendKeys(id("job-entrypoint"), "python -c 'print(42)'"),
		chromedp.SetValue(id("job-headCPU"), "lots"),
		chromedp.Click(id("job-env-add")),
		chromedp.SendKeys(id("job-env-0-name"), "1BAD"),
		chromedp.SendKeys(id("job-env-0-value"), "600"),
		chromedp.Click(id("create")),
		chromedp.WaitVisible(css(`#job-name[aria-invalid="true"]`)),
		chromedp.WaitVisible(css(`#job-env-0-name[aria-invalid="true"]`)),
		shot("04-form-errors"),
	)
	nameErr := get("read the name's error", chromedp.Text(id("job-name-error")))
	cpuErr := get("read the head CPU's error", chromedp.Text(id("job-headCPU-error")))
	envErr := get("read the variable's error", chromedp.Text(id("job-env-0-error")))
	if !strings.Contains(nameErr, "RFC 1123") || !strings.Contains(cpuErr, "quantity") || !strings.HasPrefix(envErr, "Name: invalid environment variable name") {
		t.Errorf("field errors: name %q, headCPU %q, env[0].name %q; want each beside its field", nameErr, cpuErr, envErr)
	}
	// The second variable by keyboard alone: Enter on "Add variable" gives a row with its name focused, Tab its value.
	run("create a RayJob",
		chromedp.SetValue(id("job-name"), "console-job"),
		chromedp.SetValue(id("job-headCPU"), "1"),
		chromedp.SetValue(id("job-workers"), "1"),
		chromedp.SetValue(id("job-runtimeEnv"), "env_vars:\n  GREETING: hello"),
		chromedp.SetValue(id("job-env-0-name"), "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT"),
		chromedp.Focus(id("job-env-add")),
		chromedp.KeyEvent("\r"),
		chromedp.KeyEvent("MANTA_NOTE"),
		chromedp.KeyEvent("\t"),
		chromedp.KeyEvent("from the form"),
		chromedp.Click(id("job-noCPULimit")),
		shot("05-form-env"),
		chromedp.Click(id("create")),
		chromedp.WaitVisible(id("state")),
		chromedp.WaitVisible(id("suspend")),
		shot("06-rayjob"),
	)
	var job rayv1.RayJob
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "console-job"}, &job); err != nil {
		t.Fatalf("the form's RayJob: %v", err)
	}
	if job.Spec.Entrypoint != "python -c 'print(42)'" || job.Spec.RuntimeEnvYAML != "env_vars:\n  GREETING: hello" || !job.Spec.ShutdownAfterJobFinishes ||
		len(job.Spec.RayClusterSpec.WorkerGroupSpecs) != 1 || *job.Spec.RayClusterSpec.WorkerGroupSpecs[0].Replicas != 1 {
		t.Errorf("the form's RayJob: %+v", job.Spec)
	}
	wantEnv := []corev1.EnvVar{{Name: "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT", Value: "600"}, {Name: "MANTA_NOTE", Value: "from the form"}}
	if len(job.Spec.RayClusterSpec.WorkerGroupSpecs) == 1 {
		for what, c := range map[string]corev1.Container{
			"head":   job.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0],
			"worker": job.Spec.RayClusterSpec.WorkerGroupSpecs[0].Template.Spec.Containers[0],
		} {
			if diff := cmp.Diff(wantEnv, c.Env); diff != "" {
				t.Errorf("the %s container's env (-want +got):\n%s", what, diff)
			}
			if _, limited := c.Resources.Limits[corev1.ResourceCPU]; limited || c.Resources.Requests.Cpu().String() != "1" {
				t.Errorf("the %s container's resources with No CPU limit checked: %+v, want a CPU request and no CPU limit", what, c.Resources)
			}
		}
	}

	run("suspend it",
		chromedp.Click(id("suspend")),
		chromedp.WaitVisible(id("confirm-ok")),
		shot("07-confirm-suspend"),
		chromedp.Click(id("confirm-ok")),
		chromedp.WaitVisible(id("resume")),
	)
	if err := e.k.Get(context.Background(), client.ObjectKeyFromObject(&job), &job); err != nil || !job.Spec.Suspend {
		t.Errorf("after Suspend: suspend %v, err %v", job.Spec.Suspend, err)
	}
	run("delete it",
		chromedp.Click(id("delete")),
		chromedp.WaitVisible(id("confirm-ok")),
		chromedp.Click(id("confirm-ok")),
		chromedp.WaitVisible(css(`table[data-kind="RayCluster"] tr[data-name="alpha"]`)),
	)
	err := e.k.Get(context.Background(), client.ObjectKeyFromObject(&job), &job)
	if !apierrors.IsNotFound(err) {
		t.Errorf("after Delete the RayJob is still there: %v", err)
	}

	// Leaving the console for another page ends its stream and the watches behind it at once. Chromium keeps a left
	// page in its back/forward cache, and before the page closed its streams on pagehide it kept the stream open
	// there too, for about a minute; the bound is well under that.
	run("mark the page", chromedp.Evaluate[chromedp.Void](`window.mantaMark = "still this page"`))
	// The RayJob's page, left for the list, lets its own watches go as the list's start.
	testutil.Eventually(t, time.Minute, "the list page's watches, one per kind", func() (bool, string) {
		return f.watches(t) == consoleKinds, fmt.Sprintf("%d watches open", f.watches(t))
	})
	run("leave the console", chromedp.Navigate("about:blank"))
	testutil.Eventually(t, 20*time.Second, "the console's watches ended after its page was left", func() (bool, string) {
		return f.watches(t) == 0, fmt.Sprintf("%d watches open", f.watches(t))
	})
	// Back again: the browser restores the page from that cache (the mark is still there), and the page opens its
	// stream again.
	// history.back(), not NavigateBack: a page restored from that cache fires no load event to wait for. Called from
	// a timer, after the evaluation has answered: called in it, the page can be gone before the answer, and the
	// DevTools call fails with "Inspected target navigated or closed" (CI 49).
	run("come back", chromedp.Evaluate[chromedp.Void](`setTimeout(() => history.back(), 0)`))
	testutil.Eventually(t, time.Minute, "the restored page's watches", func() (bool, string) {
		return f.watches(t) == consoleKinds, fmt.Sprintf("%d watches open", f.watches(t))
	})
	if mark := get("read the mark", chromedp.Evaluate[string](`String(window.mantaMark)`)); mark != "still this page" {
		t.Errorf("back to the console: mark %q; the page was loaded again, not restored, so its pagehide and pageshow were not tried", mark)
	}
	// Read with Evaluate: chromedp's DOM queries keep the tree they saw before the page was restored.
	testutil.Eventually(t, time.Minute, "the restored page live", func() (bool, string) {
		status := get("read the stream's status", chromedp.Evaluate[string](`document.getElementById("stream-status").textContent`))
		return strings.HasPrefix(status, "Live"), status
	})
}
