package fakeray

import (
	"context"
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
