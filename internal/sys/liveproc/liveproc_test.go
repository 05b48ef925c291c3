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
