package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRepoRootSkipsOtherModules(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "config", "crd")); err != nil {
		t.Fatalf("RepoRoot() = %s, which has no config/crd: %v", root, err)
	}
	// hack/tools/k8s has a go.mod of its own; the root is still the main module's.
	t.Chdir(filepath.Join(root, "hack", "tools", "k8s"))
	if got, err := RepoRoot(); err != nil || got != root {
		t.Errorf("from hack/tools/k8s: RepoRoot() = %q, %v; want %q", got, err, root)
	}
	// Outside the repository, the location of this source file is used.
	t.Chdir(t.TempDir())
	if got, err := RepoRoot(); err != nil || got != root {
		t.Errorf("from a temp dir: RepoRoot() = %q, %v; want %q", got, err, root)
	}
}
