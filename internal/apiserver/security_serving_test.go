package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// Auth none only on loopback; plain HTTP on another address only when asked for.
func TestSecurityServingRules(t *testing.T) {
	withTLS := Options{TLSCertFile: "c", TLSKeyFile: "k"}
	for _, c := range []struct {
		addr string
		opts Options
		ok   bool
	}{
		{"127.0.0.1:8888", Options{Auth: AuthNone}, true},
		{"127.9.9.9:0", Options{Auth: AuthNone}, true},
		{"[::1]:8888", Options{Auth: AuthNone}, true},
		{"localhost:8888", Options{Auth: AuthNone}, true},
		{":8888", Options{Auth: AuthNone}, false},
		{"0.0.0.0:8888", Options{Auth: AuthNone}, false},
		{"[::]:8888", Options{Auth: AuthNone}, false},
		{"10.1.2.3:8888", Options{Auth: AuthNone, InsecureHTTP: true}, false},
		{":8888", Options{Auth: AuthNone, TLSCertFile: "c", TLSKeyFile: "k"}, false},
		{"example.com:8888", Options{Auth: AuthNone}, false},
		// Kubernetes auth: plain HTTP off loopback needs the opt-in or TLS.
		{"127.0.0.1:8888", Options{Auth: AuthKubernetes}, true},
		{":8888", Options{Auth: AuthKubernetes}, false},
		{"0.0.0.0:8888", Options{}, false},
		{":8888", Options{Auth: AuthKubernetes, InsecureHTTP: true}, true},
		{":8888", withTLS, true},
		{"8888", Options{}, false},
	} {
		err := CheckServing(c.addr, c.opts)
		if (err == nil) != c.ok {
			t.Errorf("CheckServing(%q, auth=%q tls=%v insecure=%v) = %v, want ok=%v", c.addr, c.opts.Auth, c.opts.TLSCertFile != "", c.opts.InsecureHTTP, err, c.ok)
		}
		if err != nil && c.opts.Auth == AuthNone && !strings.Contains(err.Error(), "loopback") {
			t.Errorf("CheckServing(%q) with auth none: %v does not say why", c.addr, err)
		}
	}
}

// Serve itself refuses a listener CheckServing refuses, whoever embeds the server.
func TestSecurityServeChecksListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{opts: Options{Auth: AuthNone}, handler: http.NotFoundHandler()}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Serve(ctx, ln); err != nil {
		t.Fatalf("auth none on %s: %v", ln.Addr(), err)
	}
	if err := s.ListenAndServe(ctx, ":0"); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("auth none on :0: %v, want a refusal", err)
	}
}

// writeCert writes a fresh self-signed certificate for 127.0.0.1 and its key into dir, and returns a pool trusting
// it.
func writeCert(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "manta-apiserver-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// noKube is a rest.Config for servers whose tests never reach Kubernetes.
var noKube = &rest.Config{Host: "https://127.0.0.1:1"}

// The server speaks HTTPS with the configured certificate (TLS 1.2 or later), refuses plain HTTP, and picks up a
// renewed certificate without a restart.
func TestSecurityTLS(t *testing.T) {
	dir := t.TempDir()
	pool := writeCert(t, dir)
	if _, err := New(noKube, Options{Auth: AuthNone, TLSCertFile: filepath.Join(dir, "tls.crt")}); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
	s, err := New(noKube, Options{Auth: AuthNone, TLSCertFile: filepath.Join(dir, "tls.crt"), TLSKeyFile: filepath.Join(dir, "tls.key")})
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(newLoopbackServer(t, s), "http://")
	get := func(c *http.Client, url string) (int, error) {
		res, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		_, _ = io.Copy(io.Discard, res.Body)
		return res.StatusCode, nil
	}
	client := func(cfg *tls.Config) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	}

	if code, err := get(client(&tls.Config{RootCAs: pool}), "https://"+addr+"/healthz"); err != nil || code != 200 {
		t.Fatalf("HTTPS with the CA trusted: %d %v", code, err)
	}
	if code, err := get(&http.Client{Timeout: 10 * time.Second}, "http://"+addr+"/healthz"); err == nil && code == 200 {
		t.Fatal("plain HTTP was served")
	}
	if _, err := get(client(&tls.Config{}), "https://"+addr+"/healthz"); err == nil {
		t.Fatal("a client not trusting the certificate connected")
	}
	if _, err := get(client(&tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11}), "https://"+addr+"/healthz"); err == nil {
		t.Fatal("TLS 1.1 was accepted")
	}

	// A renewed certificate is served once the next look at the files sees it.
	old := filepath.Join(t.TempDir(), "old.crt")
	if err := os.Rename(filepath.Join(dir, "tls.crt"), old); err != nil {
		t.Fatal(err)
	}
	newPool := writeCert(t, dir)
	later := time.Now().Add(time.Minute)
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Chtimes(filepath.Join(dir, f), later, later); err != nil {
			t.Fatal(err)
		}
	}
	s.certs.mu.Lock()
	s.certs.checked = time.Time{}
	s.certs.mu.Unlock()
	if code, err := get(client(&tls.Config{RootCAs: newPool}), "https://"+addr+"/healthz"); err != nil || code != 200 {
		t.Fatalf("HTTPS with the renewed certificate: %d %v", code, err)
	}
}

