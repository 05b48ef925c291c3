package testutil

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// PinnedToolVersion returns the version of module mod that hack/tools/DIR/go.mod requires (DIR "k8s", "node/runc",
// ...): what `make tools` builds into bin/.
func PinnedToolVersion(t testing.TB, dir, mod string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(MustRepoRoot(t), "hack", "tools", dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(mod) + `\s+(v\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("hack/tools/%s/go.mod does not require %s", dir, mod)
	}
	return string(m[1])
}
