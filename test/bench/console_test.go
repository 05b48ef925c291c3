package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// consoleBrowser is Debian's chromium, which `make tools` installs (as for TestConsole).
const consoleBrowser = "/usr/bin/chromium"

// consoleResources are the resources the console's list page lists and watches (internal/apiserver consoleKinds).
var consoleResources = []string{"rayclusters", "rayjobs", "rayservices", "raycronjobs", "imagepulljobs"}

// consoleResult is what BenchmarkScaleConsole measured.
type consoleResult struct {
	Clusters int `json:"clusters"`
	// Loads are the timed loads of the all-namespaces list, one page, each a fresh document.
	Loads []consoleLoad `json:"loads"`
	// ListP50MS and ListMaxMS are over Loads' listedMS: navigation start to all the clusters in the list.
	ListP50MS float64 `json:"listP50Milliseconds"`
	ListMaxMS float64 `json:"listMaxMilliseconds"`
	// SecondPage is the load of a second page (another tab) while the first stays open.
	SecondPage consoleLoad `json:"secondPageLoad"`
	// PerPageOpen is what the API server served per load (all clients, over the timed loads), by "VERB resource".
	PerPageOpen map[string]float64 `json:"serverRequestsPerPageOpen"`
	// Windows: one page open, then two, each for the window.
	Windows []consoleWindow `json:"windows"`
	// StreamMS is the stream alone, read by a Go client with the token: from the request to the whole RayCluster
	// snapshot read, one per load, after the pages left (the server's share of a load, without the browser's).
	StreamMS []float64 `json:"streamOnlyMilliseconds"`
	// WatchesAfterClose are the watches of the console's kinds held beyond the baseline once both pages navigated
	// away.
	WatchesAfterClose map[string]float64 `json:"watchesAfterClose"`
}

// consoleLoad is one page load, timed by the page's own clock: milliseconds from the navigation's start.
type consoleLoad struct {
	SessionMS    float64 `json:"sessionMilliseconds"`    // /console/api/session answered
	NamespacesMS float64 `json:"namespacesMilliseconds"` // /console/api/namespaces answered
	StreamMS     float64 `json:"streamMilliseconds"`     // the page opened its EventSource
	// SnapshotMS is when the largest snapshot (the RayClusters') arrived, SnapshotBytes its size.
	SnapshotMS    float64 `json:"rayClusterSnapshotMilliseconds"`
	SnapshotBytes int     `json:"rayClusterSnapshotBytes"`
	// ListedMS is when the list's heading first said every cluster (the DOM), PaintedMS the next frame after it.
	ListedMS  float64 `json:"listedMilliseconds"`
	PaintedMS float64 `json:"paintedMilliseconds"`
	Rows      int     `json:"rows"`
}

// consoleWindow is a window with pages open and nothing else changing.
type consoleWindow struct {
	Pages   int     `json:"pages"`
	Seconds float64 `json:"seconds"`
	// WatchesHeld are the WATCH requests open at the window's end beyond the baseline (no page open), by
	// "resource (scope)", from kube-apiserver's apiserver_longrunning_requests.
	WatchesHeld map[string]float64 `json:"watchesHeld"`
	// Requests is what the API server served during the window, all clients, by "VERB resource" (a WATCH is
	// counted when it ends).
	Requests map[string]float64 `json:"serverRequests"`
	// ConsoleLists are the LISTs of the console's kinds among Requests.
	ConsoleLists float64 `json:"consoleKindLists"`
	// CPU in percent of one core over the window: manta apiserver's process and kube-apiserver's.
	APIServerCPUPercent     float64 `json:"mantaAPIServerCPUPercent"`
	KubeAPIServerCPUPercent float64 `json:"kubeAPIServerCPUPercent"`
}

