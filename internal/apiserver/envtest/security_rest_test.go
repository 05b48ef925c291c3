package envtest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/code"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/apiserver/apiservertest"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestSecurityREST runs the security checks that need a control plane: the in-flight bound, caller checks for
// what the server reads on a caller's behalf, and /metrics authentication.
func TestSecurityREST(t *testing.T) {
	cfg, k := testutil.StartEnvtest(t)
	e := newTestEnv(t, cfg, k)
	t.Run("InflightBound", e.testInflightBound)
	t.Run("CallerReads", e.testCallerReads)
	t.Run("Metrics", e.testMetricsAuth)
}

// With the bound at n, n requests held inside handlers make the next one a JSON 429 with Retry-After, /healthz
// still answers, and once they finish requests are served again.
func (e *testEnv) testInflightBound(t *testing.T) {
	const n = 3
	ns := e.Namespace(t)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", apiservertest.Template(ns, "small")), nil)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/clusters", apiservertest.Cluster(ns, "c")), nil)

	entered, release := make(chan struct{}), make(chan struct{})
	dash := func(context.Context, *rayv1.RayCluster, *corev1.Service) (apiserver.Dashboard, error) {
		entered <- struct{}{}
		<-release
		tr, err := ray.NewDirectTransport(e.ray.srv.URL, nil)
		if err != nil {
			return nil, err
		}
		return ray.NewDashboardClient(tr), nil
	}
	s, err := apiserver.New(e.cfg, apiserver.Options{Auth: apiserver.AuthNone, Dashboard: dash, MaxRequestsInflight: n})
	if err != nil {
		t.Fatal(err)
	}
	srv := apiservertest.NewLoopbackServer(t, s)
	// Registered after the server's cleanup, so it runs first: a failed check does not leave handlers held for the
	// shutdown to wait on.
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseAll)
	held := make(chan resp, n)
	for range n {
		go func() {
			held <- callNoFatal(srv, "GET", "/apis/v1/namespaces/"+ns+"/jobsubmissions/c")
		}()
		<-entered
	}
	r := call(t, srv, "GET", "/apis/v1/namespaces/"+ns+"/clusters", nil, "")
	mustFail(t, r, http.StatusTooManyRequests, code.Code_RESOURCE_EXHAUSTED, "")
	if r.header.Get("Retry-After") == "" || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Errorf("429 headers %v: want Retry-After and JSON", r.header)
	}
	if r := call(t, srv, "GET", "/healthz", nil, ""); r.code != 200 {
		t.Errorf("/healthz while full: %d", r.code)
	}
	releaseAll()
	for range n {
		if r := <-held; r.code != 200 {
			t.Errorf("held request: %d %s", r.code, r.body)
		}
	}
	mustOK(t, call(t, srv, "GET", "/apis/v1/namespaces/"+ns+"/clusters", nil, ""), nil)
}

// callNoFatal is call for goroutines other than the test's: a transport error is a response with code 0.
func callNoFatal(base, method, path string) resp {
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		return resp{body: []byte(err.Error())}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return resp{body: []byte(err.Error())}
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return resp{code: res.StatusCode, body: raw, header: res.Header}
}

