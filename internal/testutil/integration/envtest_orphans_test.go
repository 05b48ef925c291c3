package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manta-dev/manta/internal/sys/liveproc"
	"github.com/manta-dev/manta/internal/testutil"
)

// childEnv marks the copy of this test binary that TestEnvtestDiesWithItsTest starts and kills.
const childEnv = "MANTA_ENVTEST_ORPHAN_CHILD"

// TestEnvtestDiesWithItsTest: a test process killed while its envtest control plane runs (as go test kills one at
// its timeout) takes etcd and kube-apiserver with it. A copy of this test binary starts envtest, reports its
// children and waits; it is killed with SIGKILL, so no cleanup runs; then both components end.
func TestEnvtestDiesWithItsTest(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		testutil.StartEnvtest(t)
		var ids []string
		kids, err := liveproc.Children(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range kids {
			if id, ok := liveproc.Of(pid); ok {
				ids = append(ids, id.String())
			}
		}
		fmt.Printf("children %s\n", strings.Join(ids, " "))
		select {} // until killed
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnvtestDiesWithItsTest$", "-test.timeout=10m")
	// The child's temporary files (envtest's etcd data and certificates among them) go in this test's, removed at
	// its end: the killed child removes nothing.
	cmd.Env = append(os.Environ(), childEnv+"=1", "TMPDIR="+t.TempDir())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var ids []liveproc.ID
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "children "); ok {
			for _, f := range strings.Fields(rest) {
				id, err := liveproc.Parse(f)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			break
		}
	}
	t.Cleanup(func() {
		// Should they outlive the test anyway, they are not left running.
		for _, id := range ids {
			if id.Exists() {
				_ = syscall.Kill(id.PID, syscall.SIGKILL)
			}
		}
	})
	if len(ids) != 2 {
		t.Fatalf("the child test's processes: %v, want etcd and kube-apiserver", ids)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	testutil.Eventually(t, time.Minute, "etcd and kube-apiserver gone with the test that started them", func() (bool, string) {
		var left []string
		for _, id := range ids {
			if id.Exists() && !liveproc.Zombie(id.PID) {
				left = append(left, id.String())
			}
		}
		return len(left) == 0, "still running: " + strings.Join(left, ", ")
	})
}
