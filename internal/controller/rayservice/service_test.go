package rayservice

import (
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// configV1 is a serveConfigV2 of two applications, fruit_app and math_app.
const configV1 = `applications:
  - name: fruit_app
    import_path: fruit.deployment_graph
    route_prefix: /fruit
  - name: math_app
    import_path: conditional_dag.serve_dag
    route_prefix: /calc
`

// makeService is a RayService serving configV1 that deletes a replaced cluster 3 s after traffic left it.
func makeService(ns, name string) *rayv1.RayService {
	return testutil.MakeRayService(ns, name).ServeConfig(configV1).ClusterDeletionDelay(3).Obj()
}

// makeIncrementalService is makeService upgraded through a Gateway API HTTPRoute by 25 % steps.
func makeIncrementalService(ns, name string) *rayv1.RayService {
	rs := makeService(ns, name)
	rs.Spec.RayClusterSpec.EnableInTreeAutoscaling = ptr.To(true)
	rs.Spec.UpgradeStrategy = &rayv1.RayServiceUpgradeStrategy{
		Type: ptr.To(rayv1.NewClusterWithIncrementalUpgrade),
		ClusterUpgradeOptions: &rayv1.ClusterUpgradeOptions{
			StepSizePercent: ptr.To[int32](25), MaxSurgePercent: ptr.To[int32](50), IntervalSeconds: ptr.To[int32](60), GatewayClassName: "test-gateway-class",
		},
	}
	return rs
}
