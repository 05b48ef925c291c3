package ray_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

// TestFake runs the conformance suite against internal/testutil/fakeray, the fake head the oracle and other tests
// use: the same assertions as TestDirect makes of a real Ray 2.52 head, so the fake cannot drift from it. Its jobs
// run their entrypoints for real (with the Ray venv's Python), and it has the real head's resources.
func TestFake(t *testing.T) {
	venvBin := filepath.Join(root, "bin", "ray-venv", "bin")
	h := fakeray.New(fakeray.Options{
		Resources: map[string]float64{"CPU": 2, "manta_test": 4, "manta_gate_fake": 1},
		Run:       fakeray.Exec([]string{"PATH=" + venvBin + string(os.PathListSeparator) + os.Getenv("PATH")}),
		// The suite's application (testdata/hello_serve.py) greets with its suite's name.
		RouteReply: func(app string, _ *http.Request) string {
			return "hello from manta (" + strings.TrimPrefix(app, "hello-") + ")"
		},
		ServeDeploying: time.Second,
	})
	srv := fakeray.Start(h)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	dash, err := ray.NewDirectTransport(srv.Dashboard.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	serve, err := ray.NewDirectTransport(srv.ServeProxy.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	opt := ray.WithTimeout(defaultCallTimeout)
	runConformance(t, suite{name: "fake", dashboard: ray.NewDashboardClient(dash, opt), serve: ray.NewServeProxyClient(serve, opt), agent: srv.Agent.URL})
}
