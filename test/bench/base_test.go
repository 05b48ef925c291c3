package bench

import (
	"cmp"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// baseBinary is the manta binary of the contender manta-base: MANTA_BENCH_BASE_BIN when set; with
// MANTA_BENCH_BASE=<git revision>, Manta built from that revision of the repository at root into dir (checked out
// in a detached git worktree under dir, removed once built); "" when neither is set (manta-base then runs the
// current tree's binary, for a before/after of MANTA_BENCH_BASE_ARGS alone).
func baseBinary(getenv func(string) string, root, dir string) (string, error) {
	bin, rev := getenv("MANTA_BENCH_BASE_BIN"), getenv("MANTA_BENCH_BASE")
	switch {
	case bin != "" && rev != "":
		return "", errors.New("set MANTA_BENCH_BASE (a git revision to build) or MANTA_BENCH_BASE_BIN (a binary), not both")
	case rev == "":
		return bin, nil
	}
	commit, err := git(root, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("MANTA_BENCH_BASE=%s: %w", rev, err)
	}
	src := filepath.Join(dir, "src")
	if _, err := git(root, "worktree", "add", "--detach", src, commit); err != nil {
		return "", err
	}
	defer func() { _, _ = git(root, "worktree", "remove", "--force", src) }()
	bin = filepath.Join(dir, "manta")
	build := exec.Command("go", "build", "-o", bin, "./cmd/manta")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build Manta at %s (MANTA_BENCH_BASE=%s): %v\n%s", commit, rev, err, out)
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

// binaryFor is the binary a contender runs, from bins: "kuberay", "manta" (this tree's) and "manta-base" (empty
// when manta-base runs this tree's binary too).
func binaryFor(c contender, bins map[string]string) string {
	switch {
	case c.kuberay:
		return bins["kuberay"]
	case c.name == "manta-base":
		return cmp.Or(bins["manta-base"], bins["manta"])
	}
	return bins["manta"]
}

// needsCurrentManta says whether a contender runs this tree's manta binary, which must then be built.
func needsCurrentManta(c contender, bins map[string]string) bool {
	return c.args != nil && !c.kuberay && (c.name != "manta-base" || bins["manta-base"] == "")
}
