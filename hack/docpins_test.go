package hack

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manta-dev/manta/internal/testutil"
)

// TestOperationsDocNamesThePinnedVersions: docs/operations.md's table of what `make tools` builds names the
// versions the modules pin.
func TestOperationsDocNamesThePinnedVersions(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for dir, mod := range map[string]string{
		"k8s":             "k8s.io/kubernetes",
		"node/containerd": "github.com/containerd/containerd/v2",
		"node/runc":       "github.com/opencontainers/runc",
		"node/cni":        "github.com/containernetworking/plugins",
		"node/coredns":    "github.com/coredns/coredns",
	} {
		if want := fmt.Sprintf("`hack/tools/%s` (%s) | %s |", dir, mod, testutil.PinnedToolVersion(t, dir, mod)); !strings.Contains(string(doc), want) {
			t.Errorf("docs/operations.md does not say %q", want)
		}
	}
}
