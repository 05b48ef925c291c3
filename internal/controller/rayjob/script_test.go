package rayjob

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

// The submitter's wait (headReadyCheck, run by python in the Ray image) and the operator's (headReady) agree on a
// head as Ray 2.52's dashboard answers (fakeray, whose state API answers as Ray's; the same query was checked against
// a real Ray 2.52 head): not ready while its raylet has not registered (no head node alive), ready once it has.
// python3 is the machine's (the Ray image's runs the same script).
func TestHeadReadyCheck(t *testing.T) {
	if !strings.Contains(SubmitScript(job(nil), "http://h:8265"), "/api/v0/nodes?") {
		t.Fatal("the submitter's script does not ask for the head node")
	}
	head := fakeray.New(fakeray.Options{})
	t.Cleanup(head.Close)
	srv := httptest.NewServer(head.Dashboard())
	t.Cleanup(srv.Close)
	tr, err := ray.NewDirectTransport(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	dash := ray.NewDashboardClient(tr)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3, which runs the submitter's script in the Ray image, is not on this machine: %v", err)
	}
	check := func() (scriptReady bool, operator error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, python, "-c", headReadyCheck, srv.URL).CombinedOutput()
		if _, exited := err.(*exec.ExitError); err != nil && !exited {
			t.Fatalf("python: %v", err)
		}
		if err != nil && len(out) > 0 {
			t.Fatalf("the check failed with output (a Python error, not an answer): %s", out)
		}
		return err == nil, headReady(ctx, dash)
	}

	head.SetHeadNodePending(true)
	if ready, err := check(); ready || err == nil {
		t.Errorf("head node not registered: script ready %v, operator's check %v; want both not ready", ready, err)
	}
	head.SetHeadNodePending(false)
	if ready, err := check(); !ready || err != nil {
		t.Errorf("head node alive: script ready %v, operator's check %v; want both ready", ready, err)
	}
}
