package ray_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/controller/rayservice"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// The operator's Ray clients never follow a redirect (internal/ray refuseRedirect). A tenant controls what its
// "Ray head" answers; if a 302/307 were followed, the request would go wherever the head says: through
// --use-kubernetes-proxy with the operator's own ServiceAccount token (client-go's bearer round tripper adds it to
// every request, whatever the host), and for a 307 with the body replayed (a job's entrypoint and runtime_env, a
// Serve config). internal/ray proves it against a stand-in API server; the tests here prove it end to end: the
// real kube-apiserver's services/proxy and pods/proxy pass the head's redirect back unchanged (the Location names
// another host, so the API server does not rewrite it), and the real operator, given a RayJob and a RayService whose
// head is a malicious server in a network namespace, must send nothing to the host the redirect names.

// redirectRecorder is where a malicious head's redirects point: it counts every request it gets, with whether it
// carried credentials or a body. It answers 404, so a client that followed a redirect gets an error either way and
// the operator keeps going the same way it does when redirects are refused (the tests' barriers are reached).
type redirectRecorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []recordedRequest
}

type recordedRequest struct {
	method, path string
	auth         bool // an Authorization header (the operator's bearer token through the Kubernetes proxy)
	body         int  // bytes of body
}

func newRedirectRecorder(t *testing.T) *redirectRecorder {
	rec := &redirectRecorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, recordedRequest{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization") != "", body: len(b)})
		rec.mu.Unlock()
		http.Error(w, "not the Ray head", http.StatusNotFound)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

// expectNone fails the test for every request the recorder got.
func (rec *redirectRecorder) expectNone(t *testing.T) {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	seen := map[recordedRequest]int{}
	var order []recordedRequest
	for _, r := range rec.reqs {
		if seen[r] == 0 {
			order = append(order, r)
		}
		seen[r]++
	}
	for _, r := range order {
		t.Errorf("the redirect target got %s %s %d times (Authorization header: %v, body: %d bytes): a redirect was followed", r.method, r.path, seen[r], r.auth, r.body)
	}
}

// maliciousHead plays a Ray head that answers the operator's dashboard and Serve calls with a redirect (status) to
// the recorder. One exception lets the RayJob controller get as far as submitting: once GET /api/jobs/<id> has been
// redirected twice, it answers Ray's 404 for a job it does not know, so the operator then POSTs the job (and that
// POST is redirected too).
type maliciousHead struct {
	status   int
	location string
	mu       sync.Mutex
	answered map[string]int // "<method> <kind>" → redirects answered, or "404 <kind>" for the 404s
}

// kind names the paths the head tells apart.
func headPathKind(p string) string {
	switch {
	case p == "/api/jobs/" || p == "/api/jobs":
		return "/api/jobs/"
	case strings.HasPrefix(p, "/api/jobs/"):
		return "/api/jobs/<id>"
	case strings.HasPrefix(p, "/api/serve/applications"):
		return "/api/serve/applications/"
	default:
		return p
	}
}

func (h *maliciousHead) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	kind := headPathKind(r.URL.Path)
	key := r.Method + " " + kind
	h.mu.Lock()
	if key == "GET /api/jobs/<id>" && h.answered[key] >= 2 {
		h.answered["404 "+kind]++
		h.mu.Unlock()
		// What Ray 2.52 answers for a submission ID it does not know.
		http.Error(w, fmt.Sprintf("Job %s does not exist", strings.TrimPrefix(r.URL.Path, "/api/jobs/")), http.StatusNotFound)
		return
	}
	h.answered[key]++
	h.mu.Unlock()
	w.Header().Set("Location", h.location+"/stolen"+r.URL.RequestURI())
	w.WriteHeader(h.status)
}

func (h *maliciousHead) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.answered[key]
}

func (h *maliciousHead) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprint(h.answered)
}

