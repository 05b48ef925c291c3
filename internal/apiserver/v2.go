package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
)

// The v2 resource API (KubeRay's current default): /apis/ray.io/v1/namespaces/{ns}/{rayclusters|rayjobs|rayservices}
// and /{name}, /apis/events.k8s.io/v1/namespaces/{ns}/events (KubeRay v1.7's events path) and, as KubeRay v1.5 had
// it, /api/v1/namespaces/{ns}/events, passed to the Kubernetes API server. Under Kubernetes auth every
// request goes with the caller's own token (after this server's TokenReview, which names the caller in logs), so
// Kubernetes authorises and admits it exactly as if the caller had sent it: RBAC, the CRD schema and Manta's CEL
// rules apply, and Kubernetes' answers (Status bodies, 201, 422 with causes, Warning headers) come back unchanged.
// Errors this server raises itself (no token, body too large, timeout) are JSON errors as in v1.

// v2Resources are the ray.io/v1 resources the v2 API serves, with the names its operations use.
var v2Resources = []struct{ plural, kind string }{
	{"rayclusters", "RayCluster"},
	{"rayjobs", "RayJob"},
	{"rayservices", "RayService"},
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

// proxyV2 forwards the request. token is the caller's (empty under auth mode none, where this server's own
// identity is used, as for v1). query rewrites the query before forwarding (nil keeps it).
func (s *Server) proxyV2(w http.ResponseWriter, r *http.Request, token string, query func(url.Values) url.Values) *apiError {
	q := r.URL.Query()
	if w := q.Get("watch"); w != "" && w != "false" && w != "0" {
		return invalid(FieldViolation{Field: "watch", Description: "watching is not offered through the REST API (its requests have a deadline); use the Kubernetes API"})
	}
	var body []byte
	if r.Body != nil && r.Method != http.MethodGet {
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
	if query != nil {
		q = query(q)
	}
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
			pr.Out.URL.Path = strings.TrimSuffix(p.base.Path, "/") + r.URL.Path
			pr.Out.URL.RawPath = ""
			pr.Out.URL.RawQuery = q.Encode()
			pr.Out.Host = ""
			dropForwardedHeaders(pr.Out.Header)
			if token != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+token)
			}
			pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			pr.Out.ContentLength = int64(len(body))
			if len(body) == 0 {
				pr.Out.Body = http.NoBody
			}
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) { proxyErr = err },
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
	proxy := func(s *Server, w http.ResponseWriter, r *http.Request) *apiError {
		tok, _ := bearerToken(r)
		if s.auth == nil {
			tok = ""
		}
		return s.proxyV2(w, r, tok, nil)
	}
	const tag = "RayResourcesV2"
	var rs []*route
	for _, res := range v2Resources {
		coll, item := ns+res.plural, ns+res.plural+"/{name}"
		obj := "a " + res.kind
		rs = append(rs,
			&route{method: http.MethodGet, pattern: coll, op: "V2List" + res.kind + "s", tag: tag, v2: true,
				summary: "List the " + res.kind + "s of a namespace (Kubernetes list; labelSelector, fieldSelector, limit, continue).",
				resp:    v2ObjectList{}, proxy: proxy},
			&route{method: http.MethodPost, pattern: coll, op: "V2Create" + res.kind, tag: tag, v2: true,
				summary: "Create " + obj + " (Kubernetes create; dryRun, fieldManager, fieldValidation).",
				body:    &v2Object{}, resp: v2Object{}, proxy: proxy},
			&route{method: http.MethodGet, pattern: item, op: "V2Get" + res.kind, tag: tag, v2: true,
				summary: "Get " + obj + ".", resp: v2Object{}, proxy: proxy},
			&route{method: http.MethodPut, pattern: item, op: "V2Replace" + res.kind, tag: tag, v2: true,
				summary: "Replace " + obj + " (Kubernetes update; metadata.resourceVersion guards against lost updates).",
				body:    &v2Object{}, resp: v2Object{}, proxy: proxy},
			&route{method: http.MethodPatch, pattern: item, op: "V2Patch" + res.kind, tag: tag, v2: true,
				summary: "Patch " + obj + " (application/merge-patch+json, application/json-patch+json or application/apply-patch+yaml).",
				body:    &v2Object{}, resp: v2Object{}, proxy: proxy},
			&route{method: http.MethodDelete, pattern: item, op: "V2Delete" + res.kind, tag: tag, v2: true,
				summary: "Delete " + obj + " (Kubernetes delete; propagationPolicy, dryRun).",
				resp:    v2Object{}, proxy: proxy},
		)
	}
	events := func(field string) func(*Server, http.ResponseWriter, *http.Request) *apiError {
		return func(s *Server, w http.ResponseWriter, r *http.Request) *apiError {
			tok, _ := bearerToken(r)
			if s.auth == nil {
				tok = ""
			}
			return s.proxyV2(w, r, tok, rayEventsOnly(field))
		}
	}
	rs = append(rs,
		&route{method: http.MethodGet, pattern: "/apis/events.k8s.io/v1/namespaces/{namespace}/events", op: "V2ListEventsV1", tag: tag, v2: true,
			summary: "List the events about ray.io/v1 objects in a namespace (an events.k8s.io/v1 EventList, KubeRay v1.7's path).",
			resp:    v2ObjectList{}, proxy: events("regarding.apiVersion")},
		&route{method: http.MethodGet, pattern: "/api/v1/namespaces/{namespace}/events", op: "V2ListEvents", tag: tag, v2: true,
			summary: "List the events about ray.io/v1 objects in a namespace (a core/v1 EventList, KubeRay v1.5's path).",
			resp:    v2ObjectList{}, proxy: events("involvedObject.apiVersion")})
	return rs
}
