package validation

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/features"
)

// A feature gate turned off (--feature-gates) refuses the spec field it gates, as KubeRay v1.7.0's ValidateRayClusterSpec
// does; on (Manta's default) the field passes this rule.
func TestGatedFields(t *testing.T) {
	for _, c := range []struct {
		gate   features.Gate
		mutate func(*rayv1.RayCluster)
		want   string
	}{
		{features.RayClusterNetworkPolicy, func(c *rayv1.RayCluster) { c.Spec.NetworkPolicy = &rayv1.NetworkPolicyConfig{} },
			"spec.networkPolicy: Forbidden: the RayClusterNetworkPolicy feature gate is off"},
		{features.RayClusterMTLS, func(c *rayv1.RayCluster) { c.Spec.TLSOptions = &rayv1.TLSOptions{} },
			"spec.tlsOptions: Forbidden: the RayClusterMTLS feature gate is off"},
		{features.RayClusterHistoryServer, func(c *rayv1.RayCluster) { c.Spec.HistoryServerOptions = &rayv1.HistoryServerOptions{} },
			"spec.historyServerOptions: Forbidden: the RayClusterHistoryServer feature gate is off"},
		{features.GCSFaultToleranceEmbeddedStorage, func(c *rayv1.RayCluster) {
			c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{Backend: rayv1.GcsFaultToleranceBackendRocksDB}
		}, "spec.gcsFaultToleranceOptions.backend: Forbidden: the GCSFaultToleranceEmbeddedStorage feature gate is off"},
		{features.RayJobDeletionPolicy, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Suspend = ptr.To(true) },
			`spec.workerGroupSpecs[0].suspend: Forbidden: worker group "small" can be suspended only with the RayJobDeletionPolicy feature gate on`},
	} {
		t.Run(string(c.gate), func(t *testing.T) {
			rc := cluster()
			c.mutate(rc)
			if msg := gatedOff(&rc.Spec, field.NewPath("spec")).ToAggregate(); msg != nil {
				t.Fatalf("gate on: %v", msg)
			}
			features.SetForTest(t, c.gate, false)
			errs := RayCluster(rc)
			if !strings.Contains(errs.ToAggregate().Error(), c.want) {
				t.Errorf("gate off: %v, want %q", errs, c.want)
			}
		})
	}
}
