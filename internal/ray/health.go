package ray

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// CheckGCSHealth asks the dashboard whether the head's GCS is alive (GET /api/gcs_healthz answers "success").
// A nil error means healthy; otherwise the error matches ErrUnavailable.
func (c *DashboardClient) CheckGCSHealth(ctx context.Context) error {
	raw, err := c.call(ctx, http.MethodGet, "/api/gcs_healthz", nil, nil)
	if err != nil {
		return fmt.Errorf("gcs health: %w", unhealthy(err))
	}
	if !strings.Contains(string(raw), "success") {
		return fmt.Errorf("gcs health: %w: answered %q", ErrUnavailable, excerpt(raw))
	}
	return nil
}

// ServeProxyClient calls a Serve HTTP proxy (port 8000 on the head pod).
type ServeProxyClient struct {
	t   Transport
	cfg clientConfig
}

// NewServeProxyClient returns a client for the Serve HTTP proxy reached through t.
func NewServeProxyClient(t Transport, opts ...ClientOption) *ServeProxyClient {
	return &ServeProxyClient{t: t, cfg: buildConfig(opts)}
}

// Endpoint describes where the client's requests go.
func (c *ServeProxyClient) Endpoint() string { return c.t.Endpoint() }

// CheckHealth calls GET /-/healthz: 200 means the proxy is ready to serve. Otherwise the error matches
// ErrUnavailable (a proxy that is draining answers 503).
func (c *ServeProxyClient) CheckHealth(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	if _, err := roundTrip(ctx, c.t, http.MethodGet, "/-/healthz", nil, nil, nil); err != nil {
		return fmt.Errorf("serve proxy health: %w", unhealthy(err))
	}
	return nil
}

// unhealthy makes every failed health check match ErrUnavailable, as callers are promised: a 404 (an older Ray
// without the route, or another server on the port) or a 401 means unhealthy just as a 503 does. The original
// classification still matches too (errors.Is(err, ErrUnauthorized)).
func unhealthy(err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// Get sends GET path to the proxy (an application route) and returns the body of a 2xx answer.
func (c *ServeProxyClient) Get(ctx context.Context, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	return roundTrip(ctx, c.t, http.MethodGet, path, nil, nil, nil)
}
