package testutil

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildManta builds ./cmd/manta into a temp dir of t and returns the binary's path: the real `manta` that tests
// run as a separate process (deploy checks, the benchmarks, the reliability tests that SIGKILL `manta operator`).
func BuildManta(t testing.TB) string {
	t.Helper()
	bin, err := BuildMantaTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// BuildMantaTo builds ./cmd/manta into dir/manta, for a binary that outlives one test.
func BuildMantaTo(dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "manta")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/manta")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/manta: %v\n%s", err, out)
	}
	return bin, nil
}
