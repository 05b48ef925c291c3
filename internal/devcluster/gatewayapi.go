package devcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// GatewayAPIModule is the Go module whose standard-channel CRDs the dev cluster installs: RayServices upgraded with
// NewClusterWithIncrementalUpgrade route traffic through a Gateway and an HTTPRoute, which an operator can create
// only where the API server serves them. No Gateway implementation runs in the dev cluster: the objects are
// stored, nothing programs them or writes their status.
const GatewayAPIModule = "sigs.k8s.io/gateway-api"

// gatewayAPIKinds are the CRDs installed, by plural (gateway.networking.k8s.io_<plural>.yaml). The standard
// directory holds more (GRPCRoutes, ReferenceGrants, ...) and a ValidatingAdmissionPolicy, which is not a CRD.
var gatewayAPIKinds = []string{"gatewayclasses", "gateways", "httproutes"}

// GatewayAPICRDs returns the files of the Gateway API's GatewayClass, Gateway and HTTPRoute CRDs (v1, standard
// channel) in the version of GatewayAPIModule that Manta's go.mod requires, found with `go list -m` from the
// repository root (the module cache holds it once `go mod download` ran).
func GatewayAPICRDs(root string) ([]string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", GatewayAPIModule)
	cmd.Dir = root
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return nil, fmt.Errorf("devcluster: finding the Gateway API CRDs, module %s (run `go mod download %[1]s` in %s): %v", GatewayAPIModule, root, err)
	}
	var files []string
	for _, kind := range gatewayAPIKinds {
		f := filepath.Join(dir, "config", "crd", "standard", "gateway.networking.k8s.io_"+kind+".yaml")
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("devcluster: Gateway API CRD: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}
