// Package ray_test is the conformance suite of internal/ray against a real Ray head (the pinned version from
// hack/ray-venv.sh): once directly over loopback, once through a real kube-apiserver's service and pod proxy.
package ray_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/manta-dev/manta/internal/testutil"
)

var (
	root    string   // repository root
	head    *rayHead // shared by every test of the package: starting Ray costs tens of seconds
	dataDir string   // test/ray/testdata, absolute
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard()) // the operator runs in-process in some tests
	var err error
	if root, err = testutil.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if dataDir, err = filepath.Abs("testdata"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rayBin, err := ensureRay(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if head, err = startRayHead(rayBin, ""); err != nil {
		fmt.Fprintln(os.Stderr, "starting the Ray head:", err)
		return 1
	}
	defer head.Stop()
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "Ray head logs:\n%s\n", head.Logs())
	}
	return code
}
