package testutil

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// SchedulerPluginsCRDs is the directory of scheduler-plugins' CRDs (PodGroup, ElasticQuota) in its Go module.
func SchedulerPluginsCRDs(t testing.TB) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/scheduler-plugins")
	cmd.Dir = MustRepoRoot(t)
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("finding the scheduler-plugins module (go mod download fetches it): %v %s", err, out)
	}
	return filepath.Join(dir, "config", "crd", "bases")
}

// VolcanoCRDs is the directory of a minimal Volcano PodGroup CRD (testdata/volcano): Volcano's Go module has the
// types but not the CRD.
func VolcanoCRDs(t testing.TB) string {
	t.Helper()
	return filepath.Join(MustRepoRoot(t), "internal", "testutil", "testdata", "volcano")
}
