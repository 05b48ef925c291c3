package rayservice

//lint:file-ignore SA1019 the deprecated KubeRay thresholds are accepted and reported as unsupported, so they are read here

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/features"
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
		t := declaredUpgradeType(rs)
		if t == rayv1.NewClusterWithIncrementalUpgrade {
			// KubeRay checks the incremental options only with the gate on; with it off the type means no upgrade.
			if features.Enabled(features.RayServiceIncrementalUpgrade) {
				errs = append(errs, validateIncremental(rs, spec.Child("upgradeStrategy"))...)
			}
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
	// The clusters carry the service's annotations (clusterbuild.RayServiceCluster).
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
	if rs.Spec.ServiceUnhealthySecondThreshold != nil {
		out = append(out, "spec.serviceUnhealthySecondThreshold (deprecated: no effect, as in KubeRay)")
	}
	if rs.Spec.DeploymentUnhealthySecondThreshold != nil {
		out = append(out, "spec.deploymentUnhealthySecondThreshold (deprecated: no effect, as in KubeRay)")
	}
	for _, f := range clusterbuild.UnsupportedFields(clusterbuild.RayServiceCluster(rs, rs.Name)) {
		if rest, ok := strings.CutPrefix(f, "spec."); ok {
			f = "spec.rayClusterConfig." + rest
		}
		out = append(out, f)
	}
	return out
}

// validateIncremental checks what KubeRay checks of an incremental upgrade: the autoscaler (Serve's target
// capacity moves replicas), and options that can make progress.
func validateIncremental(rs *rayv1.RayService, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	o := rs.Spec.UpgradeStrategy.ClusterUpgradeOptions
	opts := path.Child("clusterUpgradeOptions")
	if o == nil {
		errs = append(errs, field.Required(opts, "required for NewClusterWithIncrementalUpgrade"))
		o = &rayv1.ClusterUpgradeOptions{StepSizePercent: ptr.To[int32](0), IntervalSeconds: ptr.To[int32](1), GatewayClassName: "-"}
	}
	maxSurge := ptr.Deref(o.MaxSurgePercent, 100)
	if maxSurge < 0 || maxSurge > 100 {
		errs = append(errs, field.Invalid(opts.Child("maxSurgePercent"), maxSurge, "must be between 0 and 100"))
	}
	switch {
	case o.StepSizePercent == nil:
		errs = append(errs, field.Required(opts.Child("stepSizePercent"), "required for NewClusterWithIncrementalUpgrade"))
	case *o.StepSizePercent < 0 || *o.StepSizePercent > 100:
		errs = append(errs, field.Invalid(opts.Child("stepSizePercent"), *o.StepSizePercent, "must be between 0 and 100"))
	case *o.StepSizePercent > maxSurge:
		errs = append(errs, field.Invalid(opts.Child("stepSizePercent"), *o.StepSizePercent,
			fmt.Sprintf("must be less than or equal to maxSurgePercent (%d)", maxSurge)))
	}
	if o.IntervalSeconds == nil {
		errs = append(errs, field.Required(opts.Child("intervalSeconds"), "required for NewClusterWithIncrementalUpgrade"))
	} else if *o.IntervalSeconds <= 0 {
		errs = append(errs, field.Invalid(opts.Child("intervalSeconds"), *o.IntervalSeconds, "must be greater than 0"))
	}
	if o.GatewayClassName == "" {
		errs = append(errs, field.Required(opts.Child("gatewayClassName"), "required for NewClusterWithIncrementalUpgrade"))
	}
	if !ptr.Deref(rs.Spec.RayClusterSpec.EnableInTreeAutoscaling, false) {
		errs = append(errs, field.Required(field.NewPath("spec", "rayClusterConfig", "enableInTreeAutoscaling"),
			"NewClusterWithIncrementalUpgrade needs the Ray autoscaler"))
	}
	return errs
}

func unsupportedMessage(fields []string) string {
	return "unsupported fields: " + strings.Join(fields, ", ")
}
