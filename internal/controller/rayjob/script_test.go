package rayjob

import (
	"bufio"
	"context"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

// The submitter's wait (headReadyWait, run by python in the Ray image) and the operator's (headReady) agree on a
// head as Ray 2.52's dashboard answers (fakeray, whose state API answers as Ray's; the same query was checked against
// a real Ray 2.52 head): not ready while its raylet has not registered (no head node alive), ready once it has. The
// wait itself (no "once") goes on while the head node is missing, saying why, and ends once it is alive.
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
		out, err := exec.CommandContext(ctx, python, "-c", headReadyWait, srv.URL, "once").CombinedOutput()
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

	// The wait: started while the head node is missing, it says why (the barrier: its first line), and exits 0
	// once the head node is alive.
	head.SetHeadNodePending(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait := exec.CommandContext(ctx, python, "-c", headReadyWait, srv.URL)
	stderr, err := wait.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := wait.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || !strings.Contains(line, "waiting for the Ray head at "+srv.URL+": its GCS does not list the head node alive yet") {
		t.Errorf("the wait's first line %q (%v)", line, err)
	}
	head.SetHeadNodePending(false)
	if err := wait.Wait(); err != nil {
		t.Errorf("the wait once the head node is alive: %v", err)
	}

	// As the submitter runs it: the script's wait, quoted for bash, up to the submission (ray is not here).
	script := SubmitScript(job(nil), srv.URL)
	waitPart, _, ok := strings.Cut(script, "\nif ! ray job status")
	if !ok {
		t.Fatalf("no submission step in the script:\n%s", script)
	}
	if out, err := exec.CommandContext(ctx, "bash", "-ce", "--", waitPart).CombinedOutput(); err != nil {
		t.Errorf("the script's wait under bash: %v: %s", err, out)
	}
}