// Errors from Kubernetes about this server's own identity or its network do not reach callers.
func TestSecurityErrorsHideServerIdentity(t *testing.T) {
	const sa = "system:serviceaccount:manta-system:manta-apiserver"
	const url = "https://10.96.0.1:443"
	for _, err := range []error{
		apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "small", fmt.Errorf("User %q cannot get resource", sa)),
		apierrors.NewUnauthorized("token for " + sa + " expired"),
		fmt.Errorf("Get %q: dial tcp 10.96.0.1:443: connect: connection refused", url+"/api/v1/namespaces/a/configmaps/small"),
		apierrors.NewTooManyRequests("throttled "+sa, 1),
	} {
		e := fromKubernetes(err, `compute template "small"`)
		if strings.Contains(e.Message, sa) || strings.Contains(e.Message, "10.96.0.1") || strings.Contains(e.Message, "serviceaccount") {
			t.Errorf("caller-facing message %q reveals the server's identity or URL", e.Message)
		}
		if e.cause == nil {
			t.Errorf("%q: the cause is not kept for the log", e.Message)
		}
	}
	proxied := &ray.APIError{StatusCode: 403, FromProxy: true, Body: `services "c-head-svc:8265" is forbidden: User "` + sa + `"`, URL: url}
	if e := fromRay(proxied, "job"); strings.Contains(e.Message, sa) {
		t.Errorf("dashboard error %q reveals the server's identity", e.Message)
	}
	if e := fromDashboardSetup(fmt.Errorf("ray auth token secret %q: %w", "c", apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "c", errors.New(sa))), "c"); strings.Contains(e.Message, sa) {
		t.Errorf("dashboard setup error %q reveals the server's identity", e.Message)
	}
}

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
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", template(ns, "small")), nil)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/clusters", cluster(ns, "c")), nil)

	entered, release := make(chan struct{}), make(chan struct{})
	dash := func(context.Context, *rayv1.RayCluster, *corev1.Service) (Dashboard, error) {
		entered <- struct{}{}
		<-release
		tr, err := ray.NewDirectTransport(e.ray.srv.URL, nil)
		if err != nil {
			return nil, err
		}
		return ray.NewDashboardClient(tr), nil
	}
	s, err := New(e.cfg, Options{Auth: AuthNone, Dashboard: dash, MaxRequestsInflight: n})
	if err != nil {
		t.Fatal(err)
	}
	srv := newLoopbackServer(t, s)
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
	mustFail(t, r, http.StatusTooManyRequests, codeResourceExhausted, "")
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

// newLoopbackServer serves s with Serve (so its checks apply) on a loopback port until the test ends.
func newLoopbackServer(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + ln.Addr().String()
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
	mustOK(t, e.do(t, "POST", base+"/compute_templates", template(ns, "small")), nil)
	mustOK(t, e.do(t, "POST", base+"/clusters", cluster(ns, "c")), nil)
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
	s := mustFail(t, call(t, g, "POST", base+"/clusters", cluster(ns, "carols"), carol), 403, codePermissionDenied, "")
	if !strings.Contains(s.Message, `get configmaps "small"`) {
		t.Errorf("403 does not name the ConfigMap: %s", s.Message)
	}
	mustOK(t, call(t, g, "POST", base+"/clusters", cluster(ns, "daves"), dave), nil)

	// Submissions to a token-auth cluster use the token from its Secret.
	s = mustFail(t, call(t, g, "GET", base+"/jobsubmissions/c", nil, carol), 403, codePermissionDenied, "")
	if !strings.Contains(s.Message, `get secrets "c-token"`) {
		t.Errorf("403 does not name the Secret: %s", s.Message)
	}
	mustOK(t, call(t, g, "GET", base+"/jobsubmissions/c", nil, dave), nil)

	// Events are optional in the answer: carol gets the cluster without them, dave with them (written through
	// core/v1 here, read through events.k8s.io/v1: the same objects).
	var got Cluster
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
	mustFail(t, call(t, g, "GET", "/metrics", nil, ""), 401, codeUnauthenticated, "")
	nobody := e.serviceAccountToken(t, ns, "nobody")
	mustFail(t, call(t, g, "GET", "/metrics", nil, nobody), 403, codePermissionDenied, "")

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
