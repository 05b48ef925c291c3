package ray_test

import (
	"time"

	"testing"

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
	opt := ray.WithTimeout(defaultCallTimeout)
	runConformance(t, suite{name: "direct", dashboard: ray.NewDashboardClient(dash, opt), serve: ray.NewServeProxyClient(serve, opt), agent: head.AgentURL()})
}

// defaultCallTimeout bounds each call in the suites: the test machine is small and shared, and the head's first
// answers (a job submission starts a Python process) can take seconds.
const defaultCallTimeout = 30 * time.Second
