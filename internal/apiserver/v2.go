package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
)

// The v2 resource API (KubeRay's current default): /apis/ray.io/v1/[namespaces/{ns}/]{rayclusters|rayjobs|
// rayservices|raycronjobs}, /{name} and /{name}/status, with watch and deletecollection,
// /apis/events.k8s.io/v1/namespaces/{ns}/events (KubeRay v1.7's events path) and, as KubeRay v1.5 had it,
// /api/v1/namespaces/{ns}/events, passed to the Kubernetes API server; and the services proxy to Ray's own
// dashboards (v2_proxy.go). Under Kubernetes auth every
// request goes with the caller's own token (after this server's TokenReview, which names the caller in logs), so
// Kubernetes authorises and admits it exactly as if the caller had sent it: RBAC, the CRD schema and Manta's CEL
// rules apply, and Kubernetes' answers (Status bodies, 201, 422 with causes, Warning headers) come back unchanged.
// Errors this server raises itself (no token, body too large, timeout) are JSON errors as in v1.

// v2Resources are the ray.io/v1 resources the v2 API serves, with the names its operations use.
// templates marks those whose create and replace apply compute templates (KubeRay's v2 does it for these three).
var v2Resources = []struct {
	plural, kind string
	templates    bool
}{
	{"rayclusters", "RayCluster", true},
	{"rayjobs", "RayJob", true},
	{"rayservices", "RayService", true},
	{"raycronjobs", "RayCronJob", false},
}

// v2Object is the OpenAPI stand-in for a ray.io/v1 object: its schema is the CRD's, served by Kubernetes.
type v2Object struct{}

// v2ObjectList stands in for a ray.io/v1 list (or an EventList).
type v2ObjectList struct{}

// kubeProxy forwards requests to the Kubernetes API server.
type kubeProxy struct {
	base *url.URL
	// callerTransport carries no credentials of its own (only the API server's CA), so the caller's token is the
	// only identity Kubernetes sees. ownTransport carries this server's credentials, for auth mode none.
	callerTransport, ownTransport http.RoundTripper
}

func newKubeProxy(cfg *rest.Config) (*kubeProxy, error) {
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes API server URL: %w", err)
	}
	caller, err := rest.TransportFor(rest.AnonymousClientConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("kubernetes transport: %w", err)
	}
	own, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes transport: %w", err)
	}
	return &kubeProxy{base: base, callerTransport: caller, ownTransport: own}, nil
}

// dropForwardedHeaders removes request headers the proxy never forwards: credentials are set by the proxy, and
// impersonation is not something a REST API caller can ask this server to do.
func dropForwardedHeaders(h http.Header) {
	h.Del("Authorization")
	h.Del("Cookie")
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "impersonate-") {
			h.Del(k)
		}
	}
}

// maxWatchSeconds bounds a watch, as kube-apiserver's --min-request-timeout does by default: clients (informers,
// KubeRay's and Manta's dashboards) list again and go on watching from the resourceVersion they hold.
const maxWatchSeconds = 1800

// isWatch tells a watch request as Kubernetes reads ?watch= (anything but empty, 0, f or false is true).
func isWatch(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	v, ok := r.URL.Query()["watch"]
	if !ok || len(v) == 0 {
		return false
	}
	switch strings.ToLower(v[0]) {
	case "", "0", "f", "false":
		return false
	}
	return true
}

// forward is how proxyV2 changes a request on its way to Kubernetes.
type forward struct {
	// query rewrites the query (nil keeps it).
	query func(url.Values) url.Values
	// body rewrites the body (nil keeps it) and returns its content type.
	body func(r *http.Request, body []byte) ([]byte, string, *apiError)
	// path is the Kubernetes path to forward to (empty: the request's own).
	path string
	// stream flushes each write as Kubernetes sends it, for at most maxWatchSeconds (a followed log).
	stream bool
}

