package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// apiFaults are the shares of API server requests the proxy spoils.
type apiFaults struct {
	// error500 and error429 of all requests, error409 of writes: answered by the proxy, never forwarded.
	error500, error429, error409 float64
	// lostAfterCommit of creates are forwarded, applied by the API server, and answered 504 Timeout: the
	// client cannot tell whether its write happened.
	lostAfterCommit float64
	// delayed requests wait up to maxDelay before being forwarded.
	delayed  float64
	maxDelay time.Duration
	// Every watch is cut after a random time up to maxWatch.
	maxWatch time.Duration
}

// faultProxy is a reverse proxy between an operator and the kube-apiserver that injects apiFaults. It speaks
// plain HTTP on loopback and adds the admin credentials towards the API server. It also stands in for the API
// server's proxy to Ray heads: services/<svc>:dashboard/proxy/… and pods/<pod>:<port>/proxy/… are answered by
// the fake Ray (as if the API server had proxied them to the head), never faulted by the proxy itself.
type faultProxy struct {
	srv    *httptest.Server
	rp     *httputil.ReverseProxy
	faults apiFaults
	ray    *fakeRay

	mu       sync.Mutex
	rng      *rand.Rand
	injected map[string]int
	requests int
	// writes counts the requests that are not reads, by URL path.
	writes map[string]int
	// lastRefused is when a pod create of the owner (keyed as in writes) was last refused.
	lastRefused map[string]time.Time
}

// startClusterProxy is the proxy every operator process reaches the cluster and the Ray heads through, injecting
// no API fault.
func startClusterProxy(t *testing.T, cfg *rest.Config, fray *fakeRay) *faultProxy {
	return startFaultProxy(t, cfg, 0, apiFaults{}, fray)
}

func startFaultProxy(t *testing.T, cfg *rest.Config, seed uint64, faults apiFaults, fray *fakeRay) *faultProxy {
	t.Helper()
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{faults: faults, ray: fray, rng: rand.New(rand.NewPCG(seed, 409)), injected: map[string]int{}, writes: map[string]int{},
		lastRefused: map[string]time.Time{}}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport:     rt,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

// kubeconfig writes a kubeconfig that leads to the proxy.
func (p *faultProxy) kubeconfig(t *testing.T) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: p.srv.URL}
	kc.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	kc.CurrentContext = "proxy"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func (p *faultProxy) count(kind string) {
	p.mu.Lock()
	p.injected[kind]++
	p.mu.Unlock()
}

// summary returns the requests seen and the faults injected, by kind.
func (p *faultProxy) summary() (int, map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.injected {
		out[k] = v
	}
	return p.requests, out
}

// takeWrites returns the writes counted since the last call, by URL path (pod creates by owner, and their refused
// tries again under the key with refusedSuffix), and starts counting afresh.
func (p *faultProxy) takeWrites() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.writes
	p.writes = map[string]int{}
	return w
}

// rayProxyPath matches the API server's proxy subresources of Services and Pods: namespace, kind, name, port,
// and the path on the target.
var rayProxyPath = regexp.MustCompile(`^/api/v1/namespaces/([^/]+)/(services|pods)/([^/:]+):([^/]+)/proxy(/.*)?$`)

