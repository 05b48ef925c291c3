package envtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	"google.golang.org/genproto/googleapis/rpc/code"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// testEnv is one envtest control plane with API servers in front of it: open (auth none) for handler tests, and
// guarded (auth kubernetes) for auth tests and Schemathesis.
type testEnv struct {
	*testutil.Env
	cfg     *rest.Config
	k       client.Client
	open    *httptest.Server
	guarded *httptest.Server
	ray     *fakeRay
	// logs holds the guarded server's request log lines, to check that no token is logged.
	logMu sync.Mutex
	logs  strings.Builder
}

func (e *testEnv) logText() string {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	return e.logs.String()
}

func newTestEnv(t *testing.T, cfg *rest.Config, k client.Client) *testEnv {
	e := &testEnv{Env: testutil.NewEnv(k), cfg: cfg, k: k, ray: newFakeRay(t)}
	dash := func(_ context.Context, rc *rayv1.RayCluster, svc *corev1.Service) (apiserver.Dashboard, error) {
		if rc.Status.Head.ServiceName == "unreachable" {
			tr, _ := ray.NewDirectTransport("http://127.0.0.1:1", nil)
			return ray.NewDashboardClient(tr, ray.WithTimeout(time.Second)), nil
		}
		tr, err := ray.NewDirectTransport(e.ray.srv.URL, nil)
		if err != nil {
			return nil, err
		}
		return ray.NewDashboardClient(tr), nil
	}
	for _, mode := range []apiserver.AuthMode{apiserver.AuthNone, apiserver.AuthKubernetes} {
		log := testr.NewWithOptions(t, testr.Options{Verbosity: 0})
		if mode == apiserver.AuthKubernetes {
			log = funcr.New(func(prefix, args string) {
				e.logMu.Lock()
				defer e.logMu.Unlock()
				e.logs.WriteString(prefix + args + "\n")
			}, funcr.Options{})
		}
		s, err := apiserver.New(cfg, apiserver.Options{Auth: mode, Log: log, Dashboard: dash})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		if mode == apiserver.AuthNone {
			e.open = srv
		} else {
			e.guarded = srv
		}
	}
	return e
}

type resp struct {
	code   int
	body   []byte
	header http.Header
}

func (r resp) decode(t *testing.T, out any) {
	t.Helper()
	if err := json.Unmarshal(r.body, out); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

func (r resp) status(t *testing.T) apiserver.Status {
	t.Helper()
	var s apiserver.Status
	r.decode(t, &s)
	return s
}

// call sends a request; body may be nil, a string (sent raw) or a value (sent as JSON).
func call(t *testing.T, base, method, path string, body any, token string) resp {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return callWith(t, base, method, path, body, h)
}

// callWith is call with the request headers given.
func callWith(t *testing.T, base, method, path string, body any, h http.Header) resp {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return resp{code: res.StatusCode, body: raw, header: res.Header}
}

func (e *testEnv) do(t *testing.T, method, path string, body any) resp {
	t.Helper()
	return call(t, e.open.URL, method, path, body, "")
}

// mustOK fails unless the answer is 200, and decodes it into out (if not nil).
func mustOK(t *testing.T, r resp, out any) {
	t.Helper()
	if r.code != http.StatusOK {
		t.Fatalf("want 200, got %d: %s", r.code, r.body)
	}
	if out != nil {
		r.decode(t, out)
	}
}

// mustFail checks an error answer: HTTP status, gRPC code, and (when given) that details name the field.
func mustFail(t *testing.T, r resp, httpStatus int, c code.Code, field string) apiserver.Status {
	t.Helper()
	if r.code != httpStatus {
		t.Fatalf("want %d, got %d: %s", httpStatus, r.code, r.body)
	}
	s := r.status(t)
	if s.Code != int(c) {
		t.Errorf("want code %d, got %d (%s)", c, s.Code, s.Message)
	}
	if s.Message == "" {
		t.Errorf("empty message")
	}
	if field != "" {
		var fields []string
		for _, d := range s.Violations() {
			fields = append(fields, d.Field)
		}
		if !slices.Contains(fields, field) {
			t.Errorf("want details naming %q, got %v (%s)", field, fields, s.Message)
		}
		if !strings.Contains(s.Message, field) {
			t.Errorf("message does not name %q: %s", field, s.Message)
		}
	}
	return s
}

// fakeRay is a Ray dashboard Jobs API on loopback, enough for the submission endpoints.
type fakeRay struct {
	srv  *httptest.Server
	mu   sync.Mutex
	jobs map[string]*ray.JobInfo
	seq  int
}

func newFakeRay(t *testing.T) *fakeRay {
	f := &fakeRay{jobs: map[string]*ray.JobInfo{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/jobs/", func(w http.ResponseWriter, r *http.Request) {
		var req ray.JobSubmitRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		defer f.mu.Unlock()
		if req.SubmissionID == "" {
			f.seq++
			req.SubmissionID = fmt.Sprintf("raysubmit_%d", f.seq)
		}
		if _, ok := f.jobs[req.SubmissionID]; ok {
			http.Error(w, "Job with submission_id "+req.SubmissionID+" already exists. Please use a different submission_id.", http.StatusInternalServerError)
			return
		}
		env := map[string]any{}
		for k, v := range req.RuntimeEnv {
			env[k] = v
		}
		f.jobs[req.SubmissionID] = &ray.JobInfo{Type: "SUBMISSION", SubmissionID: req.SubmissionID, JobID: "job-" + req.SubmissionID,
			Entrypoint: req.Entrypoint, Status: ray.JobStatusRunning, Metadata: req.Metadata, RuntimeEnv: env, StartTime: 1700000000000}
		_ = json.NewEncoder(w).Encode(map[string]string{"job_id": req.SubmissionID, "submission_id": req.SubmissionID})
	})
	mux.HandleFunc("GET /api/jobs/", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := []ray.JobInfo{}
		for _, k := range slices.Sorted(maps.Keys(f.jobs)) {
			out = append(out, *f.jobs[k])
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	get := func(w http.ResponseWriter, r *http.Request) *ray.JobInfo {
		j, ok := f.jobs[r.PathValue("id")]
		if !ok {
			http.Error(w, "Job "+r.PathValue("id")+" does not exist", http.StatusNotFound)
		}
		return j
	}
	mux.HandleFunc("GET /api/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if j := get(w, r); j != nil {
			_ = json.NewEncoder(w).Encode(j)
		}
	})
	mux.HandleFunc("GET /api/jobs/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if j := get(w, r); j != nil {
			_ = json.NewEncoder(w).Encode(map[string]string{"logs": "hello from " + j.Entrypoint + "\n"})
		}
	})
	mux.HandleFunc("POST /api/jobs/{id}/stop", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if j := get(w, r); j != nil {
			stopped := !j.Status.IsTerminal()
			j.Status, j.EndTime = ray.JobStatusStopped, 1700000001000
			_ = json.NewEncoder(w).Encode(map[string]bool{"stopped": stopped})
		}
	})
	mux.HandleFunc("DELETE /api/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if j := get(w, r); j != nil {
			if !j.Status.IsTerminal() {
				http.Error(w, "Attempted to delete job in a non-terminal state", http.StatusBadRequest)
				return
			}
			delete(f.jobs, j.SubmissionID)
			_ = json.NewEncoder(w).Encode(map[string]bool{"deleted": true})
		}
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}