// proxyV2 forwards the request with the caller's token (info(r).token; under auth none, with this server's own
// identity, as for v1). Watches stream: each event is flushed as Kubernetes sends it, for at most maxWatchSeconds.
func (s *Server) proxyV2(w http.ResponseWriter, r *http.Request, f forward) *apiError {
	q := r.URL.Query()
	watch := isWatch(r)
	n := maxWatchSeconds
	if watch {
		if v := q.Get("timeoutSeconds"); v != "" {
			t, err := strconv.Atoi(v)
			if err != nil || t < 0 {
				return invalid(FieldViolation{Field: "timeoutSeconds", Description: "must be a non-negative integer (seconds)"})
			}
			if t > 0 && t < n {
				n = t
			}
		}
		q.Set("timeoutSeconds", strconv.Itoa(n))
	}
	if watch || f.stream {
		// The server's WriteTimeout is for ordinary answers; a watch writes for as long as it lasts. Without a real
		// connection (a test's recorder) there is no deadline to move.
		err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Duration(n)*time.Second + writeTimeout))
		if err != nil && !errors.Is(err, http.ErrNotSupported) {
			return internalError(http.StatusInternalServerError, codeInternal, err, "internal error")
		}
	}
	var body []byte
	if r.Body != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
		var err error
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return newError(http.StatusRequestEntityTooLarge, codeInvalidArgument, "request body is larger than %d bytes", maxBodyBytes)
			}
			return invalid(FieldViolation{Field: "body", Description: "could not read the request body: " + err.Error()})
		}
	}
	contentType := r.Header.Get("Content-Type")
	if f.body != nil && len(body) > 0 {
		var e *apiError
		if body, contentType, e = f.body(r, body); e != nil {
			return e
		}
	}
	if f.query != nil {
		q = f.query(q)
	}
	path := r.URL.Path
	if f.path != "" {
		path = f.path
	}
	token := info(r).token
	p := s.kube
	transport := p.ownTransport
	if token != "" {
		transport = p.callerTransport
	}
	var proxyErr error
	rp := &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = p.base.Scheme, p.base.Host
			pr.Out.URL.Path = strings.TrimSuffix(p.base.Path, "/") + path
			pr.Out.URL.RawPath = ""
			pr.Out.URL.RawQuery = q.Encode()
			pr.Out.Host = ""
			dropForwardedHeaders(pr.Out.Header)
			if token != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+token)
			}
			if contentType != "" {
				pr.Out.Header.Set("Content-Type", contentType)
			}
			pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			pr.Out.ContentLength = int64(len(body))
			if len(body) == 0 {
				pr.Out.Body = http.NoBody
			}
		},
		// CORS is this server's answer (--cors-allow-origin): headers Kubernetes (its own --cors-allowed-origins) or
		// a Ray dashboard behind the services proxy add would contradict it, and browsers refuse doubled ones.
		ModifyResponse: func(res *http.Response) error {
			for k := range res.Header {
				if strings.HasPrefix(strings.ToLower(k), "access-control-") {
					res.Header.Del(k)
				}
			}
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) { proxyErr = err },
		ErrorLog:     log.New(logWriter{s.opts.Log.V(1)}, "", 0),
	}
	if watch || f.stream {
		rp.FlushInterval = -1
	}
	rp.ServeHTTP(w, r)
	if proxyErr == nil {
		return nil
	}
	if errors.Is(proxyErr, context.DeadlineExceeded) || errors.Is(proxyErr, context.Canceled) {
		return newError(http.StatusServiceUnavailable, codeUnavailable, "kubernetes did not answer in time, retry later")
	}
	return internalError(http.StatusBadGateway, codeUnavailable, proxyErr, "could not reach the Kubernetes API server")
}

// logWriter passes what ReverseProxy logs (a stream cut short when its client leaves) to the server's log.
type logWriter struct{ log logr.Logger }

func (l logWriter) Write(b []byte) (int, error) {
	l.log.Info(strings.TrimSpace(string(b)))
	return len(b), nil
}

// rayEventsOnly narrows an events list to events about ray.io/v1 objects, as KubeRay's v2 events paths do: sel is
// ANDed with every field selector the caller gave. field is involvedObject.apiVersion for core/v1 events,
// regarding.apiVersion for events.k8s.io/v1.
func rayEventsOnly(field string) func(url.Values) url.Values {
	return func(q url.Values) url.Values {
		q.Set("fieldSelector", strings.Join(append(q["fieldSelector"], field+"=ray.io/v1"), ","))
		return q
	}
}

