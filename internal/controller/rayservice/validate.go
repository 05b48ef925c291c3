package rayservice

//lint:file-ignore SA1019 the deprecated KubeRay thresholds are accepted and reported as unsupported, so they are read here

import (
	"fmt"
	"strings"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/builder"
	"github.com/manta-dev/manta/internal/ray"
)

// validate finds what stops the service from being reconciled at all; the message names the field.
func validate(rs *rayv1.RayService) string {
	if len(rs.Name) > MaxNameLength {
		return fmt.Sprintf("metadata.name: RayService name %q is longer than %d characters", rs.Name, MaxNameLength)
	}
	if v, ok := rs.Annotations[AnnotationInitializingTimeout]; ok {
		if _, ok := initializingTimeout(rs); !ok {
			return fmt.Sprintf("metadata.annotations[%s]: %q is neither a positive Go duration nor a positive number of seconds", AnnotationInitializingTimeout, v)
		}
	}
	if rs.Spec.ServeConfigV2 != "" {
		if _, err := ray.ServeConfigToJSON(rs.Spec.ServeConfigV2); err != nil {
			return "spec.serveConfigV2: " + err.Error()
		}
	}
	if u := rs.Spec.UpgradeStrategy; u != nil {
		t := upgradeType(rs)
		if t == rayv1.NewClusterWithIncrementalUpgrade {
			return "spec.upgradeStrategy.type: NewClusterWithIncrementalUpgrade is not supported by Manta yet; use NewCluster or None"
		}
		if u.ClusterUpgradeOptions != nil {
			return fmt.Sprintf("spec.upgradeStrategy.clusterUpgradeOptions: only used with NewClusterWithIncrementalUpgrade, not %s", t)
		}
	}
	spec := &rs.Spec.RayClusterSpec
	if spec.Suspend != nil && *spec.Suspend {
		return "spec.rayClusterConfig.suspend: a RayService's cluster cannot be suspended on its own; use spec.suspend"
	}
	if m := spec.ManagedBy; m != nil && *m != rayv1.KubeRayController {
		return fmt.Sprintf("spec.rayClusterConfig.managedBy: %q would leave the RayService's clusters to another controller; leave it unset", *m)
	}
	if hs := spec.HeadGroupSpec.HeadService; hs != nil && hs.Name != "" {
		// Active and pending clusters would share one head Service, and the pending cluster's dashboard calls would
		// reach the active cluster's head.
		return "spec.rayClusterConfig.headGroupSpec.headService.metadata.name: a RayService's clusters each need their own head Service; leave the name unset (clients use <rayservice>-head-svc)"
	}
	if len(spec.HeadGroupSpec.Template.Spec.Containers) == 0 {
		return "spec.rayClusterConfig.headGroupSpec.template.spec.containers: the head needs at least one container"
	}
	seen := map[string]bool{}
	for i, g := range spec.WorkerGroupSpecs {
		if g.GroupName == "" {
			return fmt.Sprintf("spec.rayClusterConfig.workerGroupSpecs[%d].groupName: must not be empty", i)
		}
		if seen[g.GroupName] {
			return fmt.Sprintf("spec.rayClusterConfig.workerGroupSpecs[%d].groupName: %q is used twice", i, g.GroupName)
		}
		seen[g.GroupName] = true
		if len(g.Template.Spec.Containers) == 0 {
			return fmt.Sprintf("spec.rayClusterConfig.workerGroupSpecs[%d].template.spec.containers: worker group %q needs at least one container", i, g.GroupName)
		}
	}
	return ""
}

// unsupportedFields lists what the service asks for that Manta does not do, in a stable order. The service is
// reconciled without them; the UnsupportedFeature condition and an event name them.
func unsupportedFields(rs *rayv1.RayService) []string {
	var out []string
	if upgradeType(rs) == rayv1.NewClusterWithIncrementalUpgrade {
		out = append(out, "spec.upgradeStrategy.type=NewClusterWithIncrementalUpgrade")
	}
	if rs.Spec.ServiceUnhealthySecondThreshold != nil {
		out = append(out, "spec.serviceUnhealthySecondThreshold (deprecated: no effect, as in KubeRay)")
	}
	if rs.Spec.DeploymentUnhealthySecondThreshold != nil {
		out = append(out, "spec.deploymentUnhealthySecondThreshold (deprecated: no effect, as in KubeRay)")
	}
	for _, f := range builder.UnsupportedFields(builder.RayServiceCluster(rs, rs.Name)) {
		if rest, ok := strings.CutPrefix(f, "spec."); ok {
			f = "spec.rayClusterConfig." + rest
		}
		out = append(out, f)
	}
	return out
}

func unsupportedMessage(fields []string) string {
	return "unsupported fields: " + strings.Join(fields, ", ")
}
