package liveproc

import (
	"os"
	"os/exec"
	"testing"
)

func TestExistsUntilReaped(t *testing.T) {
	self, ok := Of(os.Getpid())
	if !ok || self.Start == 0 || !self.Exists() {
		t.Fatalf("this process: %+v ok=%v, want a start time and Exists", self, ok)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id, ok := Of(cmd.Process.Pid)
	if !ok || !id.Exists() {
		t.Fatalf("child %+v ok=%v, want it to exist", id, ok)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if id.Exists() {
		t.Errorf("%v exists after it was killed and reaped", id)
	}
}

// TestReusedPid: the same pid with another start time is another process, as after a pid wrapped round.
func TestReusedPid(t *testing.T) {
	self, _ := Of(os.Getpid())
	other := ID{PID: self.PID, Start: self.Start + 1}
	if other.Exists() {
		t.Errorf("%v exists, but only %v has that pid", other, self)
	}
}

func TestParse(t *testing.T) {
	id := ID{PID: 4242, Start: 987654}
	got, err := Parse(id.String() + "\n")
	if err != nil || got != id {
		t.Fatalf("Parse(%q) = %+v, %v; want %+v", id.String(), got, err, id)
	}
	for _, bad := range []string{"", "4242", "x@1", "4242@", "0@5", "-3@5", "4242@y"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