// startMaliciousHead serves h inside the network namespace, on its address, until the test ends: at the dashboard
// port the test's EndpointSlices publish (head.DashboardPort, see fakeKubelet), which the API server's service proxy
// dials; at the head Service's dashboard port (Ray's default), which the direct transport dials; and at Ray's
// default Serve port, where the operator checks Serve health.
func startMaliciousHead(t *testing.T, pn *podNet, h *maliciousHead) {
	t.Helper()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ports := []int{head.DashboardPort, int(ray.DefaultDashboardPort), int(ray.DefaultServePort)}
	if head.DashboardPort == int(ray.DefaultDashboardPort) {
		ports = ports[1:]
	}
	for _, port := range ports {
		l, err := pn.listen(net.JoinHostPort(pn.PodIP, strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(l) }()
	}
	t.Cleanup(func() { _ = srv.Close() })
}

// redirectStatuses are the answers a head can redirect with: 302 (a POST becomes a GET without its body when
// followed) and 307 (the method and body are replayed).
var redirectStatuses = []int{http.StatusFound, http.StatusTemporaryRedirect}

// TestSecurityOperatorProcessRefusesRedirectsThroughKubernetesProxy runs `manta operator --use-kubernetes-proxy` as
// a process, authenticated with a ServiceAccount token as in a cluster, against a real kube-apiserver. A RayJob
// (HTTPMode) and a RayService each get a cluster whose head is a malicious server in a network namespace that
// answers 302, then 307, to a recording server on loopback. The operator's calls (job status, job submission, Serve
// details, Serve config, Serve health) go through the API server's services/proxy and pods/proxy; the head counts
// the redirects it answered. Once it has answered each kind of call (at least twice where the operator retries),
// and the RayJob has failed its submission, the recording server must have got nothing: neither the token nor a
// body left for the host the redirect names.
func TestSecurityOperatorProcessRefusesRedirectsThroughKubernetesProxy(t *testing.T) {
	bin := testutil.BuildManta(t)
	cfg, cl := testutil.StartEnvtest(t)
	kubeconfig := serviceAccountKubeconfig(t, cfg, "manta-system", "manta-operator")
	for _, status := range redirectStatuses {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			ns := "redirect-proxy-" + strconv.Itoa(status)
			if err := cl.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			rec := newRedirectRecorder(t)
			pn := newPodNet(t)
			h := &maliciousHead{status: status, location: rec.srv.URL, answered: map[string]int{}}
			startMaliciousHead(t, pn, h)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			go fakeKubelet(ctx, cl, ns, pn.PodIP)
			startOperatorProcess(t, bin, kubeconfig, ns)
			runRedirectedCalls(t, cl, kubernetes.NewForConfigOrDie(cfg), ns, h, rec)
		})
	}
}

// TestSecurityOperatorRefusesRedirectsDirect is the same with the operator's direct transport (no Kubernetes
// proxy): no credentials ride along there, but a 307 would replay the job's or the Serve config's body to the host
// the head names. The operator runs in-process, as in TestRayJobOnRealHead's direct case, because the machine has no
// cluster DNS: its HTTP client resolves the head Services' names to the malicious head's network namespace address
// and dials everything else (the recorder on loopback) as it is. Serve health is dialled at the head pod's IP, the
// namespace address, unchanged.
func TestSecurityOperatorRefusesRedirectsDirect(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	for _, status := range redirectStatuses {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			ns := "redirect-direct-" + strconv.Itoa(status)
			rec := newRedirectRecorder(t)
			pn := newPodNet(t)
			h := &maliciousHead{status: status, location: rec.srv.URL, answered: map[string]int{}}
			startMaliciousHead(t, pn, h)
			dialer := &net.Dialer{Timeout: 10 * time.Second}
			hc := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				host, port, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				if strings.HasSuffix(host, ".svc.cluster.local") {
					host = pn.PodIP
				}
				return dialer.DialContext(ctx, network, net.JoinHostPort(host, port))
			}}}
			t.Cleanup(hc.CloseIdleConnections)
			f, err := ray.NewFactory(ray.Options{HTTPClient: hc, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			startRayJobOperator(t, cfg, cl, ns, operator.Options{RayClients: f}, pn.PodIP)
			runRedirectedCalls(t, cl, kubernetes.NewForConfigOrDie(cfg), ns, h, rec)
		})
	}
}

