package devcluster

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// SchedulerPluginsModule is the Go module (required by go.mod) whose config/crd/bases holds scheduler-plugins'
// PodGroup CRD (scheduling.x-k8s.io/v1alpha1).
const SchedulerPluginsModule = "sigs.k8s.io/scheduler-plugins"

// VolcanoCRDDir is the directory, under the repository root, of a minimal Volcano PodGroup CRD
// (scheduling.volcano.sh/v1beta1): Volcano's Go module volcano.sh/apis has the types but no CRD, and the module
// proxy serves no Volcano module that has one (volcano.sh/volcano is not served).
func VolcanoCRDDir(root string) string {
	return filepath.Join(root, "internal", "devcluster", "crds", "volcano")
}

// ModuleDir is where a Go module that the go.mod at root requires is on disk (`go list -m`, which downloads it
// when it is not yet in the module cache).
func ModuleDir(root, module string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = root
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return "", fmt.Errorf("finding the Go module %s (go mod download fetches it): %v %s", module, err, stderr)
	}
	return dir, nil
}

// SchedulerCRDPaths are the batch schedulers' PodGroup CRDs a dev cluster installs by default, so an operator
// started with --batch-scheduler volcano or scheduler-plugins (Manta's or KubeRay's) finds the kinds it
// creates and watches: Volcano's (VolcanoCRDDir) and scheduler-plugins' from its Go module. YuniKorn and KAI
// need no CRD from the operator's side.
func SchedulerCRDPaths(root string) ([]string, error) {
	dir, err := ModuleDir(root, SchedulerPluginsModule)
	if err != nil {
		return nil, err
	}
	return []string{VolcanoCRDDir(root), filepath.Join(dir, "config", "crd", "bases", "scheduling.x-k8s.io_podgroups.yaml")}, nil
}
