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
	src, remove, err := WorktreeAt(root, rev, dir)
	if err != nil {
		return "", err
	}
	defer remove()
	bin := filepath.Join(dir, "manta")
	build := exec.Command("go", "build", "-o", bin, "./cmd/manta")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build Manta at %s: %v\n%s", rev, err, out)
	}
	return bin, nil
}

// WorktreeAt checks revision rev of the repository at root out as a detached git worktree at dir/src, for what
// an earlier commit had beside its binary (its chart); remove deletes the worktree.
func WorktreeAt(root, rev, dir string) (src string, remove func(), err error) {
	commit, err := git(root, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return "", nil, err
	}
	src = filepath.Join(dir, "src")
	if _, err := git(root, "worktree", "add", "--detach", src, commit); err != nil {
		return "", nil, err
	}
	return src, func() { _, _ = git(root, "worktree", "remove", "--force", src) }, nil
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
