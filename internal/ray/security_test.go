package ray

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unicode"

	"k8s.io/client-go/rest"
)

// The security suite of internal/ray (go test ./... -run Security runs every package's): a head is untrusted, it
// answers whatever the tenant who runs it wants.

// recorder is a server that must never be reached: it records every request it gets.
type recorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []string
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, fmt.Sprintf("%s %s authorization=%q x-ray-authorization=%q body=%q",
			req.Method, req.URL, req.Header.Get("Authorization"), req.Header.Get(AuthHeader), body))
		r.mu.Unlock()
		_, _ = io.WriteString(w, `{"job_id":"stolen","submission_id":"stolen","applications":{}}`)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// received is what reached the recorder. The calls under test have returned when it is read: their requests
// would have been answered by now, so an empty list means none was sent.
func (r *recorder) received() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reqs...)
}

// redirectingHead answers every request with status and a Location on the recorder.
func redirectingHead(t *testing.T, status int, to string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Redirect(w, r, to+r.URL.Path, status)
	}))
	t.Cleanup(srv.Close)
	return srv
}

var redirectStatuses = []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect}

// dashboardCalls is every call the operator (RayJob: submit, get, stop, delete; RayService: deploy, details, GCS
// health) and the REST API server (the job submission endpoints) make on a dashboard.
func dashboardCalls(c *DashboardClient) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"SubmitJob": func(ctx context.Context) error {
			_, err := c.SubmitJob(ctx, JobSubmitRequest{Entrypoint: "python secret.py", SubmissionID: "job-1"})
			return err
		},
		"GetJob":     func(ctx context.Context) error { _, err := c.GetJob(ctx, "job-1"); return err },
		"ListJobs":   func(ctx context.Context) error { _, err := c.ListJobs(ctx); return err },
		"GetJobLogs": func(ctx context.Context) error { _, err := c.GetJobLogs(ctx, "job-1"); return err },
		"StopJob":    func(ctx context.Context) error { _, err := c.StopJob(ctx, "job-1"); return err },
		"DeleteJob":  func(ctx context.Context) error { _, err := c.DeleteJob(ctx, "job-1"); return err },
		"DeployServeConfigV2": func(ctx context.Context) error {
			return c.DeployServeConfigV2(ctx, "applications:\n  - name: app\n    import_path: mod:app\n")
		},
		"GetServeDetails": func(ctx context.Context) error { _, err := c.GetServeDetails(ctx); return err },
		"CheckGCSHealth":  c.CheckGCSHealth,
	}
}

// checkRefused asserts a call failed as a refused redirect, with a message that names no address.
func checkRefused(t *testing.T, name string, err error, hidden ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: a redirect was followed (no error)", name)
		return
	}
	if !errors.Is(err, ErrRedirected) {
		t.Errorf("%s: err = %v, want ErrRedirected", name, err)
	}
	for _, h := range hidden {
		if strings.Contains(err.Error(), h) {
			t.Errorf("%s: error %q names %q", name, err, h)
		}
	}
}

// loopbackDialer dials addr whatever host a request names: the direct transport's cluster DNS names reach the test
// head on loopback.
func loopbackDialer(addr string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
}

