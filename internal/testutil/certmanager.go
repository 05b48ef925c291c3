package testutil

import (
	"path/filepath"
	"testing"

	"github.com/manta-dev/manta/internal/devcluster"
)

// CertManagerCRDs is the directory of cert-manager's CRDs (deploy/crds) in the cert-manager module go.mod requires,
// for an envtest that serves its kinds (tlsOptions). Nothing runs cert-manager's controllers there: a test plays
// them by writing the Certificates' status and Secrets.
func CertManagerCRDs(t testing.TB) string {
	t.Helper()
	return filepath.Join(moduleDir(t, "github.com/cert-manager/cert-manager"), "deploy", "crds")
}

// moduleDir is where the Go module that go.mod requires is on disk.
func moduleDir(t testing.TB, module string) string {
	t.Helper()
	dir, err := devcluster.ModuleDir(MustRepoRoot(t), module)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
