package ray_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"path/filepath"
	"testing"

	"github.com/manta-dev/manta/internal/ray"
)

// TestTokenAuth checks the client's x-ray-authorization header against a head started with Ray's token
// authentication (RAY_AUTH_MODE=token). It needs a head of its own.
func TestTokenAuth(t *testing.T) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	rayBin := filepath.Join(root, "bin", "ray-venv", "bin", "ray")
	h, err := startRayHead(rayBin, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	tr, err := ray.NewDirectTransport(h.DashboardURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	client := func(opts ...ray.ClientOption) *ray.DashboardClient {
		return ray.NewDashboardClient(tr, append(opts, ray.WithTimeout(defaultCallTimeout))...)
	}
	if _, err := client().ListJobs(t.Context()); !errors.Is(err, ray.ErrUnauthorized) {
		t.Errorf("without token: %v, want ErrUnauthorized", err)
	}
	if _, err := client(ray.WithAuthToken("wrong")).ListJobs(t.Context()); !errors.Is(err, ray.ErrUnauthorized) {
		t.Errorf("wrong token: %v, want ErrUnauthorized", err)
	}
	if _, err := client(ray.WithAuthToken(token)).ListJobs(t.Context()); err != nil {
		t.Errorf("with token: %v", err)
	}
	// The health check stays public, so probes work without the token.
	if err := client().CheckGCSHealth(t.Context()); err != nil {
		t.Errorf("gcs health without token: %v", err)
	}
}