func TestSecurityDirectTransportRefusesRedirects(t *testing.T) {
	rec := newRecorder(t)
	for _, status := range redirectStatuses {
		head := redirectingHead(t, status, rec.srv.URL)
		headAddr := strings.TrimPrefix(head.URL, "http://")
		// Through the factory with a caller's client that follows redirects (net/http's default), and with the
		// package's own client.
		f, err := NewFactory(Options{HTTPClient: loopbackDialer(headAddr)})
		if err != nil {
			t.Fatal(err)
		}
		viaFactory, err := f.Dashboard(Target{Namespace: "tenant", HeadServiceName: "head-svc", AuthToken: "ray-token"})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewDirectTransport(head.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		for client, c := range map[string]*DashboardClient{"factory": viaFactory, "transport": NewDashboardClient(tr, WithAuthToken("ray-token"))} {
			for name, call := range dashboardCalls(c) {
				checkRefused(t, fmt.Sprintf("%d %s %s", status, client, name), call(context.Background()), rec.srv.URL, headAddr)
			}
		}
		sp, err := f.ServeProxy(Target{HeadPodIP: "10.0.0.7"})
		if err != nil {
			t.Fatal(err)
		}
		checkRefused(t, fmt.Sprintf("%d serve proxy health", status), sp.CheckHealth(context.Background()), rec.srv.URL)
	}
	if got := rec.received(); len(got) > 0 {
		t.Errorf("the redirect target received %d requests:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// fakeAPIServer plays the Kubernetes API server's services/proxy and pods/proxy, which pass a head's redirect on
// with its Location (to another host, or to the API server itself). It checks the operator's token, and counts
// requests that are not proxy requests: a followed same-host redirect would arrive there with the token.
type fakeAPIServer struct {
	srv      *httptest.Server
	mu       sync.Mutex
	nonProxy []string
}

const operatorToken = "manta-operator-sa-token"

func newFakeAPIServer(t *testing.T, status int, location func(r *http.Request) string) *fakeAPIServer {
	a := &fakeAPIServer{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+operatorToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if !strings.Contains(r.URL.Path, "/proxy/") {
			a.mu.Lock()
			a.nonProxy = append(a.nonProxy, r.Method+" "+r.URL.String())
			a.mu.Unlock()
			_, _ = io.WriteString(w, `{"kind":"Secret","apiVersion":"v1"}`)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Location", location(r))
		w.WriteHeader(status)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeAPIServer) received() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.nonProxy...)
}

// The API server here is an httptest server: a real kube-apiserver (envtest) refuses to proxy to loopback
// addresses, where a test's fake head would be (test/ray publishes a real head on a network namespace's address).
func TestSecurityProxyTransportRefusesRedirects(t *testing.T) {
	rec := newRecorder(t)
	for _, status := range redirectStatuses {
		for target, location := range map[string]func(*http.Request) string{
			"other host": func(r *http.Request) string { return rec.srv.URL + "/steal" },
			"api server": func(r *http.Request) string { return "/api/v1/namespaces/kube-system/secrets/admin" },
		} {
			api := newFakeAPIServer(t, status, location)
			f, err := NewFactory(Options{UseKubernetesProxy: true, RESTConfig: &rest.Config{Host: api.srv.URL, BearerToken: operatorToken}})
			if err != nil {
				t.Fatal(err)
			}
			c, err := f.Dashboard(Target{Namespace: "tenant", HeadServiceName: "head-svc", AuthToken: "ray-token"})
			if err != nil {
				t.Fatal(err)
			}
			for name, call := range dashboardCalls(c) {
				checkRefused(t, fmt.Sprintf("%d to %s: %s", status, target, name), call(context.Background()), rec.srv.URL, api.srv.URL)
			}
			sp, err := f.ServeProxy(Target{Namespace: "tenant", HeadPodName: "head-0"})
			if err != nil {
				t.Fatal(err)
			}
			checkRefused(t, fmt.Sprintf("%d to %s: serve proxy health", status, target), sp.CheckHealth(context.Background()), rec.srv.URL, api.srv.URL)
			if got := api.received(); len(got) > 0 {
				t.Errorf("%d to %s: the API server received %d non-proxy requests (a followed redirect, with the operator's token):\n%s", status, target, len(got), strings.Join(got, "\n"))
			}
		}
	}
	if got := rec.received(); len(got) > 0 {
		t.Errorf("the redirect target received %d requests:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// badNames change the host or path of a URL built from them.
var badNames = []string{"192.0.2.2?", "192.0.2.2#", "evil.example@x", "x:80", "a/b", "a/../../secrets", "..", "Head", "", strings.Repeat("a", 64)}

func TestSecurityFactoryRefusesBadNames(t *testing.T) {
	direct, err := NewFactory(Options{})
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := NewFactory(Options{UseKubernetesProxy: true, RESTConfig: &rest.Config{Host: "https://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*Factory{direct, proxy} {
		for _, bad := range badNames {
			for what, tgt := range map[string]Target{
				"head service": {Namespace: "ns", HeadServiceName: bad},
				"namespace":    {Namespace: bad, HeadServiceName: "svc"},
			} {
				if c, err := f.Dashboard(tgt); !errors.Is(err, ErrInvalidTarget) {
					t.Errorf("proxy=%v: Dashboard with %s %q = %v, %v; want ErrInvalidTarget", f.UsesKubernetesProxy(), what, bad, c, err)
				}
				if u := f.InClusterDashboardURL(tgt); u != "" {
					t.Errorf("InClusterDashboardURL with %s %q = %q, want empty", what, bad, u)
				}
			}
		}
		if _, err := f.Dashboard(Target{Namespace: "ns", HeadServiceName: "svc", DashboardPort: -1}); !errors.Is(err, ErrInvalidTarget) {
			t.Errorf("negative port: %v", err)
		}
	}
	for _, bad := range append(badNames, "head_0", "-head") {
		if bad == ".." || bad == strings.Repeat("a", 64) {
			continue // valid subdomain characters are checked below by length and dots
		}
		if _, err := proxy.ServeProxy(Target{Namespace: "ns", HeadPodName: bad}); !errors.Is(err, ErrInvalidTarget) {
			t.Errorf("ServeProxy with head pod name %q: %v, want ErrInvalidTarget", bad, err)
		}
	}
	for _, bad := range []string{"10.0.0.7:80", "10.0.0.7/x", "10.0.0.7?", "evil.example", "fe80::1%eth0", "10.0.0.7#", "user@10.0.0.7"} {
		if _, err := direct.ServeProxy(Target{HeadPodIP: bad}); !errors.Is(err, ErrInvalidTarget) {
			t.Errorf("ServeProxy with head pod IP %q: %v, want ErrInvalidTarget", bad, err)
		}
	}
	// Valid names still work, IPv6 included.
	if sp, err := direct.ServeProxy(Target{HeadPodIP: "fd00::7"}); err != nil || sp.Endpoint() != "http://[fd00::7]:8000" {
		t.Errorf("IPv6 pod IP: %v, %v", sp, err)
	}
	if got, want := direct.InClusterDashboardURL(Target{Namespace: "ns", HeadServiceName: "rc-head-svc"}), "http://rc-head-svc.ns.svc.cluster.local:8265"; got != want {
		t.Errorf("InClusterDashboardURL = %q, want %q", got, want)
	}
	if _, err := NewFactory(Options{ClusterDomain: "evil.example/x?"}); err == nil {
		t.Error("a cluster domain that is not a DNS name was accepted")
	}
}

// logsHead answers GET /api/jobs/<id>/logs with {"logs": "<n bytes>"}, written from one small buffer so the
// server side allocates next to nothing. The logs end in a known line.
func logsHead(t *testing.T, n int, end string) *httptest.Server {
	line := `step ok \u00e9\t\"quoted\"\n`
	var decoded string
	if err := json.Unmarshal([]byte(`"`+line+`"`), &decoded); err != nil {
		t.Fatal(err)
	}
	decodedLine := len(decoded)
	chunk := []byte(strings.Repeat(line, 2048))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"logs": "`)
		for written := 0; written+len(chunk)/len(line)*decodedLine <= n; written += len(chunk) / len(line) * decodedLine {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, end+`"}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSecurityJobLogsAreBounded(t *testing.T) {
	const size = 60 << 20
	const end = `Traceback: ValueError: the real error\n`
	head := logsHead(t, size, end)
	tr, err := NewDirectTransport(head.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := NewDashboardClient(tr, WithTimeout(DefaultProxyTimeout))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	logs, err := c.GetJobLogs(context.Background(), "job-1")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	// TotalAlloc counts the test server's side too; it writes from one buffer.
	const bound = 16 << 20
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("reading a 60 MiB log allocated %.1f MiB", float64(alloc)/(1<<20))
	if alloc > bound {
		t.Errorf("reading a 60 MiB log allocated %d MiB, want at most %d MiB", alloc>>20, bound>>20)
	}
	marker, rest, ok := strings.Cut(logs, "\n")
	var dropped int
	if _, err := fmt.Sscanf(marker, "[... %d bytes truncated ...]", &dropped); !ok || err != nil {
		t.Fatalf("logs start %q, want a truncation marker", logs[:min(len(logs), 80)])
	}
	if len(rest) > MaxJobLogBytes || len(rest) < MaxJobLogBytes-3 {
		t.Errorf("kept %d bytes, want %d (less a cut character)", len(rest), MaxJobLogBytes)
	}
	if !strings.HasSuffix(rest, "ValueError: the real error\n") {
		t.Errorf("logs end %q, want the end of the job's output", rest[max(0, len(rest)-80):])
	}
	if dropped < size-MaxJobLogBytes {
		t.Errorf("marker says %d bytes truncated, want about %d", dropped, size-MaxJobLogBytes)
	}
	if !strings.Contains(rest, "step ok é\t\"quoted\"\n") {
		t.Errorf("escapes not decoded: %q", rest[:100])
	}
}

func TestSecurityResponseSizeIsBounded(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"applications":{}, "proxy_location": "`)
		_, _ = io.WriteString(w, strings.Repeat("x", MaxResponseBytes))
		_, _ = io.WriteString(w, `"}`)
	})
	if _, err := c.GetServeDetails(context.Background()); !errors.Is(err, ErrResponseTooLarge) {
		t.Fatalf("GetServeDetails of a %d MiB answer: %v, want ErrResponseTooLarge", MaxResponseBytes>>20, err)
	}
}

func TestSecurityErrorsDoNotEchoTheHead(t *testing.T) {
	secret := "internal-db.corp:5432 password=hunter2"
	body := "Traceback (most recent call last):\n" + strings.Repeat("  File \"x.py\", line 1, "+secret+"\n", 500) +
		"ValueError: Job with submission_id job-1 already exists. Please use a different submission_id.\x1b[31m\x00" + strings.Repeat("z", 1000) + "\n\n"
	var srvURL string
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, body)
	})
	srvURL = c.Endpoint()
	_, err := c.SubmitJob(context.Background(), JobSubmitRequest{Entrypoint: "x", SubmissionID: "job-1"})
	if !errors.Is(err, ErrAlreadySubmitted) {
		t.Fatalf("err = %v, want ErrAlreadySubmitted (classified from the whole answer)", err)
	}
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v, want *APIError", err)
	}
	msg := err.Error()
	if len(ae.Body) > excerptLen+3 || len(msg) > 400 {
		t.Errorf("excerpt %d bytes, message %d bytes: %q", len(ae.Body), len(msg), msg)
	}
	for _, leak := range []string{secret, srvURL, strings.TrimPrefix(srvURL, "http://")} {
		if strings.Contains(msg, leak) {
			t.Errorf("message %q contains %q", msg, leak)
		}
	}
	if i := strings.IndexFunc(msg, func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
		t.Errorf("message %q has a control character at %d", msg, i)
	}
	if !strings.Contains(msg, "POST /api/jobs/") || !strings.Contains(msg, "ValueError: Job with submission_id job-1 already exists") {
		t.Errorf("message %q should name the call and the exception", msg)
	}

	// Nor do errors without an answer name the address.
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	tr, _ := NewDirectTransport(addr, nil)
	_, err = NewDashboardClient(tr).GetJob(context.Background(), "job-1")
	if !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), strings.TrimPrefix(addr, "http://")) {
		t.Errorf("connection refused: %v, want ErrUnavailable without the address", err)
	}
	// Nor a malformed answer's body beyond an excerpt.
	c = newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "<html>"+strings.Repeat(secret, 100)+"\x07</html>")
	})
	_, err = c.GetJob(context.Background(), "j")
	if !errors.Is(err, ErrMalformedResponse) || len(err.Error()) > 400 {
		t.Errorf("malformed: %d bytes: %v", len(err.Error()), err)
	}
}

