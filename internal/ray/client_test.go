package ray

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

func newTestClient(t *testing.T, h http.HandlerFunc, opts ...ClientOption) *DashboardClient {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tr, err := NewDirectTransport(srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return NewDashboardClient(tr, opts...)
}

// rayAlreadyExists is the end of Ray 2.52's answer to a repeated submission_id (status 500, a traceback in plain text).
const rayAlreadyExists = `Traceback (most recent call last):
  File "/ray/dashboard/modules/job/job_head.py", line 385, in submit_job
ValueError: Job with submission_id job-1 already exists. Please use a different submission_id.`

func TestSubmitJob(t *testing.T) {
	var got map[string]any
	var gotPath, gotMethod, gotAuth string
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotMethod, gotAuth = r.URL.Path, r.Method, r.Header.Get("x-ray-authorization")
		_ = json.NewDecoder(r.Body).Decode(&got)
		_, _ = io.WriteString(w, `{"job_id":"job-1","submission_id":"job-1"}`)
	}, WithAuthToken("s3cret"))
	id, err := c.SubmitJob(context.Background(), JobSubmitRequest{
		Entrypoint:          "python main.py",
		SubmissionID:        "job-1",
		RuntimeEnv:          map[string]any{"env_vars": map[string]any{"A": "b"}},
		Metadata:            map[string]string{"owner": "manta"},
		EntrypointNumCPUs:   0.5,
		EntrypointResources: map[string]float64{"custom": 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	if id != "job-1" {
		t.Errorf("id = %q", id)
	}
	if gotMethod != http.MethodPost || gotPath != "/api/jobs/" {
		t.Errorf("request = %s %s, want POST /api/jobs/", gotMethod, gotPath)
	}
	if gotAuth != "Bearer s3cret" {
		t.Errorf("x-ray-authorization = %q", gotAuth)
	}
	want := map[string]any{
		"entrypoint":           "python main.py",
		"submission_id":        "job-1",
		"runtime_env":          map[string]any{"env_vars": map[string]any{"A": "b"}},
		"metadata":             map[string]any{"owner": "manta"},
		"entrypoint_num_cpus":  0.5,
		"entrypoint_resources": map[string]any{"custom": 1.0},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("body (-want +got):\n%s", d)
	}
}

func TestNoAuthHeaderWithoutToken(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if v, ok := r.Header["X-Ray-Authorization"]; ok {
			t.Errorf("unexpected x-ray-authorization %q", v)
		}
		_, _ = io.WriteString(w, "success")
	})
	if err := c.CheckGCSHealth(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestErrorClassification(t *testing.T) {
	cases := []struct {
		name    string
		status  int
		body    string
		want    []error
		notWant []error
	}{
		{"already submitted 500 (ray 2.52)", 500, rayAlreadyExists, []error{ErrAlreadySubmitted}, []error{ErrUnavailable, ErrNotFound}},
		{"already submitted 400", 400, rayAlreadyExists, []error{ErrAlreadySubmitted}, []error{ErrUnavailable, ErrNotFound}},
		{"not found", 404, "Job nope does not exist", []error{ErrNotFound}, []error{ErrUnavailable, ErrAlreadySubmitted}},
		{"internal error", 500, "No available agent to submit job, please try again later.", []error{ErrUnavailable}, []error{ErrAlreadySubmitted}},
		{"bad gateway", 502, "", []error{ErrUnavailable}, nil},
		{"service unavailable", 503, "", []error{ErrUnavailable}, nil},
		{"missing token", 401, "Unauthorized: Missing authentication token", []error{ErrUnauthorized}, []error{ErrUnavailable}},
		{"wrong token", 403, "Forbidden: Invalid authentication token", []error{ErrUnauthorized}, []error{ErrUnavailable}},
		{"bad request", 400, "entrypoint: field required", nil, []error{ErrUnavailable, ErrNotFound, ErrAlreadySubmitted}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			})
			_, err := c.SubmitJob(context.Background(), JobSubmitRequest{Entrypoint: "x", SubmissionID: "job-1"})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("error %v is not %v", err, w)
				}
			}
			for _, w := range tc.notWant {
				if errors.Is(err, w) {
					t.Errorf("error %v is %v", err, w)
				}
			}
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status {
				t.Errorf("error %v: want *APIError with status %d", err, tc.status)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}, WithTimeout(100*time.Millisecond))
	defer close(release)
	start := time.Now()
	_, err := c.GetJob(context.Background(), "slow")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	// The handler never answers by itself; the bound leaves room for a busy machine's scheduling delays.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("timeout took %v", d)
	}
}

