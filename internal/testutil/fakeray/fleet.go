package fakeray

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/ray"
)

// agentPort is the dashboard agent's port (rayStartParams dashboard-agent-listen-port).
const agentPort = "52365"

// Fleet is a fake Ray head per head Service, each made with the Fleet's Options the first time it is reached. It
// is an http.RoundTripper that hands each request to the head its address names (<head-svc>.<ns>.svc.<domain>:<port>
// for the dashboard and, on 52365, its agent; a head pod's IP for its Serve proxy), and a ray.ClientFactory whose
// clients are the operator's own (a ray.Factory over that transport): what a controller sends and reads takes Ray's
// paths, JSON and status codes, in process, with no network. Faults on the way to a head are set on its Remote.
type Fleet struct {
	opts    Options
	factory *ray.Factory

	mu    sync.Mutex
	heads map[string]*Remote // by "<head-svc>.<ns>"
	// pods maps a pod IP to its head and its name, as ServeProxyFor learnt them.
	pods map[string]podRef
}

type podRef struct {
	head *Remote
	name string
}

// Remote is one head of a Fleet and the way to it: the faults set here happen between the operator and the head.
type Remote struct {
	*Head
	dashboard, agent, serveProxy http.Handler

	mu   sync.Mutex
	down bool
	// refusals counts the connections refused while down.
	refusals int
	// fail503 is how many of the next dashboard requests a 503 answers; dropSubmit loses the next submission's answer.
	fail503    int
	dropSubmit bool
	proxyDown  map[string]bool // by pod name
}

var (
	_ ray.ClientFactory = (*Fleet)(nil)
	_ http.RoundTripper = (*Fleet)(nil)
)

// NewFleet returns a fleet whose heads have opts.
func NewFleet(opts Options) *Fleet {
	f := &Fleet{opts: opts, heads: map[string]*Remote{}, pods: map[string]podRef{}}
	factory, err := ray.NewFactory(ray.Options{HTTPClient: &http.Client{Transport: f}})
	if err != nil {
		panic(fmt.Sprintf("fakeray: the fleet's ray factory: %v", err)) // its options are constant
	}
	f.factory = factory
	return f
}

// Close closes every head.
func (f *Fleet) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.heads {
		r.Close()
	}
}

// Head is the head behind Service service in namespace, made now if it was not yet.
func (f *Fleet) Head(namespace, service string) *Remote {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.headLocked(namespace, service)
}

// Cluster is the head of RayCluster name in namespace (behind clusterbuild.HeadServiceName's Service).
func (f *Fleet) Cluster(namespace, name string) *Remote {
	return f.Head(namespace, clusterbuild.HeadServiceName(&rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}))
}

// Heads are every head made so far.
func (f *Fleet) Heads() []*Remote {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*Remote, 0, len(f.heads))
	for _, r := range f.heads {
		out = append(out, r)
	}
	return out
}

func (f *Fleet) headLocked(namespace, service string) *Remote {
	key := service + "." + namespace
	r := f.heads[key]
	if r == nil {
		h := New(f.opts)
		r = &Remote{Head: h, dashboard: h.Dashboard(), agent: h.Agent(), serveProxy: h.ServeProxy(), proxyDown: map[string]bool{}}
		f.heads[key] = r
	}
	return r
}

// DashboardFor is the operator's dashboard client of t's head.
func (f *Fleet) DashboardFor(t ray.Target) (ray.Dashboard, error) { return f.factory.DashboardFor(t) }

// ServeProxyFor is the operator's Serve proxy client of t's head pod; the fleet learns which head the pod's IP is
// of.
func (f *Fleet) ServeProxyFor(t ray.Target) (ray.ServeProxy, error) {
	if t.HeadPodIP != "" && t.Namespace != "" && t.HeadServiceName != "" {
		f.mu.Lock()
		f.pods[t.HeadPodIP] = podRef{head: f.headLocked(t.Namespace, t.HeadServiceName), name: t.HeadPodName}
		f.mu.Unlock()
	}
	return f.factory.ServeProxyFor(t)
}

// InClusterDashboardURL is the operator's (ray.Factory's).
func (f *Fleet) InClusterDashboardURL(t ray.Target) string { return f.factory.InClusterDashboardURL(t) }

// RoundTrip hands req to the head its host names; an address no head is at refuses the connection.
func (f *Fleet) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer func() { _ = req.Body.Close() }()
	}
	host, port := req.URL.Hostname(), req.URL.Port()
	f.mu.Lock()
	ref, isPod := f.pods[host]
	if !isPod {
		if svc, ns, ok := serviceHost(host); ok {
			ref.head = f.headLocked(ns, svc)
		}
	}
	f.mu.Unlock()
	if ref.head == nil {
		return nil, refused(host)
	}
	return ref.head.roundTrip(req, port, isPod, ref.name)
}

// serviceHost splits <svc>.<ns>.svc.<domain>.
func serviceHost(host string) (svc, ns string, ok bool) {
	parts := strings.SplitN(host, ".", 4)
	if len(parts) < 3 || parts[2] != "svc" || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

func refused(host string) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.ParseIP(host)}, Err: syscall.ECONNREFUSED}
}

// SetDown makes the head unreachable (every connection to it, its pods' Serve proxies included, refused) or
// reachable again.
func (r *Remote) SetDown(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = down
}

// Refusals is how many connections to the head were refused while it was down.
func (r *Remote) Refusals() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refusals
}

// Fail503 makes the next n dashboard requests be answered 503, as a head that cannot serve them yet answers.
func (r *Remote) Fail503(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail503 = n
}

// DropNextSubmitAnswer makes the next job submission reach the head, which accepts it, and its answer never come
// back: the operator's call times out.
func (r *Remote) DropNextSubmitAnswer() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropSubmit = true
}

// SetProxyDown makes the Serve proxy on pod refuse connections, or answer again.
func (r *Remote) SetProxyDown(pod string, down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.proxyDown[pod] = down
}

func (r *Remote) roundTrip(req *http.Request, port string, toPod bool, pod string) (*http.Response, error) {
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	handler := r.dashboard
	switch {
	case port == agentPort:
		handler = r.agent
	case toPod:
		handler = r.serveProxy
	}
	r.mu.Lock()
	down := r.down || (toPod && r.proxyDown[pod])
	fail := !down && !toPod && r.fail503 > 0
	if fail {
		r.fail503--
	}
	if down {
		r.refusals++
	}
	drop := !down && !fail && !toPod && r.dropSubmit && req.Method == http.MethodPost && req.URL.Path == "/api/jobs/"
	if drop {
		r.dropSubmit = false
	}
	r.mu.Unlock()
	rec := httptest.NewRecorder()
	switch {
	case down:
		return nil, refused(req.URL.Hostname())
	case fail:
		text(rec, http.StatusServiceUnavailable, "503: Service Unavailable")
	default:
		handler.ServeHTTP(rec, req)
	}
	if drop {
		return nil, context.DeadlineExceeded
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}
