package rayservice

//lint:file-ignore SA1019 the deprecated KubeRay thresholds are accepted and reported as unsupported, so they are read here

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/builder"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/validation"
)

// validate finds what stops the service from being reconciled at all, each error naming its field: the service's
// own rules, then the RayCluster rules for rayClusterConfig (internal/validation), as for the clusters it makes.
func validate(rs *rayv1.RayService) field.ErrorList {
	var errs field.ErrorList
	if len(rs.Name) > MaxNameLength {
		errs = append(errs, &field.Error{Type: field.ErrorTypeTooLong, Field: "metadata.name", BadValue: rs.Name,
			Detail: fmt.Sprintf("RayService name %q is longer than %d characters", rs.Name, MaxNameLength)})
	}
	if v, ok := rs.Annotations[AnnotationInitializingTimeout]; ok {
		if _, ok := initializingTimeout(rs); !ok {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "annotations").Key(AnnotationInitializingTimeout), v,
				fmt.Sprintf("%q is neither a positive Go duration nor a positive number of seconds", v)))
		}
	}
	spec := field.NewPath("spec")
	if rs.Spec.ServeConfigV2 != "" {
		if _, err := ray.ServeConfigToJSON(rs.Spec.ServeConfigV2); err != nil {
			errs = append(errs, field.Invalid(spec.Child("serveConfigV2"), "(omitted)", err.Error()))
		}
	}
	if u := rs.Spec.UpgradeStrategy; u != nil {
		t := upgradeType(rs)
		if t == rayv1.NewClusterWithIncrementalUpgrade {
			errs = append(errs, &field.Error{Type: field.ErrorTypeNotSupported, Field: spec.Child("upgradeStrategy", "type").String(), BadValue: t,
				Detail: "NewClusterWithIncrementalUpgrade is not supported by Manta yet; use NewCluster or None"})
		} else if u.ClusterUpgradeOptions != nil {
			errs = append(errs, field.Forbidden(spec.Child("upgradeStrategy", "clusterUpgradeOptions"), fmt.Sprintf("only used with NewClusterWithIncrementalUpgrade, not %s", t)))
		}
	}
	cluster := spec.Child("rayClusterConfig")
	cs := &rs.Spec.RayClusterSpec
	if cs.Suspend != nil && *cs.Suspend {
		errs = append(errs, field.Forbidden(cluster.Child("suspend"), "a RayService's cluster cannot be suspended on its own; use spec.suspend"))
	}
	if m := cs.ManagedBy; m != nil && *m != rayv1.KubeRayController {
		errs = append(errs, field.Forbidden(cluster.Child("managedBy"), fmt.Sprintf("%q would leave the RayService's clusters to another controller; leave it unset", *m)))
	}
	if hs := cs.HeadGroupSpec.HeadService; hs != nil && hs.Name != "" {
		// Active and pending clusters would share one head Service, and the pending cluster's dashboard calls would
		// reach the active cluster's head.
		errs = append(errs, field.Forbidden(cluster.Child("headGroupSpec", "headService", "metadata", "name"),
			"a RayService's clusters each need their own head Service; leave the name unset (clients use <rayservice>-head-svc)"))
	}
	// The clusters carry the service's annotations (builder.RayServiceCluster).
	errs = append(errs, validation.NoK8sTokenAuth(cs, cluster)...)
	errs = append(errs, validation.ClusterSpec(cs, rs.Annotations, cluster)...)
	seen := map[string]bool{}
	for i, g := range cs.WorkerGroupSpecs {
		name := cluster.Child("workerGroupSpecs").Index(i).Child("groupName")
		if g.GroupName == "" {
			errs = append(errs, field.Required(name, "must not be empty"))
		} else if seen[g.GroupName] {
			errs = append(errs, &field.Error{Type: field.ErrorTypeDuplicate, Field: name.String(), BadValue: g.GroupName,
				Detail: fmt.Sprintf("%q is used twice", g.GroupName)})
		}
		seen[g.GroupName] = true
	}
	return errs
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