// BenchmarkScaleConsole measures issue 44's scale criterion for the web console: one dev cluster (16 kwok nodes),
// Manta's operator and MANTA_BENCH_CONSOLE_CLUSTERS RayClusters (1 head + 1 worker, 10 per namespace), all ready
// and the operator quiescent; `manta apiserver` as its own process; a ServiceAccount with list and watch on the
// console's kinds everywhere (docs/user-guide.md's table), signed in with a TokenRequest token. Chromium opens the
// all-namespaces list MANTA_BENCH_CONSOLE_LOADS times, each a fresh document, timed by the page's clock from the
// navigation to the heading "Ray clusters (N)"; then, with one page open and then two, the API server's requests
// and open watches over MANTA_BENCH_CONSOLE_WINDOW; then both pages leave and their watches must end. Settings:
//
//	MANTA_BENCH_CONSOLE_CLUSTERS  RayClusters (default 1000)
//	MANTA_BENCH_CONSOLE_LOADS     timed loads (default 5)
//	MANTA_BENCH_CONSOLE_WINDOW    each window (default 60s)
//	MANTA_BENCH_CONSOLE_JSON      where to write the results (default <tmp>/manta-bench/console.json)
//
// Its name starts with S so that `make bench-operator` ('Benchmark[^S]') leaves it out.
func BenchmarkScaleConsole(b *testing.B) {
	clusters := envInts(b, "MANTA_BENCH_CONSOLE_CLUSTERS", []int{1000})[0]
	loads := envInts(b, "MANTA_BENCH_CONSOLE_LOADS", []int{5})[0]
	window, err := time.ParseDuration(envOr("MANTA_BENCH_CONSOLE_WINDOW", "60s"))
	if err != nil || window <= 0 || loads < 1 {
		b.Fatalf("MANTA_BENCH_CONSOLE_WINDOW: want a duration such as 60s; MANTA_BENCH_CONSOLE_LOADS: at least 1")
	}
	if _, err := exec.LookPath(consoleBrowser); err != nil {
		b.Fatalf("the console benchmark drives %s, which make tools installs: %v", consoleBrowser, err)
	}
	bin := testutil.BuildManta(b)
	var results []consoleResult
	for i := 0; i < b.N; i++ {
		results = append(results, runConsoleTrial(b, bin, clusters, loads, window))
	}
	table := consoleTable(results)
	out := envOr("MANTA_BENCH_CONSOLE_JSON", filepath.Join(os.TempDir(), "manta-bench", "console.json"))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		b.Fatal(err)
	}
	data, _ := json.MarshalIndent(map[string]any{"trials": results, "table": table}, "", "  ")
	if err := os.WriteFile(out, data, 0o644); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "\n%s\nresults written to %s\n", table, out)
}

func runConsoleTrial(b *testing.B, bin string, clusters, loads int, window time.Duration) consoleResult {
	b.Helper()
	const perNamespace = 10
	e := startEnvFor(b, 60*time.Minute, devcluster.Options{Nodes: 16, NodeCPU: "1000", NodeMemory: "4000Gi", NodeMaxPods: 1000})
	defer e.stop()
	var nsNames []string
	for i := range (clusters + perNamespace - 1) / perNamespace {
		nsNames = append(nsNames, fmt.Sprintf("bench-console-%d", i))
	}
	e.createNamespaces(b, nsNames...)
	op := startOperatorProcess(b, e, contenders["manta"], bin)
	defer op.stop()
	const run = "console"
	var objs []client.Object
	for i := range clusters {
		objs = append(objs, rayCluster(nsNames[i/perNamespace], fmt.Sprintf("rc-%d", i), run, 1))
	}
	e.createAll(b, 4, objs)
	e.waitClustersReady(b, run, clusters, 30*time.Minute)
	snap := op.scrape(b)
	if _, reached := waitQuiescent(b, e, op, counted{readAt: time.Now(), serverWrites: serverWrites(e.serverRequests(b)),
		operatorWrites: operatorWrites(snap.requests)}); !reached {
		b.Fatalf("not quiescent once the clusters were ready")
	}
	token := consoleViewer(b, e)
	api := startAPIServerProcess(b, e, bin)
	defer api.stop()
	kubePID := e.cluster.PIDs()["kube-apiserver"]

	r := consoleResult{Clusters: clusters, PerPageOpen: map[string]float64{}}
	base := readConsoleMetrics(b, e)
	br := startConsoleBrowser(b)
	defer br.close()
	first := br.tab(b, clusters)
	first.signIn(b, api.url, token)
	before := readConsoleMetrics(b, e)
	for range loads {
		l := first.load(b, api.url)
		progressf(b, "list of %d clusters shown %.0f ms after navigation (session %.0f, namespaces %.0f, stream %.0f, snapshot %.0f ms, %d bytes)",
			clusters, l.ListedMS, l.SessionMS, l.NamespacesMS, l.StreamMS, l.SnapshotMS, l.SnapshotBytes)
		r.Loads = append(r.Loads, l)
	}
	after := readConsoleMetrics(b, e)
	for k, v := range after.minus(before).requests {
		r.PerPageOpen[k] = math.Round(v/float64(loads)*100) / 100
	}
	var listed []float64
	for _, l := range r.Loads {
		listed = append(listed, l.ListedMS)
	}
	sort.Float64s(listed)
	r.ListP50MS, r.ListMaxMS = median(listed), listed[len(listed)-1]

	r.Windows = append(r.Windows, measureConsoleWindow(b, e, 1, window, base, api.pid(), kubePID))
	second := br.tab(b, clusters)
	r.SecondPage = second.load(b, api.url)
	progressf(b, "second page: list shown %.0f ms after navigation", r.SecondPage.ListedMS)
	r.Windows = append(r.Windows, measureConsoleWindow(b, e, 2, window, base, api.pid(), kubePID))

	first.leave(b)
	second.leave(b)
	// Not waitFor: a watch left open is a finding to report with the rest, not a reason to lose the figures.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		r.WatchesAfterClose = consoleWatches(readConsoleMetrics(b, e).watchesBeyond(base))
		if len(r.WatchesAfterClose) == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Errorf("a minute after both pages left, the console's watches beyond the baseline: %v", r.WatchesAfterClose)
			break
		}
	}

	for range loads {
		r.StreamMS = append(r.StreamMS, streamSnapshotMS(b, api.url, token))
	}
	progressf(b, "the stream alone, to the RayCluster snapshot: %v ms", r.StreamMS)

	for _, l := range append(r.Loads, r.SecondPage) {
		if l.Rows != clusters {
			b.Errorf("a load showed %d rows, want %d", l.Rows, clusters)
		}
	}
	for _, w := range r.Windows {
		if w.ConsoleLists > 0 {
			b.Errorf("%d pages open: the API server served %.0f lists of the console's kinds in the window, want none", w.Pages, w.ConsoleLists)
		}
		for _, res := range consoleResources {
			if got := w.WatchesHeld[res+" (cluster)"]; got != float64(w.Pages) {
				b.Errorf("%d pages open: %.0f watches of %s held, want one per page", w.Pages, got, res)
			}
		}
	}
	return r
}

