package ray_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestHistoryCollectorRayEvents: the Ray env Manta gives a head whose cluster has historyServerOptions makes a real
// Ray 2.52 head publish its events to the collector's endpoint. The head runs with exactly the Ray event settings
// of the built head pod; only the collector's address, localhost:8084 in the pod, becomes a receiver of the test's
// (a free port: 8084 may be taken on a shared machine), which plays the collector. A job with a task then shows up
// there as node, driver job and task events.
func TestHistoryCollectorRayEvents(t *testing.T) {
	c := testutil.MakeRayCluster("ns", "rc").Obj()
	c.Spec.HistoryServerOptions = &rayv1.HistoryServerOptions{CollectorOptions: &rayv1.CollectorOptions{
		Image: "collector", Env: []corev1.EnvVar{{Name: "STORAGE_BACKEND", Value: "S3"}, {Name: "S3_REGION", Value: "r"}},
	}}
	pod := clusterbuild.HeadPod(c, clusterbuild.PodOptions{})

	var mu sync.Mutex
	seen := map[string]int{}
	var paths []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var events []map[string]any
		_ = json.Unmarshal(body, &events)
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		for _, e := range events {
			for _, k := range []string{"eventType", "event_type"} {
				if s, ok := e[k].(string); ok {
					seen[s]++
				}
			}
		}
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(collector.Close)

	const inPod = "http://localhost:" + clusterbuild.CollectorEventsPort
	var env []string
	for _, e := range pod.Spec.Containers[clusterbuild.RayContainerIndex].Env {
		if !strings.HasPrefix(e.Name, "RAY_enable_") && !strings.HasPrefix(e.Name, "RAY_DASHBOARD_AGGREGATOR_AGENT_") {
			continue
		}
		v := e.Value
		if e.Name == "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR" {
			if !strings.HasPrefix(v, inPod+"/") {
				t.Fatalf("%s=%q: not the collector's port %s", e.Name, v, clusterbuild.CollectorEventsPort)
			}
			v = collector.URL + strings.TrimPrefix(v, inPod)
		}
		env = append(env, e.Name+"="+v)
	}
	if len(env) != 5 {
		t.Fatalf("Ray event env of the head pod: %v", env)
	}
	h, err := startRayHead(filepath.Join(root, "bin", "ray-venv", "bin", "ray"), "", env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	tr, err := ray.NewDirectTransport(h.DashboardURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dash := ray.NewDashboardClient(tr, ray.WithTimeout(defaultCallTimeout))
	id, err := dash.SubmitJob(t.Context(), ray.JobSubmitRequest{
		Entrypoint: `python -c "import ray; ray.init(); print(ray.get(ray.remote(lambda: 'collected').remote()))"`,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"NODE_DEFINITION_EVENT", "DRIVER_JOB_DEFINITION_EVENT", "TASK_DEFINITION_EVENT", "TASK_LIFECYCLE_EVENT"}
	testutil.Eventually(t, 4*time.Minute, "the job's events at the collector", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range want {
			if seen[w] == 0 {
				info, _ := dash.GetJob(t.Context(), id)
				status := ""
				if info != nil {
					status = string(info.Status)
				}
				return false, "job " + status + "; events so far: " + strings.Join(keys(seen), ",")
			}
		}
		return true, ""
	})
	mu.Lock()
	defer mu.Unlock()
	for _, p := range paths {
		if p != "POST /v1/events" {
			t.Errorf("collector called with %s, want POST /v1/events", p)
		}
	}
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
