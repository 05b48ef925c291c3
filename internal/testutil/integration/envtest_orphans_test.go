package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
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
		for _, pid := range childrenOf(t, os.Getpid()) {
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
			if id.Exists() && !zombie(id.PID) {
				left = append(left, id.String())
			}
		}
		return len(left) == 0, "still running: " + strings.Join(left, ", ")
	})
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := stat(p); ok && ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}

// zombie says whether pid has ended and waits to be reaped by whoever its parent is now.
func zombie(pid int) bool {
	_, state, ok := stat(pid)
	return ok && state == "Z"
}

// stat reads a process's parent and state from /proc/<pid>/stat.
func stat(pid int) (ppid int, state string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0], err == nil
}
