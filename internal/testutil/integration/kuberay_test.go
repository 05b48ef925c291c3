package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/manta-dev/manta/internal/testutil"
	"github.com/manta-dev/manta/internal/version"
)

// The module found is the version hack/tools/kuberay/go.mod pins, with KubeRay's CRDs and samples in it, and it is
// the KubeRay release `manta version` says Manta serves.
func TestKubeRayModuleDirIsThePinnedVersion(t *testing.T) {
	gomod, err := os.ReadFile(filepath.Join(testutil.MustRepoRoot(t), "hack", "tools", "kuberay", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^require ` + regexp.QuoteMeta(testutil.KubeRayModule) + ` (v\S+)$`).FindSubmatch(gomod)
	if m == nil {
		t.Fatalf("hack/tools/kuberay/go.mod does not require %s:\n%s", testutil.KubeRayModule, gomod)
	}
	if pinned := string(m[1]); version.KubeRayRelease != pinned {
		t.Errorf("version.KubeRayRelease is %s, hack/tools/kuberay/go.mod pins %s", version.KubeRayRelease, pinned)
	}
	dir := testutil.KubeRayModuleDir(t)
	if want := "@" + string(m[1]); !strings.HasSuffix(dir, want) {
		t.Errorf("module directory %s, want the pinned %s", dir, want)
	}
	if _, err := os.Stat(filepath.Join(testutil.KubeRayCRDDir(t), "ray.io_rayclusters.yaml")); err != nil {
		t.Error(err)
	}
	files := testutil.MustKubeRaySampleFiles(t)
	if !strings.Contains(strings.Join(files, "\n"), filepath.Join("pytorch-mnist", "ray-job.pytorch-mnist.yaml")) {
		t.Errorf("the samples in subdirectories are not listed: %q", files)
	}
}

// findKubeRayEnv makes the test binary, run again by TestKubeRayModuleUnavailableIsExplained, look the module up
// and print the error: FindKubeRayModule keeps its first answer for the rest of the process.
const findKubeRayEnv = "MANTA_TEST_FIND_KUBERAY"

func TestMain(m *testing.M) {
	if os.Getenv(findKubeRayEnv) != "" {
		_, err := testutil.FindKubeRayModule()
		fmt.Print(err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Without the module in the cache and without a proxy to fetch it from, the error says what failed and why.
func TestKubeRayModuleUnavailableIsExplained(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), findKubeRayEnv+"=1", "GOMODCACHE="+t.TempDir(), "GOPROXY=off", "GOFLAGS=-modcacherw")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("looking the module up in a process of its own: %v", err)
	}
	msg := string(out)
	if msg == "<nil>" {
		t.Fatal("found the module in an empty module cache with GOPROXY=off")
	}
	t.Log(msg)
	for _, want := range []string{"fetching KubeRay's CRDs and samples", "go mod download -json " + testutil.KubeRayModule, "GOPROXY=off"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not say %q:\n%v", want, msg)
		}
	}
}
