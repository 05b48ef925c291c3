package bench

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/manta-dev/manta/internal/testutil"
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
	bin, err := testutil.BuildMantaAt(root, rev, dir)
	if err != nil {
		return "", fmt.Errorf("MANTA_BENCH_BASE=%s: %w", rev, err)
	}
	return bin, nil
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
