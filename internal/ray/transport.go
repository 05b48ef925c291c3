package ray

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// Transport sends requests to one Ray HTTP endpoint (the dashboard, or a Serve HTTP proxy).
// path is the escaped path on that endpoint, e.g. "/api/jobs/"; query may be nil.
// A non-nil error means no usable HTTP answer came from Ray: such errors match ErrUnavailable.
type Transport interface {
	Do(ctx context.Context, method, path string, query url.Values, body io.Reader, header http.Header) (*http.Response, error)
	// Endpoint describes where requests go, for messages.
	Endpoint() string
}

// DirectTransport talks HTTP straight to base, e.g. http://ray-head-svc.default.svc.cluster.local:8265.
type DirectTransport struct {
	base   *url.URL
	client *http.Client
}

// NewDirectTransport returns a transport to base. client may be nil: then a shared client that never goes through
// an HTTP(S)_PROXY from the environment (the head is an in-cluster address); calls are bounded by contexts.
// Redirects are never followed, whatever client's CheckRedirect says.
func NewDirectTransport(base string, client *http.Client) (*DirectTransport, error) {
	u, err := url.Parse(strings.TrimSuffix(base, "/"))
	if err != nil {
		return nil, fmt.Errorf("ray endpoint: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("ray endpoint %q: want http(s)://host:port", u.Redacted())
	}
	if client == nil {
		client = defaultDirectClient
	}
	return &DirectTransport{base: u, client: withoutRedirects(client)}, nil
}

func (t *DirectTransport) Endpoint() string { return t.base.String() }

func (t *DirectTransport) Do(ctx context.Context, method, path string, query url.Values, body io.Reader, header http.Header) (*http.Response, error) {
	resp, err := send(ctx, t.client, method, join(t.base, path, query), body, header)
	if err != nil {
		return nil, &transportError{method: method, path: path, cause: err}
	}
	return resp, nil
}

var defaultDirectClient = &http.Client{
	Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	},
	CheckRedirect: refuseRedirect,
}

// refuseRedirect makes an http.Client hand a 3xx answer back instead of following it. Ray never redirects; a head
// that does is trying to send the request elsewhere: with its body (a job's entrypoint and runtime_env), and,
// through the Kubernetes proxy, with the operator's own credentials, which net/http keeps on a redirect to the
// same host and which the API server's client round tripper adds to every request whatever its host.
func refuseRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// withoutRedirects is a copy of c that refuses redirects. The copy shares c's Transport, so connections are still
// pooled across the clients a Factory hands out.
func withoutRedirects(c *http.Client) *http.Client {
	cp := *c
	cp.CheckRedirect = refuseRedirect
	return &cp
}

// ProxyTransport reaches a Ray endpoint through a Kubernetes API server proxy subresource:
// <server>/api/v1/namespaces/<ns>/services/<svc>:<port>/proxy or .../pods/<pod>:<port>/proxy.
type ProxyTransport struct {
	base   *url.URL
	client *http.Client
}

// ServiceProxyPath is the API server path (escaped) that proxies to port (a port name or number) of a Service.
// Callers validate the names (see Factory); each is escaped as one path segment all the same.
func ServiceProxyPath(namespace, service, port string) string {
	return "/api/v1/namespaces/" + url.PathEscape(namespace) + "/services/" + url.PathEscape(service) + ":" + url.PathEscape(port) + "/proxy"
}

// PodProxyPath is the API server path (escaped) that proxies to port of a Pod.
func PodProxyPath(namespace, pod, port string) string {
	return "/api/v1/namespaces/" + url.PathEscape(namespace) + "/pods/" + url.PathEscape(pod) + ":" + url.PathEscape(port) + "/proxy"
}

// NewProxyTransport returns a transport through the API server described by cfg to proxyPath, an escaped path (see
// ServiceProxyPath, PodProxyPath). client must carry cfg's credentials (rest.HTTPClientFor(cfg)); it is shared
// between transports so connections are reused. Redirects are never followed, whatever client's CheckRedirect
// says: cfg's credentials go to the API server only.
func NewProxyTransport(cfg *rest.Config, client *http.Client, proxyPath string) (*ProxyTransport, error) {
	server, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes proxy: %w", err)
	}
	if !strings.HasPrefix(proxyPath, "/") || strings.ContainsAny(proxyPath, "?#") {
		return nil, fmt.Errorf("kubernetes proxy: %q is not an escaped absolute path", proxyPath)
	}
	unescaped, err := url.PathUnescape(proxyPath)
	if err != nil {
		return nil, fmt.Errorf("kubernetes proxy: %w", err)
	}
	base := *server
	base.RawPath = strings.TrimSuffix(server.EscapedPath(), "/") + proxyPath
	base.Path = strings.TrimSuffix(server.Path, "/") + unescaped
	base.RawQuery, base.Fragment = "", ""
	if client == nil {
		if client, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, fmt.Errorf("kubernetes proxy: %w", err)
		}
	}
	return &ProxyTransport{base: &base, client: withoutRedirects(client)}, nil
}

func (t *ProxyTransport) Endpoint() string { return t.base.String() }

func (t *ProxyTransport) Do(ctx context.Context, method, path string, query url.Values, body io.Reader, header http.Header) (*http.Response, error) {
	u := join(t.base, path, query)
	resp, err := send(ctx, t.client, method, u, body, header)
	if err != nil {
		return nil, &transportError{method: method, path: path, cause: err}
	}
	if resp.StatusCode < 400 {
		return resp, nil
	}
	// The API server answers for itself with a metav1.Status when it cannot proxy (no such Service or Pod, no
	// endpoint, upstream unreachable, forbidden). Ray never answers with one. Such an answer must not be mistaken
	// for Ray's own 404 ("job does not exist"): it means Ray cannot be reached.
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	if msg, ok := apiServerStatus(resp.Header, raw); ok {
		kind := ErrUnavailable
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(msg, noEndpointsMessage) {
			kind = ErrNoEndpoints
		}
		return nil, &APIError{Method: method, Path: path, URL: u, StatusCode: resp.StatusCode, Body: excerpt([]byte(msg)), FromProxy: true, kind: kind}
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	return resp, nil
}

// noEndpointsMessage begins the API server's answer when a proxied Service has no ready endpoint (503
// ServiceUnavailable, `no endpoints available for service "<name>"`).
const noEndpointsMessage = "no endpoints available for service"

// apiServerStatus reports whether body is a metav1.Status written by the API server, and its message.
func apiServerStatus(h http.Header, body []byte) (string, bool) {
	if !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		return "", false
	}
	var st struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Message    string `json:"message"`
		Reason     string `json:"reason"`
	}
	if json.Unmarshal(body, &st) != nil || st.Kind != "Status" || st.APIVersion != "v1" {
		return "", false
	}
	return strings.TrimSpace(st.Reason + ": " + st.Message), true
}

// join appends path, already escaped (callers escape IDs with url.PathEscape), to base.
func join(base *url.URL, path string, query url.Values) string {
	u := *base
	raw := strings.TrimSuffix(base.EscapedPath(), "/") + "/" + strings.TrimPrefix(path, "/")
	if p, err := url.PathUnescape(raw); err == nil {
		u.Path, u.RawPath = p, raw
	} else {
		u.Path, u.RawPath = raw, ""
	}
	u.RawQuery = ""
	if len(query) > 0 {
		u.RawQuery = query.Encode()
	}
	return u.String()
}

func send(ctx context.Context, c *http.Client, method, u string, body io.Reader, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	return c.Do(req)
}
