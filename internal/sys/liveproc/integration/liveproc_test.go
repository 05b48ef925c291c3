package integration

import (
	"os"
	"os/exec"
	"testing"

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
