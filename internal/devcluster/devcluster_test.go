package devcluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/manta-dev/manta/internal/sys/liveproc"
)

// TestSweepStaleDirs checks that a dev cluster dir left by a process that was killed is removed by the next Start,
// also when its pid now belongs to another process, and that a live owner's dir is kept.
func TestSweepStaleDirs(t *testing.T) {
	self, ok := liveproc.Of(os.Getpid())
	if !ok {
		t.Fatal("no start time for this process")
	}
	owners := map[string]string{
		// A pid far above the default pid_max stands for a process that is gone.
		"dead": liveproc.ID{PID: 2147483646, Start: 1}.String(),
		// This process's pid with another start time: the owner died and its pid was reused.
		"reused": liveproc.ID{PID: self.PID, Start: self.Start + 1}.String(),
		"live":   self.String(),
	}
	dirs := map[string]string{}
	for name, owner := range owners {
		d, err := os.MkdirTemp("", tempPrefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(owner), 0o644); err != nil {
			t.Fatal(err)
		}
		dirs[name] = d
	}
	sweepStaleDirs()
	for _, name := range []string{"dead", "reused"} {
		if _, err := os.Stat(dirs[name]); !os.IsNotExist(err) {
			t.Errorf("%s owner's dir %s was not removed", name, dirs[name])
		}
	}
	if _, err := os.Stat(dirs["live"]); err != nil {
		t.Errorf("live owner's dir %s was removed: %v", dirs["live"], err)
	}
}