// runRedirectedCalls creates the RayJob and the RayService in ns, waits until the operator has made each of its
// calls to the malicious head and had it redirected, and checks nothing reached the recorder.
// The clusters have no workers: fakeKubelet gives a head pod the malicious head's address, and any other pod an
// address outside the test's namespaces, which the operator's Serve health checks would dial.
func runRedirectedCalls(t *testing.T, cl client.Client, kc kubernetes.Interface, ns string, h *maliciousHead, rec *redirectRecorder) {
	t.Helper()
	ctx := t.Context()
	j := newRayJob(ns, "redirected-job", `python -c "print('entrypoint the head must not get elsewhere')"`)
	j.Spec.RuntimeEnvYAML = "env_vars:\n  SECRET_FOR_THE_HEAD_ONLY: s3cr3t\n"
	j.Spec.RayClusterSpec.WorkerGroupSpecs = nil
	if err := cl.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	rs := &rayv1.RayService{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "redirected-svc"},
		Spec: rayv1.RayServiceSpec{
			ServeConfigV2: `applications:
  - name: app
    route_prefix: /app
    import_path: app:deployment
    runtime_env:
      env_vars:
        SECRET_FOR_THE_HEAD_ONLY: s3cr3t
`,
			RayClusterSpec: testutil.MakeRayCluster(ns, "x").Obj().Spec,
		},
	}
	if err := cl.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}

	// Barrier: the head has answered each of the operator's calls with a redirect, the retried Serve calls at least
	// twice, and the RayJob's submission has failed (the POST is not retried: a refused redirect fails the job). It
	// holds whether or not redirects are followed (the recorder answers 404, which fails the calls too), so that a
	// client that follows them fails on the recorder's count below rather than on a timeout.
	var got *rayv1.RayJob
	testutil.Eventually(t, 3*time.Minute, "the operator's calls answered with redirects", func() (bool, string) {
		got = &rayv1.RayJob{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(j), got); err != nil {
			return false, err.Error()
		}
		done := rayv1.IsJobDeploymentTerminal(got.Status.JobDeploymentStatus) && h.count("POST /api/jobs/") >= 1 &&
			h.count("GET /api/serve/applications/") >= 2 && h.count("PUT /api/serve/applications/") >= 2 &&
			h.count("GET /-/healthz") >= 2
		return done, fmt.Sprintf("head answered %v; RayJob status %+v", h, got.Status)
	})
	rec.expectNone(t)
	t.Logf("redirects answered by the head: %v", h)
	// The job status calls were redirected twice (each a status check failure, retried) before the head let the
	// operator submit.
	if n := h.count("GET /api/jobs/<id>"); n != 2 {
		t.Errorf("GET /api/jobs/<id> redirected %d times, want 2", n)
	}

	// What the operator made of the refusals: the RayJob failed its submission with the refusal in its message, and
	// the RayService reports the Serve config it could not apply.
	if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusFailed || got.Status.Reason != rayv1.SubmissionFailed ||
		!strings.Contains(got.Status.Message, ray.ErrRedirected.Error()) {
		t.Errorf("RayJob status %+v: want Failed, %s, a message saying %q", got.Status, rayv1.SubmissionFailed, ray.ErrRedirected)
	}
	expectEvent(t, kc, ns, rayjob.ReasonFailedSubmitJob, ray.ErrRedirected.Error())
	expectEvent(t, kc, ns, rayservice.EventFailedToUpdateServeApplications, ray.ErrRedirected.Error())
}

// expectEvent waits for an event in ns with reason whose note contains text.
func expectEvent(t *testing.T, kc kubernetes.Interface, ns, reason, text string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "a "+reason+" event saying "+text, func() (bool, string) {
		evs, err := kc.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var notes []string
		for _, e := range evs.Items {
			if e.Reason == reason {
				if strings.Contains(e.Note, text) {
					return true, ""
				}
				notes = append(notes, e.Note)
			}
		}
		return false, fmt.Sprintf("%s events: %q", reason, notes)
	})
}

// serviceAccountKubeconfig creates a ServiceAccount bound to cluster-admin and writes a kubeconfig that
// authenticates as it with a bearer token, as the operator does in a cluster: the credentials a followed redirect
// would carry away.
func serviceAccountKubeconfig(t *testing.T, admin *rest.Config, ns, name string) string {
	t.Helper()
	ctx := t.Context()
	kc := kubernetes.NewForConfigOrDie(admin)
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-redirect-test"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitRBAC(t, ctx, kc, "system:serviceaccount:"+ns+":"+name, "", rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}})
	tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, name, err)
	}
	ca := admin.CAData
	if len(ca) == 0 && admin.CAFile != "" {
		if ca, err = os.ReadFile(admin.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	kcfg := clientcmdapi.NewConfig()
	kcfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: ca, TLSServerName: admin.ServerName}
	kcfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kcfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: name}
	kcfg.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kcfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startOperatorProcess starts `manta operator --use-kubernetes-proxy` watching ns with kubeconfig, and kills it when
// the test ends (or, should the test binary die first, when its parent thread does: Pdeathsig). Its log is kept
// in the test's temp dir and printed when the test fails.
func startOperatorProcess(t *testing.T, bin, kubeconfig, ns string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "operator.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "operator", "--use-kubernetes-proxy", "--watch-namespace="+ns,
		"--metrics-addr=0", "--health-probe-bind-address=0", "--enable-leader-election=false",
		"--reconcile-concurrency=4", "--ray-timeout=10s")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = logf.Close()
		if t.Failed() {
			dumpLog(t, logPath)
		}
	})
}

func dumpLog(t *testing.T, path string) {
	f, err := os.Open(path)
	if err != nil {
		t.Log(err)
		return
	}
	defer func() { _ = f.Close() }()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 200 {
		lines = lines[len(lines)-200:]
	}
	t.Logf("operator log (last %d lines):\n%s", len(lines), strings.Join(lines, "\n"))
}
