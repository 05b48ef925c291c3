package testutil

import (
	"path/filepath"
	"testing"
)

// GatewayAPICRDs are the Gateway API's standard CRDs for Gateways, HTTPRoutes and GatewayClasses, from the
// sigs.k8s.io/gateway-api module go.mod requires, for an envtest that serves them (RayService incremental upgrades).
// Nothing runs a Gateway implementation there: a test plays one by writing the objects' status. The files are named
// one by one: the standard directory also holds a ValidatingAdmissionPolicy, which is not a CRD.
func GatewayAPICRDs(t testing.TB) []string {
	t.Helper()
	dir := filepath.Join(moduleDir(t, "sigs.k8s.io/gateway-api"), "config", "crd", "standard")
	var files []string
	for _, kind := range []string{"gatewayclasses", "gateways", "httproutes"} {
		files = append(files, filepath.Join(dir, "gateway.networking.k8s.io_"+kind+".yaml"))
	}
	return files
}
