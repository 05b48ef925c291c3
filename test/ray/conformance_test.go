package ray_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/manta-dev/manta/internal/ray"
)

// suite is what the conformance tests run against: the same calls, whatever the transport.
type suite struct {
	name      string // distinguishes submission IDs and Serve applications between runs on the shared head
	dashboard *ray.DashboardClient
	serve     *ray.ServeProxyClient
	// agent is the dashboard agent's base URL, where the pods' probes check the raylet; empty where the suite
	// cannot reach it (through the API server's Service proxy only the dashboard and Serve ports are published).
	agent string
	// servePort is the Serve proxy's port on the head the suite calls; 0 means the package's head.
	servePort int
}

func runConformance(t *testing.T, s suite) {
	t.Run("GCSHealth", func(t *testing.T) {
		if err := s.dashboard.CheckGCSHealth(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
	if s.agent != "" {
		t.Run("RayletHealth", func(t *testing.T) { testRayletHealth(t, s.agent) })
	}
	t.Run("Jobs", func(t *testing.T) {
		t.Run("Succeeded", func(t *testing.T) { t.Parallel(); testJobSucceeded(t, s) })
		t.Run("Failed", func(t *testing.T) { t.Parallel(); testJobFailed(t, s) })
		t.Run("Stopped", func(t *testing.T) { t.Parallel(); testJobStopped(t, s) })
		t.Run("Unknown", func(t *testing.T) { t.Parallel(); testJobUnknown(t, s) })
		t.Run("EntrypointResources", func(t *testing.T) { t.Parallel(); testJobEntrypointResources(t, s) })
	})
	t.Run("Serve", func(t *testing.T) { testServe(t, s) })
}

// testRayletHealth checks the raylet health endpoint KubeRay's probes (and Manta's) call on every Ray pod.
func testRayletHealth(t *testing.T, agent string) {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, agent+"/api/local_raylet_healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "success" {
		t.Errorf("raylet health: %s %q, want 200 \"success\"", resp.Status, body)
	}
}

func (s suite) id(what string) string {
	return fmt.Sprintf("manta-%s-%s-%d", s.name, what, time.Now().UnixNano())
}

// waitJob polls until the job reaches one of want, failing fast when it reaches another terminal state.
func waitJob(t *testing.T, c *ray.DashboardClient, id string, timeout time.Duration, want ...ray.JobStatus) *ray.JobInfo {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last *ray.JobInfo
	for time.Now().Before(deadline) {
		info, err := c.GetJob(t.Context(), id)
		if err != nil && !errors.Is(err, ray.ErrUnavailable) {
			t.Fatalf("get job %s: %v", id, err)
		}
		if err == nil {
			last = info
			for _, w := range want {
				if info.Status == w {
					return info
				}
			}
			if info.Status.IsTerminal() {
				logs, _ := c.GetJobLogs(t.Context(), id)
				t.Fatalf("job %s ended %s (message %q), want %v; logs:\n%s", id, info.Status, info.Message, want, logs)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("job %s not %v after %v; last %+v", id, want, timeout, last)
	return nil
}

const jobTimeout = 3 * time.Minute

func testJobSucceeded(t *testing.T, s suite) {
	c := s.dashboard
	id := s.id("ok")
	greeting := "hello from " + s.name
	req := ray.JobSubmitRequest{
		SubmissionID:        id,
		Entrypoint:          `python -c "import os; print('greeting=' + os.environ['MANTA_GREETING'])"`,
		RuntimeEnv:          map[string]any{"env_vars": map[string]any{"MANTA_GREETING": greeting}},
		Metadata:            map[string]string{"manta.dev/suite": s.name},
		EntrypointNumCPUs:   0.5,
		EntrypointResources: map[string]float64{"manta_test": 1},
	}
	got, err := c.SubmitJob(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got != id {
		t.Errorf("submit returned %q, want %q", got, id)
	}
	info := waitJob(t, c, id, jobTimeout, ray.JobStatusSucceeded)
	if info.SubmissionID != id || info.Type != "SUBMISSION" || info.Entrypoint != req.Entrypoint {
		t.Errorf("job info %+v", info)
	}
	if info.Metadata["manta.dev/suite"] != s.name {
		t.Errorf("metadata %v", info.Metadata)
	}
	if info.StartTime == 0 || info.EndTime < info.StartTime {
		t.Errorf("start %d, end %d", info.StartTime, info.EndTime)
	}
	if info.DriverExitCode == nil || *info.DriverExitCode != 0 {
		t.Errorf("driver exit code %v", info.DriverExitCode)
	}
	logs, err := c.GetJobLogs(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, "greeting="+greeting) {
		t.Errorf("logs %q do not contain the greeting", logs)
	}

	jobs, err := c.ListJobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, j := range jobs {
		found = found || j.SubmissionID == id && j.Status == ray.JobStatusSucceeded
	}
	if !found {
		t.Errorf("list of %d jobs lacks %s", len(jobs), id)
	}

	// The same submission_id again: recognised, and nothing new runs.
	_, err = c.SubmitJob(t.Context(), req)
	if !errors.Is(err, ray.ErrAlreadySubmitted) {
		t.Fatalf("resubmit: %v, want ErrAlreadySubmitted", err)
	}
	var apiErr *ray.APIError
	if errors.As(err, &apiErr) {
		t.Logf("Ray answered a repeated submission_id with %d", apiErr.StatusCode)
	}
	again, err := c.GetJob(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if again.Status != ray.JobStatusSucceeded || again.StartTime != info.StartTime {
		t.Errorf("after resubmit: %s started %d, was SUCCEEDED started %d", again.Status, again.StartTime, info.StartTime)
	}

	deleteGone(t, c, id)
}

// deleteGone deletes finished job id and checks that its info and its logs are then gone (ErrNotFound).
//
// Ray 2.52's JobManager keeps monitoring a job after it ends, until its next ping (1 s period) finds the supervisor
// actor dead. Its error path reads the job's status first, and a record deleted in between reads as "not terminal",
// so it writes a new one: FAILED, entrypoint "Entrypoint not found.", "Job supervisor actor died" (job_manager.py
// _monitor_job_internal, then JobInfoStorageClient.put_status). Nothing a client can see tells the monitor has
// ended, so such a record (Ray's, not the job's) is deleted again, at most twice; the monitor writes it only once.
func deleteGone(t *testing.T, c *ray.DashboardClient, id string) {
	t.Helper()
	for try := 0; ; try++ {
		deleted, err := c.DeleteJob(t.Context(), id)
		if err != nil || !deleted {
			t.Fatalf("delete: %v, %v", deleted, err)
		}
		back, err := c.GetJob(t.Context(), id)
		if err == nil && try < 2 && writtenBack(back) {
			t.Logf("get after delete: Ray's job monitor wrote the job back (%s, %q); deleting again", back.Status, back.Message)
			continue
		}
		if !errors.Is(err, ray.ErrNotFound) {
			t.Fatalf("get after delete: %+v, %v; want ErrNotFound", back, err)
		}
		if _, err := c.GetJobLogs(t.Context(), id); errors.Is(err, ray.ErrNotFound) {
			return
		} else if back, gerr := c.GetJob(t.Context(), id); gerr == nil && try < 2 && writtenBack(back) {
			t.Logf("logs after delete: Ray's job monitor wrote the job back (%s, %q); deleting again", back.Status, back.Message)
			continue
		} else {
			t.Fatalf("logs after delete: %v, want ErrNotFound", err)
		}
	}
}

// writtenBack tells the record Ray's job monitor writes for a job deleted before it stopped monitoring it.
func writtenBack(info *ray.JobInfo) bool {
	return info != nil && info.Status == ray.JobStatusFailed && info.Entrypoint == "Entrypoint not found." &&
		strings.Contains(info.Message, "Job supervisor actor died")
}

func testJobFailed(t *testing.T, s suite) {
	c := s.dashboard
	id := s.id("fail")
	_, err := c.SubmitJob(t.Context(), ray.JobSubmitRequest{
		SubmissionID: id,
		Entrypoint:   `python -c "import sys; print('about to fail', flush=True); sys.exit('manta-boom')"`,
	})
	if err != nil {
		t.Fatal(err)
	}
	info := waitJob(t, c, id, jobTimeout, ray.JobStatusFailed)
	if !strings.Contains(info.Message, "manta-boom") {
		t.Errorf("message %q does not carry the error", info.Message)
	}
	if info.DriverExitCode == nil || *info.DriverExitCode != 1 {
		t.Errorf("driver exit code %v, want 1", info.DriverExitCode)
	}
	logs, err := c.GetJobLogs(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, "about to fail") || !strings.Contains(logs, "manta-boom") {
		t.Errorf("logs %q", logs)
	}
	if _, err := c.DeleteJob(t.Context(), id); err != nil {
		t.Error(err)
	}
}

func testJobStopped(t *testing.T, s suite) {
	c := s.dashboard
	id := s.id("stop")
	_, err := c.SubmitJob(t.Context(), ray.JobSubmitRequest{
		SubmissionID: id,
		Entrypoint:   `python -c "import time; print('sleeping', flush=True); time.sleep(600)"`,
	})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, id, jobTimeout, ray.JobStatusRunning)

	// Ray refuses to delete a job that is still running; that is neither "not found" nor an outage.
	if _, err := c.DeleteJob(t.Context(), id); !errors.Is(err, ray.ErrJobNotTerminal) || errors.Is(err, ray.ErrNotFound) || errors.Is(err, ray.ErrUnavailable) {
		t.Errorf("delete of a running job: %v, want ErrJobNotTerminal", err)
	}
	stopped, err := c.StopJob(t.Context(), id)
	if err != nil || !stopped {
		t.Fatalf("stop: %v, %v", stopped, err)
	}
	waitJob(t, c, id, jobTimeout, ray.JobStatusStopped)
	// Ray answers stopped=true while the job's supervisor actor is alive, and the actor can outlive the STOPPED
	// status by a moment (seen through the proxy on a loaded machine): a second stop must come to say false.
	for deadline := time.Now().Add(time.Minute); ; {
		stopped, err := c.StopJob(t.Context(), id)
		if err != nil {
			t.Fatalf("second stop: %v", err)
		}
		if !stopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second stop: still stopped=true a minute after the job was STOPPED; want false")
		}
		time.Sleep(500 * time.Millisecond)
	}
	deleteGone(t, c, id)
}

// Ray's job info does not echo entrypoint resources, so show they reach Ray: the head has one manta_gate_<suite>;
// while a job holds it, a second job asking for it waits PENDING, and runs once the first is stopped.
func testJobEntrypointResources(t *testing.T, s suite) {
	c := s.dashboard
	gate := map[string]float64{"manta_gate_" + s.name: 1}
	holder, waiter := s.id("holder"), s.id("waiter")
	if _, err := c.SubmitJob(t.Context(), ray.JobSubmitRequest{
		SubmissionID:        holder,
		Entrypoint:          `python -c "import time; time.sleep(600)"`,
		EntrypointResources: gate,
	}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, holder, jobTimeout, ray.JobStatusRunning)
	if _, err := c.SubmitJob(t.Context(), ray.JobSubmitRequest{
		SubmissionID:        waiter,
		Entrypoint:          `python -c "print('got the gate')"`,
		EntrypointNumCPUs:   0.1,
		EntrypointResources: gate,
	}); err != nil {
		t.Fatal(err)
	}
	// Barrier: a job submitted after the waiter, asking for what is free, runs to the end; Ray has then placed a
	// request that came later than the waiter's, so the waiter is PENDING for the gate, not for lack of a look.
	probe := s.id("probe")
	if _, err := c.SubmitJob(t.Context(), ray.JobSubmitRequest{
		SubmissionID:      probe,
		Entrypoint:        `python -c "print('no gate')"`,
		EntrypointNumCPUs: 0.1,
	}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, probe, jobTimeout, ray.JobStatusSucceeded)
	info, err := c.GetJob(t.Context(), waiter)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != ray.JobStatusPending {
		t.Errorf("job waiting for the gate is %s (%s), want PENDING", info.Status, info.Message)
	}
	if _, err := c.StopJob(t.Context(), holder); err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, holder, jobTimeout, ray.JobStatusStopped)
	waitJob(t, c, waiter, jobTimeout, ray.JobStatusSucceeded)
	for _, id := range []string{holder, waiter} {
		if _, err := c.DeleteJob(t.Context(), id); err != nil {
			t.Error(err)
		}
	}
}

func testJobUnknown(t *testing.T, s suite) {
	c := s.dashboard
	id := s.id("nonexistent")
	if _, err := c.GetJob(t.Context(), id); !errors.Is(err, ray.ErrNotFound) {
		t.Errorf("get: %v", err)
	}
	if _, err := c.GetJobLogs(t.Context(), id); !errors.Is(err, ray.ErrNotFound) {
		t.Errorf("logs: %v", err)
	}
	if _, err := c.StopJob(t.Context(), id); !errors.Is(err, ray.ErrNotFound) {
		t.Errorf("stop: %v", err)
	}
	if _, err := c.DeleteJob(t.Context(), id); !errors.Is(err, ray.ErrNotFound) {
		t.Errorf("delete: %v", err)
	}
}

func serveConfig(s suite) string {
	port := s.servePort
	if port == 0 {
		port = head.ServePort
	}
	return fmt.Sprintf(`
proxy_location: HeadOnly
http_options:
  host: 127.0.0.1
  port: %d
applications:
  - name: hello-%[2]s
    route_prefix: /hello-%[2]s
    import_path: hello_serve:app
    runtime_env:
      env_vars:
        PYTHONPATH: %[3]q
        MANTA_SUITE: %[2]s
    deployments:
      - name: Hello
        num_replicas: 1
`, port, s.name, dataDir)
}

func testServe(t *testing.T, s suite) {
	c := s.dashboard
	appName := "hello-" + s.name
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	// The first PUT starts Serve's controller inside the request and can outlast one call's timeout on a loaded
	// machine; the PUT is idempotent, so it is retried while the head is unavailable, as a controller requeues.
	for {
		err := c.DeployServeConfigV2(ctx, serveConfig(s))
		if err == nil {
			break
		}
		if !errors.Is(err, ray.ErrUnavailable) || ctx.Err() != nil {
			t.Fatalf("deploy serve applications: %v", err)
		}
		t.Logf("deploy serve applications: %v; retrying", err)
		time.Sleep(2 * time.Second)
	}
	var last *ray.ServeDetails
	for {
		d, err := c.GetServeDetails(ctx)
		if err != nil && !errors.Is(err, ray.ErrUnavailable) {
			t.Fatal(err)
		}
		if err == nil {
			last = d
			app, ok := d.Applications[appName]
			if ok && app.Status == ray.ApplicationStatusDeployFailed {
				t.Fatalf("application %s failed to deploy: %s", appName, app.Message)
			}
			if ok && app.Status == ray.ApplicationStatusRunning && app.Deployments["Hello"].Status == ray.DeploymentStatusHealthy {
				if app.RoutePrefix != "/"+appName {
					t.Errorf("route prefix %q", app.RoutePrefix)
				}
				if len(app.Deployments["Hello"].Replicas) != 1 {
					t.Errorf("replicas %+v", app.Deployments["Hello"].Replicas)
				}
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("application %s not RUNNING with Hello HEALTHY: %+v", appName, last)
		case <-time.After(500 * time.Millisecond):
		}
	}

	// The HTTP proxy starts with the first application; the route may take a moment to reach it.
	var body []byte
	var err error
	for range 60 {
		if body, err = s.serve.Get(ctx, "/"+appName); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("call %s: %v", appName, err)
	}
	if want := "hello from manta (" + s.name + ")"; string(body) != want {
		t.Errorf("answer %q, want %q", body, want)
	}
	if err := s.serve.CheckHealth(ctx); err != nil {
		t.Errorf("serve health: %v", err)
	}
}