func TestCallerContextCancelled(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, WithTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.ListJobs(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}

func TestConnectionRefusedIsUnavailable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	tr, err := NewDirectTransport(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := NewDashboardClient(tr)
	if err := c.CheckGCSHealth(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

func TestMalformedJSON(t *testing.T) {
	for name, body := range map[string]string{
		"truncated":  `{"status": "RUNN`,
		"html":       `<html>proxy error</html>`,
		"wrong type": `{"status": 7}`,
	} {
		t.Run(name, func(t *testing.T) {
			c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, body) })
			_, err := c.GetJob(context.Background(), "j")
			if !errors.Is(err, ErrMalformedResponse) {
				t.Fatalf("err = %v, want ErrMalformedResponse", err)
			}
			if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotFound) {
				t.Errorf("err = %v is also unavailable/not found", err)
			}
		})
	}
	t.Run("logs without logs field", func(t *testing.T) {
		c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{}`) })
		if _, err := c.GetJobLogs(context.Background(), "j"); !errors.Is(err, ErrMalformedResponse) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestJobCalls(t *testing.T) {
	var calls []string
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, r.Method+" "+r.URL.Path)
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/jobs/":
			_, _ = io.WriteString(w, `[{"type":"SUBMISSION","submission_id":"a","status":"SUCCEEDED","job_id":null,"start_time":1700000000000,"end_time":null,"driver_exit_code":0}]`)
		case r.Method == http.MethodGet && r.URL.Path == "/api/jobs/a":
			_, _ = io.WriteString(w, `{"type":"SUBMISSION","submission_id":"a","status":"FAILED","message":"boom","driver_exit_code":3,"metadata":{"k":"v"}}`)
		case r.URL.Path == "/api/jobs/a/logs":
			_, _ = io.WriteString(w, `{"logs":"hello\n"}`)
		case r.URL.Path == "/api/jobs/a/stop":
			_, _ = io.WriteString(w, `{"stopped":true}`)
		case r.Method == http.MethodDelete:
			_, _ = io.WriteString(w, `{"deleted":true}`)
		default:
			http.NotFound(w, r)
		}
	})
	ctx := context.Background()
	jobs, err := c.ListJobs(ctx)
	if err != nil || len(jobs) != 1 || jobs[0].SubmissionID != "a" || jobs[0].StartTime != 1700000000000 || jobs[0].Status != JobStatusSucceeded {
		t.Fatalf("ListJobs = %+v, %v", jobs, err)
	}
	info, err := c.GetJob(ctx, "a")
	if err != nil || info.Status != JobStatusFailed || !info.Status.IsTerminal() || info.DriverExitCode == nil || *info.DriverExitCode != 3 || info.Metadata["k"] != "v" {
		t.Fatalf("GetJob = %+v, %v", info, err)
	}
	if logs, err := c.GetJobLogs(ctx, "a"); err != nil || logs != "hello\n" {
		t.Fatalf("GetJobLogs = %q, %v", logs, err)
	}
	if ok, err := c.StopJob(ctx, "a"); err != nil || !ok {
		t.Fatalf("StopJob = %v, %v", ok, err)
	}
	if ok, err := c.DeleteJob(ctx, "a"); err != nil || !ok {
		t.Fatalf("DeleteJob = %v, %v", ok, err)
	}
	if _, err := c.GetJob(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetJob(missing) = %v", err)
	}
	want := []string{"GET /api/jobs/", "GET /api/jobs/a", "GET /api/jobs/a/logs", "POST /api/jobs/a/stop", "DELETE /api/jobs/a", "GET /api/jobs/missing"}
	if d := cmp.Diff(want, calls); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
}

func TestJobIDIsEscaped(t *testing.T) {
	for _, proxy := range []bool{false, true} {
		var got string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = r.URL.EscapedPath()
			_, _ = io.WriteString(w, `{"logs":""}`)
		}))
		var tr Transport
		var err error
		if proxy {
			tr, err = NewProxyTransport(&rest.Config{Host: srv.URL}, nil, ServiceProxyPath("ns", "svc", "dashboard"))
		} else {
			tr, err = NewDirectTransport(srv.URL, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewDashboardClient(tr).GetJobLogs(context.Background(), "a b/c%"); err != nil {
			t.Fatal(err)
		}
		want := "/api/jobs/a%20b%2Fc%25/logs"
		if proxy {
			want = "/api/v1/namespaces/ns/services/svc:dashboard/proxy" + want
		}
		if got != want {
			t.Errorf("proxy=%v: path %q, want %q", proxy, got, want)
		}
		srv.Close()
	}
}

func TestServe(t *testing.T) {
	var put []byte
	var query string
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut:
			put, _ = io.ReadAll(r.Body)
			if r.Header.Get("Content-Type") != "application/json" {
				t.Errorf("content type %q", r.Header.Get("Content-Type"))
			}
		case http.MethodGet:
			query = r.URL.RawQuery
			_, _ = io.WriteString(w, `{"proxy_location":"EveryNode","deploy_mode":"MULTI_APP","applications":{"app1":{"name":"app1","route_prefix":"/","status":"RUNNING","message":"","deployments":{"D":{"name":"D","status":"HEALTHY","replicas":[{"replica_id":"r","state":"RUNNING"}]}}}}}`)
		}
	})
	ctx := context.Background()
	cfg := `
applications:
  - name: app1
    import_path: mod:app
    route_prefix: /
    deployments:
      - name: D
        num_replicas: 1
`
	if err := c.DeployServeConfigV2(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(put, &got); err != nil {
		t.Fatalf("PUT body %q: %v", put, err)
	}
	want := map[string]any{"applications": []any{map[string]any{
		"name": "app1", "import_path": "mod:app", "route_prefix": "/",
		"deployments": []any{map[string]any{"name": "D", "num_replicas": 1.0}},
	}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("PUT body (-want +got):\n%s", d)
	}
	d, err := c.GetServeDetails(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if query != "api_type=declarative" {
		t.Errorf("query = %q", query)
	}
	app := d.Applications["app1"]
	if app.Status != ApplicationStatusRunning || app.Deployments["D"].Status != DeploymentStatusHealthy {
		t.Errorf("details = %+v", d)
	}
	if err := c.DeployServeConfigV2(ctx, "applications: [unclosed"); err == nil {
		t.Error("bad YAML accepted")
	}
	if err := c.DeployServeConfigV2(ctx, "- a list"); err == nil {
		t.Error("non-mapping YAML accepted")
	}
}

func TestGCSHealth(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/gcs_healthz" {
			t.Errorf("path %q", r.URL.Path)
		}
		w.WriteHeader(int(status.Load()))
		_, _ = io.WriteString(w, "success")
	})
	if err := c.CheckGCSHealth(context.Background()); err != nil {
		t.Fatal(err)
	}
	status.Store(503)
	if err := c.CheckGCSHealth(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	// Any failed check is unhealthy, whatever the status; the classification is kept.
	status.Store(404)
	if err := c.CheckGCSHealth(context.Background()); !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("404: err = %v", err)
	}
	status.Store(401)
	if err := c.CheckGCSHealth(context.Background()); !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("401: err = %v", err)
	}
}

func TestServeProxyHealth(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/-/healthz" {
			t.Errorf("path %q", r.URL.Path)
		}
		w.WriteHeader(int(status.Load()))
		_, _ = io.WriteString(w, "success")
	}))
	defer srv.Close()
	tr, _ := NewDirectTransport(srv.URL, nil)
	c := NewServeProxyClient(tr)
	if err := c.CheckHealth(context.Background()); err != nil {
		t.Fatal(err)
	}
	status.Store(503)
	if err := c.CheckHealth(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	status.Store(404)
	if err := c.CheckHealth(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("404: err = %v", err)
	}
}

// A fake API server: the proxy transport must tell its own Status answers (Ray unreachable) from Ray's.
func TestProxyTransport(t *testing.T) {
	var gotPath, gotQuery, gotAuth, gotRayAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotQuery = r.URL.Path, r.URL.RawQuery
		gotAuth, gotRayAuth = r.Header.Get("Authorization"), r.Header.Get("x-ray-authorization")
		switch {
		case strings.Contains(r.URL.Path, "/services/gone:"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"services \"gone\" not found","reason":"NotFound","code":404}`)
		case strings.Contains(r.URL.Path, "/services/unrouted:"):
			// What kube-apiserver 1.37 answers while the Service lists no ready endpoint .
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(503)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no endpoints available for service \"unrouted\"","reason":"ServiceUnavailable","code":503}`)
		case strings.HasSuffix(r.URL.Path, "/api/jobs/unavailable"):
			// Ray's own 503 with the same words is Ray's, not the proxy's.
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(503)
			_, _ = io.WriteString(w, "no endpoints available for service")
		case strings.HasSuffix(r.URL.Path, "/api/jobs/missing"):
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(404)
			_, _ = io.WriteString(w, "Job missing does not exist")
		default:
			_, _ = io.WriteString(w, `{"applications":{}}`)
		}
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, BearerToken: "kube-token"}
	f, err := NewFactory(Options{UseKubernetesProxy: true, RESTConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Dashboard(Target{Namespace: "ns", HeadServiceName: "head-svc", AuthToken: "ray-token"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetServeDetails(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gotPath != "/api/v1/namespaces/ns/services/head-svc:dashboard/proxy/api/serve/applications/" || gotQuery != "api_type=declarative" {
		t.Errorf("request %s?%s", gotPath, gotQuery)
	}
	if gotAuth != "Bearer kube-token" || gotRayAuth != "Bearer ray-token" {
		t.Errorf("auth = %q, x-ray-authorization = %q", gotAuth, gotRayAuth)
	}
	if _, err := c.GetJob(context.Background(), "missing"); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) {
		t.Errorf("Ray's 404 through the proxy: %v, want ErrNotFound", err)
	}
	gone, _ := f.Dashboard(Target{Namespace: "ns", HeadServiceName: "gone"})
	_, err = gone.GetJob(context.Background(), "x")
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotFound) {
		t.Errorf("API server's 404: %v, want ErrUnavailable and not ErrNotFound", err)
	}
	if errors.Is(err, ErrNoEndpoints) {
		t.Errorf("API server's 404: %v is not ErrNoEndpoints", err)
	}
	unrouted, _ := f.Dashboard(Target{Namespace: "ns", HeadServiceName: "unrouted"})
	_, err = unrouted.GetServeDetails(context.Background())
	if !errors.Is(err, ErrNoEndpoints) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("no endpoints behind the Service: %v, want ErrNoEndpoints and ErrUnavailable", err)
	}
	if _, err := c.GetJob(context.Background(), "unavailable"); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoEndpoints) {
		t.Errorf("Ray's own 503: %v, want ErrUnavailable and not ErrNoEndpoints", err)
	}
	sp, err := f.ServeProxy(Target{Namespace: "ns", HeadServiceName: "head-svc", HeadPodName: "head-0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.CheckHealth(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gotPath != "/api/v1/namespaces/ns/pods/head-0:8000/proxy/-/healthz" {
		t.Errorf("serve health path %q", gotPath)
	}
}

func TestFactoryDirect(t *testing.T) {
	f, err := NewFactory(Options{ClusterDomain: "corp.example"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Dashboard(Target{Namespace: "ns", HeadServiceName: "rc-head-svc", DashboardPort: 9999})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Endpoint(), "http://rc-head-svc.ns.svc.corp.example:9999"; got != want {
		t.Errorf("endpoint %q, want %q", got, want)
	}
	f, _ = NewFactory(Options{})
	c, _ = f.Dashboard(Target{Namespace: "ns", HeadServiceName: "rc-head-svc"})
	if got, want := c.Endpoint(), "http://rc-head-svc.ns.svc.cluster.local:8265"; got != want {
		t.Errorf("endpoint %q, want %q", got, want)
	}
	sp, err := f.ServeProxy(Target{HeadPodIP: "10.0.0.7"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sp.Endpoint(), "http://10.0.0.7:8000"; got != want {
		t.Errorf("serve endpoint %q, want %q", got, want)
	}
	if _, err := NewFactory(Options{UseKubernetesProxy: true}); err == nil {
		t.Error("proxy without RESTConfig accepted")
	}
}

func TestDashboardPort(t *testing.T) {
	svc := func(ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{Ports: ports}}
	}
	cases := []struct {
		name string
		svc  *corev1.Service
		want int32
	}{
		{"nil", nil, 8265},
		{"no ports", svc(), 8265},
		{"default", svc(corev1.ServicePort{Name: "gcs", Port: 6379}, corev1.ServicePort{Name: "dashboard", Port: 8265}), 8265},
		{"custom", svc(corev1.ServicePort{Name: "client", Port: 10001}, corev1.ServicePort{Name: "dashboard", Port: 18265}), 18265},
		{"other names only", svc(corev1.ServicePort{Name: "dash", Port: 1234}), 8265},
	}
	for _, tc := range cases {
		if got := DashboardPort(tc.svc); got != tc.want {
			t.Errorf("%s: DashboardPort = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestRuntimeEnvFromYAML(t *testing.T) {
	env, err := RuntimeEnvFromYAML("pip:\n  - requests==2.26.0\nenv_vars:\n  A: \"1\"\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"pip": []any{"requests==2.26.0"}, "env_vars": map[string]any{"A": "1"}}
	if d := cmp.Diff(want, env); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if env, err := RuntimeEnvFromYAML(""); env != nil || err != nil {
		t.Errorf("empty: %v, %v", env, err)
	}
	if _, err := RuntimeEnvFromYAML("a: [b"); err == nil {
		t.Error("bad YAML accepted")
	}
}
