package testutil

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// KubeRayModule is the KubeRay Go module whose CRDs (config/crd/bases) and samples (config/samples) the tests
// compare Manta with. Its version is pinned in one place: hack/tools/kuberay/go.mod.
const KubeRayModule = "github.com/ray-project/kuberay/ray-operator"

var kuberayModule struct {
	once sync.Once
	dir  string
	err  error
}

// FindKubeRayModule returns the directory of the pinned KubeRay module in the Go module cache, downloading the
// module first when the cache does not hold it (a fresh clone, an empty GOMODCACHE). The result is kept for the
// rest of the process.
func FindKubeRayModule() (string, error) {
	kuberayModule.once.Do(func() { kuberayModule.dir, kuberayModule.err = downloadKubeRayModule() })
	return kuberayModule.dir, kuberayModule.err
}

func downloadKubeRayModule() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	pin := filepath.Join(root, "hack", "tools", "kuberay")
	// `go mod download -json` with no version takes the one the pinning module requires; it only reads the cache
	// when the module is already there.
	cmd := exec.Command("go", "mod", "download", "-json", KubeRayModule)
	cmd.Dir = pin
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var mod struct {
		Path, Version, Dir, Error string
	}
	if err := json.Unmarshal(stdout.Bytes(), &mod); err != nil && runErr == nil {
		runErr = fmt.Errorf("reading its output %q: %w", stdout.String(), err)
	}
	if mod.Error != "" {
		runErr = fmt.Errorf("%s", mod.Error)
	}
	if runErr == nil && mod.Dir == "" {
		runErr = fmt.Errorf("no module directory in its output %q", stdout.String())
	}
	if runErr != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			runErr = fmt.Errorf("%w\n%s", runErr, msg)
		}
		return "", fmt.Errorf("fetching KubeRay's CRDs and samples: `go mod download -json %s` in %s failed "+
			"(the module comes from GOPROXY=%s into GOMODCACHE; without network access, fill the module cache first): %v",
			KubeRayModule, pin, goEnv("GOPROXY"), runErr)
	}
	for _, sub := range []string{"config/crd/bases", "config/samples"} {
		if fi, err := os.Stat(filepath.Join(mod.Dir, sub)); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("%s@%s in %s has no %s directory", KubeRayModule, mod.Version, mod.Dir, sub)
		}
	}
	return mod.Dir, nil
}

func goEnv(name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// KubeRayModuleDir is FindKubeRayModule for tests: it fails the test, never skips it, when the module cannot be had.
func KubeRayModuleDir(t testing.TB) string {
	t.Helper()
	dir, err := FindKubeRayModule()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// KubeRayCRDDir is the directory of KubeRay's CRDs (ray.io_rayclusters.yaml, ray.io_rayjobs.yaml,
// ray.io_rayservices.yaml) in the pinned module.
func KubeRayCRDDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(KubeRayModuleDir(t), "config", "crd", "bases")
}

// KubeRaySampleFiles lists every YAML file of KubeRay's samples in the pinned module, in its subdirectories too
// (pytorch-mnist/ray-job.pytorch-mnist.yaml), sorted. Not all of them hold ray.io objects.
func KubeRaySampleFiles() ([]string, error) {
	mod, err := FindKubeRayModule()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(mod, "config", "samples")
	var files []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return err
	})
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("no samples in %s", dir)
	}
	return files, err
}

// MustKubeRaySampleFiles is KubeRaySampleFiles for tests.
func MustKubeRaySampleFiles(t testing.TB) []string {
	t.Helper()
	files, err := KubeRaySampleFiles()
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// kuberaySampleFillIns are, per sample file, the placeholders the sample tells its user to replace ("replace
// $KSA_NAME with your Kubernetes Service Account") and the values the tests put in. Left as they are, the pods
// cannot be created ("$KSA_NAME" is not a valid service account name), on KubeRay as on Manta.
var kuberaySampleFillIns = map[string][]string{
	"ray-service.vllm-tpu-v6e-singlehost.yaml": {
		"$KSA_NAME", "vllm-ksa",
		"$VLLM_IMAGE", "vllm/vllm-tpu:nightly",
		"$GSBUCKET", "vllm-cache",
	},
}

// ReadKubeRaySample reads a KubeRay sample file as a user applies it: with the placeholders it asks the user to
// replace filled in (only those: "$POD_IP" in a container command stays). Tests that check what the API server
// accepts read the files unchanged instead.
func ReadKubeRaySample(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fill := kuberaySampleFillIns[filepath.Base(path)]
	for i := 0; i+1 < len(fill); i += 2 {
		if !bytes.Contains(data, []byte(fill[i])) {
			return nil, fmt.Errorf("%s: no placeholder %s to fill in (the sample changed: update kuberaySampleFillIns)", path, fill[i])
		}
		data = bytes.ReplaceAll(data, []byte(fill[i]), []byte(fill[i+1]))
	}
	return data, nil
}

// MustKubeRaySampleFilesNamed is MustKubeRaySampleFiles limited to the files whose base name starts with prefix
// ("ray-service."). It fails the test when there are fewer than atLeast: the count of the pinned release, so that
// a reading that went wrong does not pass with nothing checked.
func MustKubeRaySampleFilesNamed(t testing.TB, prefix string, atLeast int) []string {
	t.Helper()
	var files []string
	for _, f := range MustKubeRaySampleFiles(t) {
		if strings.HasPrefix(filepath.Base(f), prefix) {
			files = append(files, f)
		}
	}
	if len(files) < atLeast {
		t.Fatalf("%d KubeRay samples named %s*, want at least %d: %q", len(files), prefix, atLeast, files)
	}
	return files
}
