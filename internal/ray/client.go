package ray

import (
	"bytes"
	"context"
	"encoding/json"
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

	maxErrorBody = 64 << 10
	maxBody      = 64 << 20
)

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

// Endpoint describes where the client's requests go.
func (c *DashboardClient) Endpoint() string { return c.t.Endpoint() }

// call sends one request and returns the body of a 2xx answer; other answers become *APIError.
func (c *DashboardClient) call(ctx context.Context, method, path string, query url.Values, in any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	h := http.Header{"Accept": {"application/json"}}
	if c.token != "" {
		h.Set(AuthHeader, "Bearer "+c.token)
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
		h.Set("Content-Type", "application/json")
	}
	return roundTrip(ctx, c.t, method, path, query, body, h)
}

func roundTrip(ctx context.Context, t Transport, method, path string, query url.Values, body io.Reader, h http.Header) ([]byte, error) {
	resp, err := t.Do(ctx, method, path, query, body, h)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	where := t.Endpoint() + path
	if resp.StatusCode >= 300 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, &APIError{Method: method, URL: where, StatusCode: resp.StatusCode, Body: string(raw), kind: classify(resp.StatusCode, string(raw))}
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		// The answer started but did not finish (timeout, reset): the head may answer next time.
		return nil, &transportError{method: method, url: where, cause: err}
	}
	return raw, nil
}

// decode unmarshals a 2xx body into out, reporting ErrMalformedResponse on failure.
func decode(method, where string, raw []byte, out any) error {
	if err := json.Unmarshal(raw, out); err != nil {
		return &decodeError{method: method, url: where, body: string(raw), cause: err}
	}
	return nil
}
