package ray

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

const (
	// DefaultDirectTimeout bounds one call over the direct transport (KubeRay uses 2s).
	DefaultDirectTimeout = 2 * time.Second
	// DefaultProxyTimeout bounds one call through the Kubernetes API server (KubeRay uses 10s).
	DefaultProxyTimeout = 10 * time.Second

	// AuthHeader carries the Ray cluster token. Ray also accepts "Authorization", but through the Kubernetes proxy
	// that header belongs to the API server.
	AuthHeader = "x-ray-authorization"

	// maxErrorBody is how much of an error answer is read to classify it (Ray's tracebacks end in the exception).
	maxErrorBody = 64 << 10
	// MaxResponseBytes bounds a JSON answer. The largest Ray answers the operator reads are the job list and the
	// Serve details of a big application (thousands of jobs or replicas fit in a few MiB); a head that sends more
	// gets ErrResponseTooLarge instead of costing the operator or the REST API server its memory.
	MaxResponseBytes = 8 << 20
)

// ErrResponseTooLarge means the head answered with more than the client reads (MaxResponseBytes).
var ErrResponseTooLarge = errors.New("response too large")

// DashboardClient calls the Jobs API, the Serve REST API and the GCS health check on a Ray head's dashboard.
type DashboardClient struct {
	t       Transport
	timeout time.Duration
	token   string
}

// ClientOption configures a DashboardClient or ServeProxyClient.
type ClientOption func(*clientConfig)

type clientConfig struct {
	timeout time.Duration
	token   string
}

// WithTimeout bounds each call (in addition to the caller's context). Zero or negative means DefaultDirectTimeout.
func WithTimeout(d time.Duration) ClientOption { return func(c *clientConfig) { c.timeout = d } }

// WithAuthToken sends "x-ray-authorization: Bearer <token>" on every dashboard call (Ray token authentication).
func WithAuthToken(token string) ClientOption { return func(c *clientConfig) { c.token = token } }

func buildConfig(opts []ClientOption) clientConfig {
	c := clientConfig{timeout: DefaultDirectTimeout}
	for _, o := range opts {
		o(&c)
	}
	if c.timeout <= 0 {
		c.timeout = DefaultDirectTimeout
	}
	return c
}

// NewDashboardClient returns a client for the dashboard reached through t.
func NewDashboardClient(t Transport, opts ...ClientOption) *DashboardClient {
	c := buildConfig(opts)
	return &DashboardClient{t: t, timeout: c.timeout, token: c.token}
}

// Endpoint describes where the client's requests go. It names internal addresses: for logs, not for callers.
func (c *DashboardClient) Endpoint() string { return c.t.Endpoint() }

// call sends one request and returns the body of a 2xx answer; other answers become *APIError.
func (c *DashboardClient) call(ctx context.Context, method, path string, query url.Values, in any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	body, h, err := c.request(in)
	if err != nil {
		return nil, err
	}
	return roundTrip(ctx, c.t, method, path, query, body, h)
}

// stream is call for an answer the caller reads itself (job logs): the 2xx response's body must be closed, and
// cancel called, by the caller.
func (c *DashboardClient) stream(ctx context.Context, method, path string) (*http.Response, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	_, h, _ := c.request(nil)
	resp, err := exchange(ctx, c.t, method, path, nil, nil, h)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return resp, cancel, nil
}

func (c *DashboardClient) request(in any) (io.Reader, http.Header, error) {
	h := http.Header{"Accept": {"application/json"}}
	if c.token != "" {
		h.Set(AuthHeader, "Bearer "+c.token)
	}
	if in == nil {
		return nil, h, nil
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, nil, err
	}
	h.Set("Content-Type", "application/json")
	return bytes.NewReader(b), h, nil
}

// exchange sends one request and returns the response of a 2xx answer, whose body the caller closes. A redirect
// is never followed (the transports' clients refuse them): it is an error, as is every other non-2xx answer.
func exchange(ctx context.Context, t Transport, method, path string, query url.Values, body io.Reader, h http.Header) (*http.Response, error) {
	resp, err := t.Do(ctx, method, path, query, body, h)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer func() { _ = resp.Body.Close() }()
	e := &APIError{Method: method, Path: path, URL: t.Endpoint() + path, StatusCode: resp.StatusCode}
	if resp.StatusCode < 400 {
		// Neither the Location nor the body is kept: a redirect from a head is refused, not reported on.
		e.kind = ErrRedirected
		return nil, e
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e.kind = classify(resp.StatusCode, string(raw))
	e.Body = excerpt(raw)
	return nil, e
}

func roundTrip(ctx context.Context, t Transport, method, path string, query url.Values, body io.Reader, h http.Header) ([]byte, error) {
	resp, err := exchange(ctx, t, method, path, query, body, h)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		// The answer started but did not finish (timeout, reset): the head may answer next time.
		return nil, &transportError{method: method, path: path, cause: err}
	}
	if len(raw) > MaxResponseBytes {
		return nil, fmt.Errorf("%s %s: %w: more than %d bytes", method, path, ErrResponseTooLarge, MaxResponseBytes)
	}
	return raw, nil
}

// decode unmarshals a 2xx body into out, reporting ErrMalformedResponse on failure.
func decode(method, path string, raw []byte, out any) error {
	if err := json.Unmarshal(raw, out); err != nil {
		return &decodeError{method: method, path: path, excerpt: excerpt(raw), cause: err}
	}
	return nil
}