// A caller may have this server read a ConfigMap, a Secret or events for them only if RBAC lets them read it.
func (e *testEnv) testCallerReads(t *testing.T) {
	ctx := context.Background()
	ns := e.Namespace(t)
	base := "/apis/v1/namespaces/" + ns
	g := e.guarded.URL
	mustOK(t, e.do(t, "POST", base+"/compute_templates", apiservertest.Template(ns, "small")), nil)
	mustOK(t, e.do(t, "POST", base+"/clusters", apiservertest.Cluster(ns, "c")), nil)
	var rc rayv1.RayCluster
	if err := e.k.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c"}, &rc); err != nil {
		t.Fatal(err)
	}
	rc.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, SecretName: ptr.To("c-token")}
	if err := e.k.Update(ctx, &rc); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "c-token", Namespace: ns}, StringData: map[string]string{"auth_token": "s3cret"}}
	if err := e.k.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "c.1", Namespace: ns}, Reason: "Created", Message: "head pod created", Type: "Normal",
		InvolvedObject: corev1.ObjectReference{Kind: "RayCluster", Name: "c", Namespace: ns, APIVersion: "ray.io/v1"}}
	if err := e.k.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}

	clusters := rbacv1.PolicyRule{APIGroups: []string{"ray.io"}, Resources: []string{"rayclusters"}, Verbs: []string{"get", "list", "create"}}
	proxy := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services/proxy"}, Verbs: []string{"get"}}
	carol := e.serviceAccountToken(t, ns, "carol")
	e.grant(t, ns, "carol", clusters, proxy)
	dave := e.serviceAccountToken(t, ns, "dave")
	e.grant(t, ns, "dave", clusters, proxy,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}, ResourceNames: []string{"small"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"c-token"}},
		// The v1 API reads events from events.k8s.io/v1, as KubeRay v1.7: that is what is checked.
		rbacv1.PolicyRule{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"list"}},
	)

	// A cluster spec copies the compute templates it names: carol may not read the ConfigMap.
	s := mustFail(t, call(t, g, "POST", base+"/clusters", apiservertest.Cluster(ns, "carols"), carol), 403, code.Code_PERMISSION_DENIED, "")
	if !strings.Contains(s.Message, `get configmaps "small"`) {
		t.Errorf("403 does not name the ConfigMap: %s", s.Message)
	}
	mustOK(t, call(t, g, "POST", base+"/clusters", apiservertest.Cluster(ns, "daves"), dave), nil)

	// Submissions to a token-auth cluster use the token from its Secret.
	s = mustFail(t, call(t, g, "GET", base+"/jobsubmissions/c", nil, carol), 403, code.Code_PERMISSION_DENIED, "")
	if !strings.Contains(s.Message, `get secrets "c-token"`) {
		t.Errorf("403 does not name the Secret: %s", s.Message)
	}
	mustOK(t, call(t, g, "GET", base+"/jobsubmissions/c", nil, dave), nil)

	// Events are optional in the answer: carol gets the cluster without them, dave with them (written through
	// core/v1 here, read through events.k8s.io/v1: the same objects).
	var got apiserver.Cluster
	mustOK(t, call(t, g, "GET", base+"/clusters/c", nil, carol), &got)
	if len(got.Events) != 0 {
		t.Errorf("a caller who may not list events got %v", got.Events)
	}
	mustOK(t, call(t, g, "GET", base+"/clusters/c", nil, dave), &got)
	if len(got.Events) != 1 || got.Events[0].Message != "head pod created" {
		t.Errorf("a caller who may list events got %+v", got.Events)
	}
}

// /metrics under Kubernetes auth: a token, and RBAC allowing get on the non-resource URL /metrics.
func (e *testEnv) testMetricsAuth(t *testing.T) {
	ns := e.Namespace(t)
	g := e.guarded.URL
	mustFail(t, call(t, g, "GET", "/metrics", nil, ""), 401, code.Code_UNAUTHENTICATED, "")
	nobody := e.serviceAccountToken(t, ns, "nobody")
	mustFail(t, call(t, g, "GET", "/metrics", nil, nobody), 403, code.Code_PERMISSION_DENIED, "")

	r := call(t, g, "GET", "/metrics", nil, e.metricsToken(t, ns))
	if r.code != 200 || !strings.Contains(string(r.body), "manta_apiserver_requests_total") {
		t.Fatalf("/metrics with an authorised token: %d %.200s", r.code, r.body)
	}
}

// metricsToken is a token of a new ServiceAccount "scraper" in ns that RBAC allows get on /metrics, as a
// Prometheus scraping kube-apiserver holds.
func (e *testEnv) metricsToken(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	tok := e.serviceAccountToken(t, ns, "scraper")
	rule := rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}
	name := ns + "-scraper"
	if err := e.k.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}); err != nil {
		t.Fatal(err)
	}
	if err := e.k.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: ns}}}); err != nil {
		t.Fatal(err)
	}
	e.waitRBAC(t, ns, "scraper", "", rule)
	return tok
}