// The streaming decoder agrees with encoding/json on what it accepts and returns.
func TestJobLogsDecoder(t *testing.T) {
	for _, in := range []string{
		`{"logs":""}`,
		`{"logs":"hello\n"}`,
		` { "other" : [1, {"a": "}"}, "x\"y"], "n": -1.5e3, "b": true, "logs" : "a\u00e9\ud83d\ude00\/\\\"\b\f\r\t z" , "z": null } `,
		`{"logs":"lone \ud83d half"}`,
		`{"LOGS":"case"}`,
		`{"logs":"first","logs":"second"}`,
		"{\"logs\":\"raw \xff byte\"}",
		`{"logs":null}`,
		`{}`,
		`{"logs":5}`,
		`{"logs":"unterminated`,
		`{"logs":"bad \x escape"}`,
		"{\"logs\":\"control \x01\"}",
		`{"logs":"x"} trailing`,
		`["logs"]`,
		``,
	} {
		var want struct {
			Logs *string `json:"logs"`
		}
		werr := json.Unmarshal([]byte(in), &want)
		got, err := readJobLogs(strings.NewReader(in), 1<<10)
		switch {
		case werr != nil || want.Logs == nil:
			if err == nil {
				t.Errorf("%q: got %q, want an error (encoding/json: %v)", in, got, werr)
			}
		case err != nil:
			t.Errorf("%q: %v, want %q", in, err, *want.Logs)
		case got != strings.ToValidUTF8(*want.Logs, "\uFFFD"):
			t.Errorf("%q: got %q, want %q", in, got, *want.Logs)
		}
	}
	// Truncation keeps the end, at a character boundary, after a marker.
	got, err := readJobLogs(strings.NewReader(`{"logs":"`+strings.Repeat("é", 10)+`end"}`), 8)
	if err != nil || got != "[... 16 bytes truncated ...]\nééend" {
		t.Errorf("truncated: %q, %v", got, err)
	}
}
