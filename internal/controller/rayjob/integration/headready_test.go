// Package integration runs the RayJob submitter's script (its Python and bash parts) against a fake Ray head.
package integration

import (
	"bufio"
	"context"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

// The submitter's wait for the head (the script's first step, python in the Ray image; python3 is the machine's)
// against a head as Ray 2.52's dashboard answers (fakeray, whose state API answers as Ray's; the same query was
// checked against a real Ray 2.52 head): with "once" it says not ready while the head's raylet has not registered
// (no head node alive) and ready once it has; without, it goes on while the head node is missing, saying why, and
// ends once it is alive; and it runs as bash runs the script.
func TestSubmitterWaitsForTheHeadNode(t *testing.T) {
	head := fakeray.New(fakeray.Options{})
	t.Cleanup(head.Close)
	srv := httptest.NewServer(head.Dashboard())
	t.Cleanup(srv.Close)
	j := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j"}, Spec: rayv1.RayJobSpec{Entrypoint: "python x.py"}}
	script := rayjob.SubmitScript(j, srv.URL)
	wait, _, ok := strings.Cut(script, "\nif ! ray job status")
	if !ok || !strings.HasPrefix(wait, "python -c ") {
		t.Fatalf("the script does not start with its wait:\n%s", script)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3, which runs the submitter's script in the Ray image, is not on this machine: %v", err)
	}
	// The Ray image's python is python3 here.
	wait = "python() { python3 \"$@\"; }\n" + wait
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	once := func() bool {
		out, err := exec.CommandContext(ctx, "bash", "-ce", "--", wait+" once").CombinedOutput()
		if _, exited := err.(*exec.ExitError); err != nil && !exited {
			t.Fatalf("bash: %v", err)
		}
		if err != nil && len(out) > 0 {
			t.Fatalf("the check failed with output (a Python error, not an answer): %s", out)
		}
		return err == nil
	}
	head.SetHeadNodePending(true)
	if once() {
		t.Error("head node not registered: the check says ready")
	}
	head.SetHeadNodePending(false)
	if !once() {
		t.Error("head node alive: the check says not ready")
	}

	// The wait: started while the head node is missing, it says why (the barrier: its first line), and exits 0
	// once the head node is alive.
	head.SetHeadNodePending(true)
	cmd := exec.CommandContext(ctx, "bash", "-ce", "--", wait)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || !strings.Contains(line, "waiting for the Ray head at "+srv.URL+": its GCS does not list the head node alive yet") {
		t.Errorf("the wait's first line %q (%v)", line, err)
	}
	head.SetHeadNodePending(false)
	if err := cmd.Wait(); err != nil {
		t.Errorf("the wait once the head node is alive: %v", err)
	}
}