// measureConsoleWindow reads the API server's counters, waits the window with nothing changing, and reads again.
func measureConsoleWindow(b *testing.B, e *trialEnv, pages int, window time.Duration, base consoleMetrics, apiPID, kubePID int) consoleWindow {
	b.Helper()
	m0, t0 := readConsoleMetrics(b, e), time.Now()
	cpu0, kcpu0 := procCPUSeconds(apiPID), procCPUSeconds(kubePID)
	e.sleep(window)
	if e.ctx.Err() != nil {
		b.Fatalf("window: %v", e.ctx.Err())
	}
	m1 := readConsoleMetrics(b, e)
	cpu1, kcpu1 := procCPUSeconds(apiPID), procCPUSeconds(kubePID)
	secs := time.Since(t0).Seconds()
	w := consoleWindow{Pages: pages, Seconds: math.Round(secs), WatchesHeld: m1.watchesBeyond(base), Requests: m1.minus(m0).requests,
		APIServerCPUPercent:     math.Round((cpu1-cpu0)/secs*100*100) / 100,
		KubeAPIServerCPUPercent: math.Round((kcpu1-kcpu0)/secs*100*100) / 100}
	for _, res := range consoleResources {
		w.ConsoleLists += w.Requests["LIST "+res]
	}
	progressf(b, "%d page(s) open for %.0fs: watches held %v; served %v; %.0f lists of the console's kinds; manta apiserver CPU %.2f%%, kube-apiserver %.2f%% of a core",
		pages, secs, w.WatchesHeld, w.Requests, w.ConsoleLists, w.APIServerCPUPercent, w.KubeAPIServerCPUPercent)
	return w
}

// consoleMetrics is what the benchmark reads from kube-apiserver's /metrics.
type consoleMetrics struct {
	requests map[string]float64 // apiserver_request_total by "VERB resource[/subresource]", watches included, non-resource requests left out
	watches  map[string]float64 // apiserver_longrunning_requests{verb="WATCH"} by "resource (scope)"
}

func readConsoleMetrics(b *testing.B, e *trialEnv) consoleMetrics {
	b.Helper()
	body, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(e.ctx)
	if err != nil {
		b.Fatalf("API server metrics: %v", err)
	}
	return parseConsoleMetrics(string(body))
}

