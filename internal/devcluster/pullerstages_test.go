package devcluster

import (
	"strings"
	"testing"
)

// The embedded puller stages are all there: a glob that matched nothing would load no stage and leave puller pods
// Running forever on kwok nodes.
func TestPullerStages(t *testing.T) {
	s := string(PullerStages)
	for _, name := range []string{"name: manta-puller-complete", "name: manta-puller-image-not-found", "name: manta-puller-unauthorized"} {
		if !strings.Contains(s, name) {
			t.Errorf("PullerStages lacks %q", name)
		}
	}
	if n := strings.Count(s, "\n---\n"); n != 2 {
		t.Errorf("PullerStages has %d separators, want 2 between its three documents", n)
	}
}
