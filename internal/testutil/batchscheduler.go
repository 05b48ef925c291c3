package testutil

import (
	"path/filepath"
	"testing"
)

// SchedulerPluginsCRDs is the directory of scheduler-plugins' CRDs (PodGroup, ElasticQuota) in its Go module.
func SchedulerPluginsCRDs(t testing.TB) string {
	t.Helper()
	return filepath.Join(moduleDir(t, "sigs.k8s.io/scheduler-plugins"), "config", "crd", "bases")
}

// VolcanoCRDs is the directory of a minimal Volcano PodGroup CRD (testdata/volcano): Volcano's Go module has the
// types but not the CRD.
func VolcanoCRDs(t testing.TB) string {
	t.Helper()
	return filepath.Join(MustRepoRoot(t), "internal", "testutil", "testdata", "volcano")
}