func parseConsoleMetrics(text string) consoleMetrics {
	m := consoleMetrics{requests: map[string]float64{}, watches: map[string]float64{}}
	for _, line := range strings.Split(text, "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || (name != "apiserver_request_total" && name != "apiserver_longrunning_requests") {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		res := labelValue(labels, "resource")
		if res == "" {
			// Non-resource requests: the harness's own reads of /metrics, health checks.
			continue
		}
		if sub := labelValue(labels, "subresource"); sub != "" {
			res += "/" + sub
		}
		verb := labelValue(labels, "verb")
		if name == "apiserver_request_total" {
			m.requests[verb+" "+res] += v
		} else if verb == "WATCH" {
			m.watches[res+" ("+labelValue(labels, "scope")+")"] += v
		}
	}
	return m
}

// minus is the requests served since before (the non-zero differences); watches are left as they are now.
func (m consoleMetrics) minus(before consoleMetrics) consoleMetrics {
	out := consoleMetrics{requests: map[string]float64{}, watches: m.watches}
	for k, v := range m.requests {
		if d := v - before.requests[k]; d != 0 {
			out.requests[k] = d
		}
	}
	return out
}

// watchesBeyond are the open watches that base did not have, by resource and scope.
func (m consoleMetrics) watchesBeyond(base consoleMetrics) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m.watches {
		if d := v - base.watches[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// streamSnapshotMS opens the all-namespaces stream with the token and times it until the RayCluster snapshot has
// been read whole.
func streamSnapshotMS(b *testing.B, url, token string) float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/console/api/stream", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatalf("the console's stream: %v", err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 64<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		} else if v, ok := strings.CutPrefix(line, "data: "); ok && event == "snapshot" && strings.Contains(v, `"kind":"RayCluster","namespace":""`) {
			return math.Round(float64(time.Since(start).Microseconds())/100) / 10
		}
	}
	b.Fatalf("the console's stream (%s) ended without a RayCluster snapshot: %v", res.Status, sc.Err())
	return 0
}

// consoleWatches keeps the watches of the console's kinds.
func consoleWatches(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if res, _, _ := strings.Cut(k, " "); slices.Contains(consoleResources, res) {
			out[k] = v
		}
	}
	return out
}

// consoleViewer makes a ServiceAccount that may list and watch the console's kinds (and pods and events) in every
// namespace, as docs/user-guide.md's table says, and returns a token for it.
func consoleViewer(b *testing.B, e *trialEnv) string {
	b.Helper()
	const ns, name = "bench-console-viewer", "console-viewer"
	e.createNamespaces(b, ns)
	if _, err := e.cs.CoreV1().ServiceAccounts(ns).Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"ray.io"}, Resources: []string{"rayclusters", "rayjobs", "rayservices", "raycronjobs"}, Verbs: read},
		{APIGroups: []string{"manta.dev"}, Resources: []string{"imagepulljobs"}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
	}}
	if _, err := e.cs.RbacV1().ClusterRoles().Create(e.ctx, role, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}}
	if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(e.ctx, binding, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	tr, err := e.cs.CoreV1().ServiceAccounts(ns).CreateToken(e.ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](2 * 3600)}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return tr.Status.Token
}

// apiProcess is `manta apiserver` running as its own process.
type apiProcess struct {
	cmd    *exec.Cmd
	url    string
	log    *os.File
	exited chan struct{}
}

func (a *apiProcess) pid() int { return a.cmd.Process.Pid }

