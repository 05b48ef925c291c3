package testutil

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GatewayAPICRDs are the Gateway API's standard CRDs for Gateways, HTTPRoutes and GatewayClasses, from the
// sigs.k8s.io/gateway-api module go.mod requires, for an envtest that serves them (RayService incremental upgrades).
// Nothing runs a Gateway implementation there: a test plays one by writing the objects' status. The files are named
// one by one: the standard directory also holds a ValidatingAdmissionPolicy, which is not a CRD.
func GatewayAPICRDs(t testing.TB) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api")
	cmd.Dir = MustRepoRoot(t)
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("finding the gateway-api module (go mod download fetches it): %v %s", err, out)
	}
	var files []string
	for _, kind := range []string{"gatewayclasses", "gateways", "httproutes"} {
		files = append(files, filepath.Join(dir, "config", "crd", "standard", "gateway.networking.k8s.io_"+kind+".yaml"))
	}
	return files
}
