package testutil

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/manta-dev/manta/internal/version"
)

// The module found is the version hack/tools/kuberay/go.mod pins, with KubeRay's CRDs and samples in it, and it is
// the KubeRay release `manta version` says Manta serves.
func TestKubeRayModuleDirIsThePinnedVersion(t *testing.T) {
	gomod, err := os.ReadFile(filepath.Join(MustRepoRoot(t), "hack", "tools", "kuberay", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^require ` + regexp.QuoteMeta(KubeRayModule) + ` (v\S+)$`).FindSubmatch(gomod)
	if m == nil {
		t.Fatalf("hack/tools/kuberay/go.mod does not require %s:\n%s", KubeRayModule, gomod)
	}
	if pinned := string(m[1]); version.KubeRayRelease != pinned {
		t.Errorf("version.KubeRayRelease is %s, hack/tools/kuberay/go.mod pins %s", version.KubeRayRelease, pinned)
	}
	dir := KubeRayModuleDir(t)
	if want := "@" + string(m[1]); !strings.HasSuffix(dir, want) {
		t.Errorf("module directory %s, want the pinned %s", dir, want)
	}
	if _, err := os.Stat(filepath.Join(KubeRayCRDDir(t), "ray.io_rayclusters.yaml")); err != nil {
		t.Error(err)
	}
	files := MustKubeRaySampleFiles(t)
	if !strings.Contains(strings.Join(files, "\n"), filepath.Join("pytorch-mnist", "ray-job.pytorch-mnist.yaml")) {
		t.Errorf("the samples in subdirectories are not listed: %q", files)
	}
}

// Without the module in the cache and without a proxy to fetch it from, the error says what failed and why.
func TestKubeRayModuleUnavailableIsExplained(t *testing.T) {
	t.Setenv("GOMODCACHE", t.TempDir())
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOFLAGS", "-modcacherw")
	_, err := downloadKubeRayModule()
	if err == nil {
		t.Fatal("found the module in an empty module cache with GOPROXY=off")
	}
	t.Log(err)
	for _, want := range []string{"fetching KubeRay's CRDs and samples", "go mod download -json " + KubeRayModule, "GOPROXY=off"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}
