package liveproc

import (
	"os"
	"testing"
)

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

func TestParseStatCPU(t *testing.T) {
	// pid (comm with spaces) state ppid ... utime=250 stime=50 (fields 14 and 15)
	stat := "4242 (manta op) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 1000 0 0"
	if got := parseStatCPU(stat); got != 3 {
		t.Errorf("parseStatCPU = %v, want 3", got)
	}
	if got := parseStatCPU("garbage"); got != 0 {
		t.Errorf("parseStatCPU of garbage = %v", got)
	}
}

func TestCPUSecondsOfThisProcess(t *testing.T) {
	if got := CPUSeconds(os.Getpid()); got < 0 {
		t.Errorf("CPUSeconds(self) = %v", got)
	}
	if got := CPUSeconds(-1); got != 0 {
		t.Errorf("CPUSeconds(-1) = %v, want 0", got)
	}
}
