package testutil

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
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

// BuildMantaAt builds ./cmd/manta of revision rev of the repository at root into dir/manta, from a detached git
// worktree under dir that is removed once built: Manta as an earlier commit was (an upgrade's "before").
func BuildMantaAt(root, rev, dir string) (string, error) {
	commit, err := git(root, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return "", err
	}
	src := filepath.Join(dir, "src")
	if _, err := git(root, "worktree", "add", "--detach", src, commit); err != nil {
		return "", err
	}
	defer func() { _, _ = git(root, "worktree", "remove", "--force", src) }()
	bin := filepath.Join(dir, "manta")
	build := exec.Command("go", "build", "-o", bin, "./cmd/manta")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build Manta at %s: %v\n%s", commit, err, out)
	}
	return bin, nil
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}