// v2Routes are the v2 operations, for the route table.
func v2Routes() []*route {
	const ns = "/apis/ray.io/v1/namespaces/{namespace}/"
	plain := func(s *Server, w http.ResponseWriter, r *http.Request) *apiError { return s.proxyV2(w, r, forward{}) }
	const tag = "RayResourcesV2"
	var rs []*route
	for _, res := range v2Resources {
		coll, item := ns+res.plural, ns+res.plural+"/{name}"
		obj, objs := "a "+res.kind, res.kind+"s"
		write := plain
		if res.templates {
			plural := res.plural
			write = func(s *Server, w http.ResponseWriter, r *http.Request) *apiError {
				return s.proxyV2(w, r, forward{body: s.computeTemplates(plural)})
			}
		}
		rs = append(rs,
			&route{method: http.MethodGet, pattern: coll, op: "V2List" + objs, tag: tag, v2: true,
				summary: "List the " + objs + " of a namespace (Kubernetes list; labelSelector, fieldSelector, limit, continue), or with watch=true stream their changes (Kubernetes watch; resourceVersion, timeoutSeconds up to 1800).",
				resp:    v2ObjectList{}, proxy: plain},
			&route{method: http.MethodGet, pattern: "/apis/ray.io/v1/" + res.plural, op: "V2ListAll" + objs, tag: tag, v2: true,
				summary: "List (or watch) the " + objs + " of all namespaces: Kubernetes answers only a caller whose RBAC allows it at the cluster scope.",
				resp:    v2ObjectList{}, proxy: plain},
			&route{method: http.MethodPost, pattern: coll, op: "V2Create" + res.kind, tag: tag, v2: true,
				summary: "Create " + obj + " (Kubernetes create; dryRun, fieldManager, fieldValidation)." + templateNote(res.templates),
				body:    &v2Object{}, resp: v2Object{}, proxy: write},
			&route{method: http.MethodDelete, pattern: coll, op: "V2DeleteCollection" + objs, tag: tag, v2: true,
				summary: "Delete the " + objs + " of a namespace that match labelSelector and fieldSelector (Kubernetes deletecollection).",
				resp:    v2ObjectList{}, proxy: plain},
			&route{method: http.MethodGet, pattern: item, op: "V2Get" + res.kind, tag: tag, v2: true,
				summary: "Get " + obj + ".", resp: v2Object{}, proxy: plain},
			&route{method: http.MethodPut, pattern: item, op: "V2Replace" + res.kind, tag: tag, v2: true,
				summary: "Replace " + obj + " (Kubernetes update; metadata.resourceVersion guards against lost updates)." + templateNote(res.templates),
				body:    &v2Object{}, resp: v2Object{}, proxy: write},
			&route{method: http.MethodPatch, pattern: item, op: "V2Patch" + res.kind, tag: tag, v2: true,
				summary: "Patch " + obj + " (application/merge-patch+json, application/json-patch+json or application/apply-patch+yaml).",
				body:    &v2Object{}, resp: v2Object{}, proxy: plain},
			&route{method: http.MethodDelete, pattern: item, op: "V2Delete" + res.kind, tag: tag, v2: true,
				summary: "Delete " + obj + " (Kubernetes delete; propagationPolicy, dryRun).",
				resp:    v2Object{}, proxy: plain},
			&route{method: http.MethodGet, pattern: item + "/status", op: "V2Get" + res.kind + "Status", tag: tag, v2: true,
				summary: "Get " + obj + " through its status subresource.", resp: v2Object{}, proxy: plain},
			&route{method: http.MethodPut, pattern: item + "/status", op: "V2Replace" + res.kind + "Status", tag: tag, v2: true,
				summary: "Replace the status of " + obj + " (Kubernetes' status subresource: only status changes).",
				body:    &v2Object{}, resp: v2Object{}, proxy: plain},
			&route{method: http.MethodPatch, pattern: item + "/status", op: "V2Patch" + res.kind + "Status", tag: tag, v2: true,
				summary: "Patch the status of " + obj + " (Kubernetes' status subresource).",
				body:    &v2Object{}, resp: v2Object{}, proxy: plain},
		)
	}
	events := func(field string) func(*Server, http.ResponseWriter, *http.Request) *apiError {
		return func(s *Server, w http.ResponseWriter, r *http.Request) *apiError {
			return s.proxyV2(w, r, forward{query: rayEventsOnly(field)})
		}
	}
	rs = append(rs,
		&route{method: http.MethodGet, pattern: "/apis/events.k8s.io/v1/namespaces/{namespace}/events", op: "V2ListEventsV1", tag: tag, v2: true,
			summary: "List the events about ray.io/v1 objects in a namespace (an events.k8s.io/v1 EventList, KubeRay v1.7's path).",
			resp:    v2ObjectList{}, proxy: events("regarding.apiVersion")},
		&route{method: http.MethodGet, pattern: "/api/v1/namespaces/{namespace}/events", op: "V2ListEvents", tag: tag, v2: true,
			summary: "List the events about ray.io/v1 objects in a namespace (a core/v1 EventList, KubeRay v1.5's path).",
			resp:    v2ObjectList{}, proxy: events("involvedObject.apiVersion")})
	return append(rs, serviceProxyRoutes()...)
}

func templateNote(templates bool) string {
	if !templates {
		return ""
	}
	return " A computeTemplate named in a head or worker group is applied first, as KubeRay's v2 does."
}
