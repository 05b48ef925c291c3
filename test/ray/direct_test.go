package ray_test

import (
	"testing"
	"time"

	"github.com/manta-dev/manta/internal/ray"
)

// TestDirect runs the conformance suite straight to the head over loopback.
func TestDirect(t *testing.T) {
	dash, err := ray.NewDirectTransport(head.DashboardURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	serve, err := ray.NewDirectTransport(head.ServeURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The shared test machine is slow; a job submission starts a Python process on the head.
	opt := ray.WithTimeout(30 * time.Second)
	runConformance(t, suite{name: "direct", dashboard: ray.NewDashboardClient(dash, opt), serve: ray.NewServeProxyClient(serve, opt)})
}
