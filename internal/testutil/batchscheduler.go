package testutil

import (
	"path/filepath"
	"testing"

	"github.com/manta-dev/manta/internal/devcluster"
)

// SchedulerPluginsCRDs is the directory of scheduler-plugins' CRDs (PodGroup, ElasticQuota) in its Go module.
func SchedulerPluginsCRDs(t testing.TB) string {
	t.Helper()
	return filepath.Join(moduleDir(t, devcluster.SchedulerPluginsModule), "config", "crd", "bases")
}

// VolcanoCRDs is the directory of the minimal Volcano PodGroup CRD the dev cluster installs too
// (devcluster.VolcanoCRDDir): Volcano's Go module has the types but not the CRD.
func VolcanoCRDs(t testing.TB) string {
	t.Helper()
	return devcluster.VolcanoCRDDir(MustRepoRoot(t))
}
