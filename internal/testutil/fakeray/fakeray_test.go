package fakeray

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/manta-dev/manta/internal/ray"
)

func TestExitCode(t *testing.T) {
	for entry, want := range map[string]int{
		`python /home/ray/samples/sample_code.py`:                            0,
		`python -c 'import sys; sys.exit(1)'`:                                1,
		`python -c "import sys; sys.exit(3)"`:                                3,
		`python -c "import sys; sys.exit()"`:                                 0,
		`python -c "import sys; sys.exit(0)"`:                                0,
		`python -c "import sys; print('x'); sys.exit('manta-boom')"`:         1,
		`sh -c 'echo hi; exit 2'`:                                            2,
		`python -c "import ray; ray.init(); print(ray.cluster_resources())"`: 0,
	} {
		if got, _ := ExitCode(entry); got != want {
			t.Errorf("ExitCode(%q) = %d, want %d", entry, got, want)
		}
	}
}

// The scripted head moves a job PENDING (for PendingFor), RUNNING (for the step), then to the status its
// entrypoint implies; a Serve application comes to RUNNING.
func TestScriptedHead(t *testing.T) {
	h := New(Options{Run: Scripted(200 * time.Millisecond), PendingFor: 100 * time.Millisecond, ServeDeploying: 100 * time.Millisecond})
	c := serve(t, h)
	ctx := context.Background()
	for id, want := range map[string]ray.JobStatus{"ok": ray.JobStatusSucceeded, "bad": ray.JobStatusFailed} {
		entry := "python ok.py"
		if id == "bad" {
			entry = `python -c 'import sys; sys.exit(1)'`
		}
		if _, err := c.SubmitJob(ctx, ray.JobSubmitRequest{SubmissionID: id, Entrypoint: entry}); err != nil {
			t.Fatal(err)
		}
		// Polled until terminal; the statuses on the way come from the head's history, since a loaded machine
		// may poll past the short RUNNING step.
		for deadline := time.Now().Add(10 * time.Second); ; {
			info, err := c.GetJob(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if info.Status.IsTerminal() {
				if got := h.History(id); !slices.Equal(got, []ray.JobStatus{ray.JobStatusPending, ray.JobStatusRunning, want}) {
					t.Errorf("%s: went through %v, want PENDING, RUNNING, %s", id, got, want)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still %s", id, info.Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := c.DeployServeConfigV2(ctx, "applications:\n- name: app\n  import_path: a:b\n  deployments:\n  - name: D\n"); err != nil {
		t.Fatal(err)
	}
	d, err := c.GetServeDetails(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Applications["app"]; !ok {
		t.Fatalf("no application after the deploy: %+v", d)
	}
	for deadline := time.Now().Add(10 * time.Second); d.Applications["app"].Status != ray.ApplicationStatusRunning; {
		if time.Now().After(deadline) {
			t.Fatalf("application %+v not RUNNING", d.Applications["app"])
		}
		time.Sleep(20 * time.Millisecond)
		if d, err = c.GetServeDetails(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if dep := d.Applications["app"].Deployments["D"]; dep.Status != ray.DeploymentStatusHealthy {
		t.Errorf("deployment %+v, want HEALTHY", dep)
	}
}

// ServeUnread holds from a deploy until two reads have seen the applications RUNNING, and a new config starts it
// again.
func TestServeUnread(t *testing.T) {
	h := New(Options{ServeDeploying: 0})
	c := serve(t, h)
	ctx := context.Background()
	if h.ServeUnread() {
		t.Error("unread with no Serve config")
	}
	for _, price := range []string{"3", "4"} {
		if err := c.DeployServeConfigV2(ctx, "applications:\n- name: app\n  import_path: a:b\n  args: {price: "+price+"}\n  deployments:\n  - name: D\n"); err != nil {
			t.Fatal(err)
		}
		if !h.ServeUnread() {
			t.Errorf("price %s: read before any GET", price)
		}
		for read := 1; read <= servePollsSeen; read++ {
			d, err := c.GetServeDetails(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Applications["app"].Status; got != ray.ApplicationStatusRunning {
				t.Fatalf("price %s: application %s, want RUNNING", price, got)
			}
			if unread, want := h.ServeUnread(), read < servePollsSeen; unread != want {
				t.Errorf("price %s: unread %v after %d GETs saw it RUNNING, want %v", price, unread, read, want)
			}
		}
	}
}

// serve starts h's servers until the test ends and returns a dashboard client of it.
func serve(t *testing.T, h *Head) ray.Dashboard {
	t.Helper()
	srv := Start(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	tr, err := ray.NewDirectTransport(srv.Dashboard.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ray.NewDashboardClient(tr)
}

// A Fleet is reached through the operator's own clients: a head per head Service, jobs moved by the test, the
// faults on the way to a head, and Serve through the dashboard and the head pod's proxy.
func TestFleet(t *testing.T) {
	f := NewFleet(Options{Manual: true})
	t.Cleanup(f.Close)
	ctx := context.Background()
	target := ray.Target{Namespace: "ns", HeadServiceName: "rc-head-svc"}
	dash, err := f.DashboardFor(target)
	if err != nil {
		t.Fatal(err)
	}
	h := f.Cluster("ns", "rc")
	if h != f.Head("ns", "rc-head-svc") {
		t.Fatal("Cluster and Head name different heads")
	}
	if _, err := dash.SubmitJob(ctx, ray.JobSubmitRequest{SubmissionID: "a", Entrypoint: "python a.py"}); err != nil {
		t.Fatal(err)
	}
	if info, err := dash.GetJob(ctx, "a"); err != nil || info.Status != ray.JobStatusPending {
		t.Fatalf("a manual head's new job: %+v, %v; want PENDING", info, err)
	}
	h.SetJob("a", ray.JobStatusRunning, 1, 0)
	if info, err := dash.GetJob(ctx, "a"); err != nil || info.Status != ray.JobStatusRunning || info.Message != "Job is currently running." {
		t.Fatalf("after SetJob RUNNING: %+v, %v", info, err)
	}
	if stopped, err := dash.StopJob(ctx, "a"); err != nil || !stopped {
		t.Fatalf("stop = %v, %v", stopped, err)
	}
	if info, _ := h.Job("a"); info.Status != ray.JobStatusStopped {
		t.Errorf("stopped job is %s", info.Status)
	}
	if _, err := dash.StopJob(ctx, "nope"); !errors.Is(err, ray.ErrNotFound) {
		t.Errorf("stop of an unknown job: %v, want ErrNotFound", err)
	}
	if got := h.Stops(); !slices.Equal(got, []string{"a", "nope"}) {
		t.Errorf("stops %v", got)
	}
	if n := h.Calls("GET /api/jobs/{id}"); n != 2 {
		t.Errorf("%d job reads counted, want 2", n)
	}
	if _, ok := f.Cluster("other", "rc").Job("a"); ok {
		t.Error("a head of another namespace holds the job")
	}

	// Faults on the way to the head.
	h.SetDown(true)
	if _, err := dash.GetJob(ctx, "a"); !errors.Is(err, ray.ErrUnavailable) {
		t.Errorf("head down: %v, want ErrUnavailable", err)
	}
	h.SetDown(false)
	h.Fail503(1)
	if _, err := dash.GetJob(ctx, "a"); !errors.Is(err, ray.ErrUnavailable) {
		t.Errorf("503: %v, want ErrUnavailable", err)
	}
	if _, err := dash.GetJob(ctx, "a"); err != nil {
		t.Errorf("after the one 503: %v", err)
	}
	h.DropNextSubmitAnswer()
	if _, err := dash.SubmitJob(ctx, ray.JobSubmitRequest{SubmissionID: "b", Entrypoint: "python b.py"}); !errors.Is(err, ray.ErrUnavailable) {
		t.Errorf("lost answer: %v, want ErrUnavailable", err)
	}
	if _, err := dash.SubmitJob(ctx, ray.JobSubmitRequest{SubmissionID: "b", Entrypoint: "python b.py"}); !errors.Is(err, ray.ErrAlreadySubmitted) {
		t.Errorf("submitted again after the lost answer: %v, want ErrAlreadySubmitted", err)
	}
	if accepted, refused := h.Submissions(); accepted != 2 || refused != 1 {
		t.Errorf("submissions %d accepted, %d refused; want 2, 1", accepted, refused)
	}

	// Serve: the head pod's proxy answers once a config runs; statuses set by the test; state lost on a restart.
	pod := target
	pod.HeadPodName, pod.HeadPodIP = "rc-head", "10.0.0.7"
	proxy, err := f.ServeProxyFor(pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.CheckHealth(ctx); err == nil {
		t.Error("proxy healthy before Serve runs")
	}
	if err := dash.DeployServeConfigV2(ctx, "applications:\n- name: app\n  import_path: a:b\n"); err != nil {
		t.Fatal(err)
	}
	if err := proxy.CheckHealth(ctx); err != nil {
		t.Errorf("proxy once Serve runs: %v", err)
	}
	h.SetServeStatus(ray.ApplicationStatusUnhealthy)
	d, err := dash.GetServeDetails(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if app := d.Applications["app"]; app.Status != ray.ApplicationStatusUnhealthy || app.Deployments["App"].Status != ray.DeploymentStatusUnhealthy {
		t.Errorf("application %+v, want UNHEALTHY with its deployment App UNHEALTHY", app)
	}
	h.SetProxyDown("rc-head", true)
	if err := proxy.CheckHealth(ctx); !errors.Is(err, ray.ErrUnavailable) {
		t.Errorf("proxy down: %v, want ErrUnavailable", err)
	}
	h.Restart()
	if d, err := dash.GetServeDetails(ctx); err != nil || len(d.Applications) != 0 {
		t.Errorf("after a restart: %+v, %v; want no application", d, err)
	}
	if _, ok := h.Job("a"); ok {
		t.Error("a job outlived the restart")
	}
	if n := h.Calls(Route(http.MethodGet, "/api/serve/applications/")); n != 2 {
		t.Errorf("%d Serve reads counted, want 2", n)
	}
}