// startAPIServerProcess runs `manta apiserver` on a loopback port with Kubernetes authentication (bearer tokens,
// as the console signs in with), with the admin kubeconfig as its own identity.
func startAPIServerProcess(b *testing.B, e *trialEnv, bin string) *apiProcess {
	b.Helper()
	ports, err := devcluster.FreePorts(1)
	if err != nil {
		b.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	logPath := filepath.Join(e.cluster.Dir(), "manta-apiserver.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "apiserver", "--listen", addr, "--auth", "kubernetes")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.cluster.Kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	a := &apiProcess{cmd: cmd, url: "http://" + addr, log: logFile, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(a.exited) }()
	waitFor(b, e.ctx, "manta apiserver healthy (log "+logPath+")", time.Minute, 200*time.Millisecond, func(context.Context) (bool, string, error) {
		select {
		case <-a.exited:
			return false, "", fmt.Errorf("manta apiserver exited; log %s", logPath)
		default:
		}
		resp, err := http.Get(a.url + "/healthz")
		if err != nil {
			return false, err.Error(), nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	return a
}

func (a *apiProcess) stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
	_ = a.log.Close()
}

// browser is one headless Chromium; each tab is a page of the console.
type browser struct {
	ctx    context.Context
	cancel []context.CancelFunc
}

func startConsoleBrowser(b *testing.B) *browser {
	b.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(consoleBrowser),
		chromedp.NoSandbox, // benchmarks run as root, where Chromium's sandbox cannot start
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1440, 900),
		chromedp.UserDataDir(b.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	// The browser lives as long as the context of its first action: start it with no timeout.
	if err := chromedp.Do(bctx); err != nil {
		cancelBrowser()
		cancelAlloc()
		b.Fatalf("starting %s: %v", consoleBrowser, err)
	}
	return &browser{ctx: bctx, cancel: []context.CancelFunc{cancelBrowser, cancelAlloc}}
}

func (br *browser) close() {
	for _, c := range br.cancel {
		c()
	}
}

// consoleTab is one tab, instrumented on every new document (see timingScript).
type consoleTab struct {
	ctx context.Context
}

// timingScript runs first in every document of a tab: it records, by the page's clock (milliseconds from the
// navigation's start), when the page opened its EventSource and when each snapshot arrived (and its size), and
// when the RayCluster table's heading first said n clusters, and the next frame after that.
const timingScript = `(() => {
  const m = { snapshots: [] };
  window.__mantaBench = m;
  const ES = window.EventSource;
  window.EventSource = class extends ES {
    constructor(url, init) {
      super(url, init);
      if (m.stream === undefined) m.stream = performance.now();
      this.addEventListener("snapshot", (e) => m.snapshots.push([performance.now(), e.data.length]));
    }
  };
  const want = "Ray clusters (%d)";
  new MutationObserver((_, obs) => {
    const c = document.querySelector('table[data-kind="RayCluster"] caption');
    if (!c || c.textContent !== want) return;
    m.listed = performance.now();
    m.rows = document.querySelectorAll('table[data-kind="RayCluster"] tbody tr[data-name]').length;
    obs.disconnect();
    requestAnimationFrame(() => requestAnimationFrame(() => { m.painted = performance.now(); }));
  }).observe(document, { subtree: true, childList: true, characterData: true });
})();`

// tab opens a tab in the browser that times the list of n clusters.
func (br *browser) tab(b *testing.B, n int) *consoleTab {
	b.Helper()
	ctx, cancel := chromedp.NewContext(br.ctx)
	br.cancel = append([]context.CancelFunc{cancel}, br.cancel...)
	t := &consoleTab{ctx: ctx}
	// A tab lives as long as the context of its first action: open it with no timeout.
	if err := chromedp.Do(ctx); err != nil {
		b.Fatalf("open a tab: %v", err)
	}
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: fmt.Sprintf(timingScript, n)}); err != nil {
		b.Fatalf("instrument the tab: %v", err)
	}
	return t
}

func (t *consoleTab) do(b *testing.B, what string, actions ...chromedp.Action[chromedp.Void]) {
	b.Helper()
	ctx, cancel := context.WithTimeout(t.ctx, 3*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		body, _ := chromedp.Run(t.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ""`))
		b.Fatalf("%s: %v\npage text:\n%s", what, err, body)
	}
}

// signIn signs the browser in with the token, as a person would, and waits for the list.
func (t *consoleTab) signIn(b *testing.B, url, token string) {
	b.Helper()
	t.do(b, "sign in",
		chromedp.Navigate(url+"/console/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SetValue(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("signin")),
	)
	t.waitPainted(b)
}

// waitPainted waits until the page has shown every cluster. Right after a navigation Chromium may answer for the
// previous document's execution context ("Cannot find context"): the poll is asked again. The figures come from
// the page's clock, so the retries do not change them.
func (t *consoleTab) waitPainted(b *testing.B) {
	b.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithDeadline(t.ctx, deadline)
		// An interval, not every frame: the poll itself runs in the page it times.
		err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void]("window.__mantaBench && window.__mantaBench.painted !== undefined",
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(time.Until(deadline))))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "context") {
			body, _ := chromedp.Run(t.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ""`))
			b.Fatalf("wait for the list: %v\npage text:\n%s", err, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// load opens the all-namespaces list in a fresh document (the sign-in cookie kept) and returns its timings.
func (t *consoleTab) load(b *testing.B, url string) consoleLoad {
	b.Helper()
	t.do(b, "load the list", chromedp.Navigate("about:blank"), chromedp.Navigate(url+"/console/#/"))
	t.waitPainted(b)
	var m struct {
		Session, Namespaces, Stream, Listed, Painted float64
		Rows                                         int
		Snapshots                                    [][2]float64
	}
	raw, err := chromedp.Run(t.ctx, chromedp.Evaluate[[]byte](`(() => {
  const m = window.__mantaBench;
  const at = (p) => { const e = performance.getEntriesByType("resource").find((e) => new URL(e.name).pathname === p); return e ? e.responseEnd : -1; };
  return { session: at("/console/api/session"), namespaces: at("/console/api/namespaces"), stream: m.stream, listed: m.listed,
    painted: m.painted, rows: m.rows, snapshots: m.snapshots };
})()`))
	if err == nil {
		err = json.Unmarshal(raw, &m)
	}
	if err != nil {
		b.Fatalf("read the page's timings: %v", err)
	}
	round := func(v float64) float64 { return math.Round(v*10) / 10 }
	l := consoleLoad{SessionMS: round(m.Session), NamespacesMS: round(m.Namespaces), StreamMS: round(m.Stream),
		ListedMS: round(m.Listed), PaintedMS: round(m.Painted), Rows: m.Rows}
	// The RayCluster snapshot is the largest by far: the other kinds have no objects here.
	for _, s := range m.Snapshots {
		if int(s[1]) > l.SnapshotBytes {
			l.SnapshotMS, l.SnapshotBytes = round(s[0]), int(s[1])
		}
	}
	return l
}

// leave navigates the tab away from the console, which closes its stream.
func (t *consoleTab) leave(b *testing.B) {
	b.Helper()
	t.do(b, "leave the console", chromedp.Navigate("about:blank"))
}

// consoleTable is the results as Markdown tables: the loads, then the windows.
func consoleTable(rs []consoleResult) string {
	var sb strings.Builder
	sb.WriteString("| clusters | loads | list shown p50 / max | each load: session, namespaces, stream opened, RayCluster snapshot in (bytes), list shown, next frame (ms) | second page | the stream alone p50 / max | API server requests per page open |\n")
	sb.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		var each []string
		for _, l := range r.Loads {
			each = append(each, fmt.Sprintf("%.0f, %.0f, %.0f, %.0f (%d), %.0f, %.0f", l.SessionMS, l.NamespacesMS, l.StreamMS, l.SnapshotMS, l.SnapshotBytes, l.ListedMS, l.PaintedMS))
		}
		stream := slices.Clone(r.StreamMS)
		slices.Sort(stream)
		streamMax := 0.0
		if len(stream) > 0 {
			streamMax = stream[len(stream)-1]
		}
		fmt.Fprintf(&sb, "| %d | %d | %.0f / %.0f ms | %s | %.0f ms | %.0f / %.0f ms | %s |\n", r.Clusters, len(r.Loads), r.ListP50MS, r.ListMaxMS,
			strings.Join(each, "; "), r.SecondPage.ListedMS, median(stream), streamMax, counts(r.PerPageOpen))
	}
	sb.WriteString("\n| pages open | window | watches held (beyond no page) | lists of the console's kinds | LIST and WATCH requests in the window (all clients; a WATCH counted when it ends) | other requests | manta apiserver / kube-apiserver CPU (% of a core) |\n")
	sb.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		for _, w := range r.Windows {
			reads, other := map[string]float64{}, 0.0
			for k, v := range w.Requests {
				if strings.HasPrefix(k, "LIST ") || strings.HasPrefix(k, "WATCH ") {
					reads[k] = v
				} else {
					other += v
				}
			}
			fmt.Fprintf(&sb, "| %d | %.0f s | %s | %.0f | %s | %.0f | %.2f / %.2f |\n", w.Pages, w.Seconds, counts(w.WatchesHeld), w.ConsoleLists,
				counts(reads), other, w.APIServerCPUPercent, w.KubeAPIServerCPUPercent)
		}
		fmt.Fprintf(&sb, "| 0 (both left) | - | %s | - | - | - | - |\n", counts(r.WatchesAfterClose))
	}
	return sb.String()
}

// counts is a map as "key n, key n", sorted by key; "none" when empty.
func counts(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %g", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
