package testutil

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CertManagerCRDs is the directory of cert-manager's CRDs (deploy/crds) in the cert-manager module go.mod requires,
// for an envtest that serves its kinds (tlsOptions). Nothing runs cert-manager's controllers there: a test plays
// them by writing the Certificates' status and Secrets.
func CertManagerCRDs(t testing.TB) string {
	t.Helper()
	return filepath.Join(moduleDir(t, "github.com/cert-manager/cert-manager"), "deploy", "crds")
}

// moduleDir is the directory of a module go.mod requires, in the module cache.
func moduleDir(t testing.TB, module string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = MustRepoRoot(t)
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("finding the module %s (go mod download fetches it): %v %s", module, err, out)
	}
	return dir
}
