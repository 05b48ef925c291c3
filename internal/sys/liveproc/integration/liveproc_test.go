package integration

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/manta-dev/manta/internal/sys/liveproc"
)

// A process exists, by its pid and start time, until it is killed and reaped.
func TestExistsUntilReaped(t *testing.T) {
	self, ok := liveproc.Of(os.Getpid())
	if !ok || self.Start == 0 || !self.Exists() {
		t.Fatalf("this process: %+v ok=%v, want a start time and Exists", self, ok)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id, ok := liveproc.Of(cmd.Process.Pid)
	if !ok || !id.Exists() {
		t.Fatalf("child %+v ok=%v, want it to exist", id, ok)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if id.Exists() {
		t.Errorf("%v exists after it was killed and reaped", id)
	}
}

// TestTerminate: a child that exits on SIGTERM is gone without the grace running out; one that ignores it is
// killed once the grace is over.
func TestTerminate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		want   syscall.Signal
	}{
		{"exits on SIGTERM", "exec sleep 600", syscall.SIGTERM},
		{"ignores SIGTERM", `trap "" TERM; echo ready; while :; do sleep 1; done`, syscall.SIGKILL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sh", "-c", tc.script)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if tc.want == syscall.SIGKILL {
				// Barrier: the trap is set before the signal is sent.
				if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
					t.Fatal(err)
				}
			}
			exited := make(chan struct{})
			go func() { _ = cmd.Wait(); close(exited) }()
			grace := time.Hour
			if tc.want == syscall.SIGKILL {
				grace = 100 * time.Millisecond
			}
			liveproc.Terminate(cmd.Process, exited, grace)
			ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ok || !ws.Signaled() || ws.Signal() != tc.want {
				t.Errorf("ended with %v, want killed by %v", cmd.ProcessState, tc.want)
			}
			liveproc.Terminate(cmd.Process, exited, grace) // again: returns at once
		})
	}
}

// TestChildrenAndZombie: a child is listed among this process's children while it runs and once it has ended
// unreaped, when it is a zombie; reaped, it is neither.
func TestChildrenAndZombie(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	listed := func() bool {
		kids, err := liveproc.Children(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(kids, pid)
	}
	if !listed() || liveproc.Zombie(pid) {
		t.Fatalf("running child %d: listed %v, zombie %v; want listed and not a zombie", pid, listed(), liveproc.Zombie(pid))
	}
	// Killed and waited for without being reaped (WNOWAIT): a zombie, still this process's child.
	_ = cmd.Process.Kill()
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if !listed() || !liveproc.Zombie(pid) {
		t.Errorf("ended child %d: listed %v, zombie %v; want both", pid, listed(), liveproc.Zombie(pid))
	}
	_ = cmd.Wait()
	if listed() || liveproc.Zombie(pid) {
		t.Errorf("reaped child %d: listed %v, zombie %v; want neither", pid, listed(), liveproc.Zombie(pid))
	}
}