// serveRay answers a proxy subresource request from the fake Ray, with the Host a direct request to the head
// Service would carry (how the fake tells heads apart); it reports false for any other request.
func (p *faultProxy) serveRay(w http.ResponseWriter, r *http.Request) bool {
	m := rayProxyPath.FindStringSubmatch(r.URL.Path)
	if m == nil || p.ray == nil {
		return false
	}
	ns, kind, name, rest := m[1], m[2], m[3], m[5]
	if rest == "" {
		rest = "/"
	}
	out := r.Clone(r.Context())
	out.URL.Path, out.URL.RawPath = rest, ""
	out.Host = name + "." + ns + ".svc.cluster.local"
	if kind == "pods" {
		out.Host = name // a pod's Serve proxy: the fake answers its health check whatever the host
	}
	p.ray.serve(w, out)
	return true
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.serveRay(w, r) {
		return
	}
	q := r.URL.Query()
	p.mu.Lock()
	p.requests++
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		key := writeKey(r)
		p.writes[key]++
		if strings.Contains(key, "/pods#") {
			// A pod create's answer is noted too: refused tries repeating are what a create loop looks like. The
			// creates one reconcile sends together (a batch in parallel, the workers right after the head) are one
			// try: refusals less than refusedTryGap after the one before are not counted again.
			sw := &statusWriter{ResponseWriter: w}
			defer func() {
				if sw.code >= 400 {
					now := time.Now()
					p.mu.Lock()
					if now.Sub(p.lastRefused[key]) > refusedTryGap {
						p.writes[key+refusedSuffix]++
					}
					p.lastRefused[key] = now
					p.mu.Unlock()
				}
			}()
			w = sw
		}
	}
	roll, frac := p.rng.Float64(), p.rng.Float64()
	p.mu.Unlock()
	if (q.Get("watch") == "true" || q.Get("watch") == "1") && p.faults.maxWatch > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), time.Duration(float64(p.faults.maxWatch)*(0.2+0.8*frac)))
		defer cancel()
		// ReverseProxy aborts the response with a panic (http.ErrAbortHandler) when the cut ends the copy.
		defer func() {
			if ctx.Err() == context.DeadlineExceeded {
				p.count("watch cut")
			}
		}()
		p.rp.ServeHTTP(w, r.WithContext(ctx))
		return
	}
	f := p.faults
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	switch {
	case roll < f.error500:
		p.count("500")
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "injected by the fault proxy")
	case roll < f.error500+f.error429:
		p.count("429")
		w.Header().Set("Retry-After", "1")
		writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "injected by the fault proxy")
	case write && roll < f.error500+f.error429+f.error409:
		p.count("409")
		writeStatus(w, http.StatusConflict, metav1.StatusReasonConflict, "injected by the fault proxy: the object has been modified")
	case r.Method == http.MethodPost && roll < f.error500+f.error429+f.error409+f.lostAfterCommit:
		rec := httptest.NewRecorder()
		p.rp.ServeHTTP(rec, r)
		if rec.Code >= 300 {
			copyResponse(w, rec)
			return
		}
		p.count("create applied, answer lost (504)")
		writeStatus(w, http.StatusGatewayTimeout, metav1.StatusReasonTimeout, "injected by the fault proxy: the write may have happened")
	case roll > 1-f.delayed:
		p.count("delayed")
		select {
		case <-time.After(time.Duration(frac * float64(f.maxDelay))):
		case <-r.Context().Done():
			return
		}
		p.rp.ServeHTTP(w, r)
	default:
		p.rp.ServeHTTP(w, r)
	}
}

// refusedSuffix marks, among the counted writes, the tries at pod creates the API server (or the proxy) refused.
const refusedSuffix = " refused tries"

// refusedTryGap separates two refused tries of one owner's pod creates (the operator's backoff starts at 1 s).
const refusedTryGap = 250 * time.Millisecond

// statusWriter notes the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeKey names what a write is about: its URL path, and for a pod create also the RayCluster or ImagePullJob it
// is for, so creates for different owners (which share a path) are told apart.
func writeKey(r *http.Request) string {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/pods") || r.Body == nil {
		return r.URL.Path
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return r.URL.Path
	}
	// Built-in types travel as protobuf from controller-runtime's client.
	obj, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	pod, ok := obj.(*corev1.Pod)
	if err != nil || !ok {
		return r.URL.Path
	}
	return r.URL.Path + "#" + pod.Labels["ray.io/cluster"] + pod.Labels["manta.dev/image-pull-job-uid"]
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg})
}

func copyResponse(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k + ": ")
		b.WriteString(strconv.Itoa(m[k]))
	}
	return b.String()
}
