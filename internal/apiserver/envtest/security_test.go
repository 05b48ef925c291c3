package envtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"runtime"
	"strings"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/code"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/testutil"
)

// securityEnv is a REST API server built with Options.Dashboard nil, so job submissions go through internal/ray's
// Factory in --use-kubernetes-proxy mode, as deployed. Its API server is a front that plays services/proxy (a
// real kube-apiserver refuses to proxy to the loopback address where the test's fake head is) and passes every
// other request to envtest's kube-apiserver. The front checks the server's token on every request, as the API
// server would.
type securityEnv struct {
	srv  *httptest.Server
	k    client.Client
	mu   sync.Mutex
	head http.HandlerFunc
	// stolen records every request that reached the redirect target.
	stolen []string
	target *httptest.Server
}

const securityToken = "manta-apiserver-sa-token"

func newSecurityEnv(t *testing.T) *securityEnv {
	envCfg, k := testutil.StartEnvtest(t)
	e := &securityEnv{k: k}
	e.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.stolen = append(e.stolen, fmt.Sprintf("%s %s authorization=%q body=%q", r.Method, r.URL, r.Header.Get("Authorization"), body))
		e.mu.Unlock()
		_, _ = io.WriteString(w, `{"submission_id":"stolen","job_id":"stolen","logs":"stolen","stopped":true,"deleted":true}`)
	}))
	t.Cleanup(e.target.Close)
	envURL, _, err := rest.DefaultServerUrlFor(envCfg)
	if err != nil {
		t.Fatal(err)
	}
	envTransport, err := rest.TransportFor(envCfg)
	if err != nil {
		t.Fatal(err)
	}
	kube := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(envURL)
			pr.Out.Header.Del("Authorization")
		},
		Transport: envTransport,
	}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+securityToken {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if strings.Contains(r.URL.Path, "/proxy/") {
			e.mu.Lock()
			h := e.head
			e.mu.Unlock()
			h(w, r)
			return
		}
		kube.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	s, err := apiserver.New(&rest.Config{Host: front.URL, BearerToken: securityToken}, apiserver.Options{Auth: apiserver.AuthNone, UseKubernetesProxy: true})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(s.Handler())
	t.Cleanup(e.srv.Close)
	return e
}

func (e *securityEnv) setHead(h http.HandlerFunc) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.head = h
}

func (e *securityEnv) received() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.stolen...)
}

func TestSecurityJobSubmissions(t *testing.T) {
	e := newSecurityEnv(t)
	k := e.k
	ctx := context.Background()
	const ns = "tenant"
	if err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	if err := k.Create(ctx, rc); err != nil {
		t.Fatal(err)
	}
	base := "/apis/v1/namespaces/" + ns + "/jobsubmissions/rc"
	calls := []struct{ method, path string }{
		{"POST", base}, {"GET", base}, {"GET", base + "/job-1"}, {"GET", base + "/log/job-1"},
		{"POST", base + "/job-1"}, {"DELETE", base + "/job-1"},
	}
	submission := apiserver.RayJobSubmission{Entrypoint: "python secret.py", SubmissionID: "job-1"}
	body := func(method, path string) any {
		if method == "POST" && path == base {
			return submission
		}
		return nil
	}

	t.Run("redirects are refused", func(t *testing.T) {
		for _, status := range []int{http.StatusFound, http.StatusTemporaryRedirect} {
			e.setHead(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				http.Redirect(w, r, e.target.URL+"/steal", status)
			})
			for _, c := range calls {
				r := call(t, e.srv.URL, c.method, c.path, body(c.method, c.path), "")
				if r.code < 400 {
					t.Errorf("%d: %s %s answered %d: %s", status, c.method, c.path, r.code, r.body)
				}
				if strings.Contains(string(r.body), e.target.URL) || strings.Contains(string(r.body), "/api/v1/namespaces/") {
					t.Errorf("%d: %s %s: the answer names an internal address: %s", status, c.method, c.path, r.body)
				}
			}
		}
		if got := e.received(); len(got) > 0 {
			t.Errorf("the redirect target received %d requests:\n%s", len(got), strings.Join(got, "\n"))
		}
	})

	t.Run("head service names from the cluster are checked", func(t *testing.T) {
		var reached int
		e.setHead(func(w http.ResponseWriter, r *http.Request) {
			e.mu.Lock()
			reached++
			e.mu.Unlock()
			http.NotFound(w, r)
		})
		defer func() {
			rc.Status.Head.ServiceName = ""
			if err := k.Status().Update(ctx, rc); err != nil {
				t.Error(err)
			}
		}()
		// The schema refuses such a name in the spec; the status is written by whoever may update it.
		for _, name := range []string{"192.0.2.2?", "host#", "evil@x", "x:80", "a/b"} {
			rc.Status.Head.ServiceName = name
			if err := k.Status().Update(ctx, rc); err != nil {
				t.Fatal(err)
			}
			for _, c := range calls {
				mustFail(t, call(t, e.srv.URL, c.method, c.path, body(c.method, c.path), ""), http.StatusBadRequest, code.Code_FAILED_PRECONDITION, "status.head.serviceName")
			}
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if reached > 0 {
			t.Errorf("%d requests reached a head through the API server", reached)
		}
	})

	t.Run("a 60 MiB log costs a bounded amount of memory", func(t *testing.T) {
		const size = 60 << 20
		chunk := strings.Repeat(`step ok \"quoted\"\n`, 4096)
		e.setHead(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `{"logs":"`)
			for n := 0; n < size; n += len(chunk) {
				if _, err := io.WriteString(w, chunk); err != nil {
					return
				}
			}
			_, _ = io.WriteString(w, `ValueError: the real error"}`)
		})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := call(t, e.srv.URL, "GET", base+"/log/job-1", nil, "")
		runtime.ReadMemStats(&after)
		var reply apiserver.GetJobLogReply
		mustOK(t, r, &reply)
		// Everything in this process counts: the REST server, the front, and this test's client.
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("a 60 MiB log through the REST API allocated %.1f MiB; the answer is %d bytes", float64(alloc)/(1<<20), len(r.body))
		const bound = 32 << 20
		if alloc > bound {
			t.Errorf("allocated %d MiB, want at most %d MiB", alloc>>20, bound>>20)
		}
		if !strings.HasPrefix(reply.Log, "[... ") || !strings.HasSuffix(reply.Log, "ValueError: the real error") {
			t.Errorf("log is not the truncated tail: starts %q, ends %q", reply.Log[:min(60, len(reply.Log))], reply.Log[max(0, len(reply.Log)-60):])
		}
		if len(r.body) > 4<<20 {
			t.Errorf("the answer is %d bytes", len(r.body))
		}
	})
}
