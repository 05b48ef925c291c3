// Package validation holds the rules the schema cannot express, as pure functions returning field.ErrorList, for
// every caller that needs them: the RayCluster rules (RayCluster, ClusterSpec) serve the RayCluster controller and
// the cluster specs embedded in a RayJob and a RayService; Image serves the ImagePullJob controllers and the REST API.
// It imports no controller.
package validation

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/builder"
)

// MaxClusterNameLen leaves room in 63 characters for the suffixes of the names derived from a cluster's.
const MaxClusterNameLen = 53

// DefaultServiceAccount is the ServiceAccount of every pod that names none: never given the autoscaler's Role.
const DefaultServiceAccount = "default"

// Message is how a condition or an event reports validation errors: the first one, as "field: detail" (the rules
// are written so that the first error is the one to fix first).
func Message(errs field.ErrorList) string {
	if len(errs) == 0 {
		return ""
	}
	return errs[0].Field + ": " + errs[0].Detail
}

// RayCluster returns what in a RayCluster stops it from being reconciled: its name, then its spec (ClusterSpec).
func RayCluster(c *rayv1.RayCluster) field.ErrorList {
	var errs field.ErrorList
	name := field.NewPath("metadata", "name")
	if len(c.Name) > MaxClusterNameLen {
		errs = append(errs, &field.Error{Type: field.ErrorTypeTooLong, Field: name.String(), BadValue: c.Name,
			Detail: fmt.Sprintf("a RayCluster name may have at most %d characters, so that the names of its pods and Services fit", MaxClusterNameLen)})
	}
	if msgs := k8svalidation.IsDNS1035Label(c.Name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(name, c.Name, fmt.Sprintf("%q is not a DNS-1035 label (the head Service is named after it): %s", c.Name, strings.Join(msgs, "; "))))
	}
	return append(errs, ClusterSpec(&c.Spec, c.Annotations, field.NewPath("spec"))...)
}

// ClusterSpec returns what in a RayCluster spec stops the cluster from being reconciled, each error naming its field
// under path: spec for a RayCluster, spec.rayClusterSpec for a RayJob's, spec.rayClusterConfig for a RayService's.
// annotations are those of the cluster that will carry the spec (GCS fault tolerance can be asked for by
// annotation). The order is the order to fix them in: rules that read the head's Ray container run only once it
// exists.
func ClusterSpec(spec *rayv1.RayClusterSpec, annotations map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	h := &spec.HeadGroupSpec
	hp := path.Child("headGroupSpec")
	if hs := h.HeadService; hs != nil && hs.Name != "" {
		// The schema refuses it too; objects stored before that rule existed reach here.
		if msgs := k8svalidation.IsDNS1035Label(hs.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(hp.Child("headService", "metadata", "name"), hs.Name,
				fmt.Sprintf("%q is not a DNS-1035 label (clients reach the dashboard by this name): %s", hs.Name, strings.Join(msgs, "; "))))
		}
	}
	headOK := len(h.Template.Spec.Containers) > 0
	if !headOK {
		errs = append(errs, field.Required(hp.Child("template", "spec", "containers"), "the head needs at least one container"))
	}
	errs = append(errs, group(hp, h.RayStartParams, h.Resources, h.Labels)...)
	// A cluster as the rules about annotations see it (builder reads the spec and the annotations).
	c := &rayv1.RayCluster{Spec: *spec}
	c.Annotations = annotations
	if headOK {
		errs = append(errs, gcsFaultTolerance(c, path)...)
	}
	for i, g := range spec.WorkerGroupSpecs {
		gp := path.Child("workerGroupSpecs").Index(i)
		if len(g.Template.Spec.Containers) == 0 {
			errs = append(errs, field.Required(gp.Child("template", "spec", "containers"), fmt.Sprintf("worker group %q needs at least one container", g.GroupName)))
		}
		errs = append(errs, group(gp, g.RayStartParams, g.Resources, g.Labels)...)
	}
	if headOK {
		errs = append(errs, autoscaling(c, path)...)
	}
	return errs
}

// autoscaling refuses what KubeRay refuses about the autoscaler: autoscaler v2 asked for by env without the
// autoscaler, a suspended worker group the autoscaler would scale anyway, the version chosen twice, and pods that
// restart in place under autoscaler v2 (which replaces dead Ray nodes itself).
func autoscaling(c *rayv1.RayCluster, path *field.Path) field.ErrorList {
	s := &c.Spec
	v2Env, hasV2Env := corev1.EnvVar{}, false
	for _, e := range s.HeadGroupSpec.Template.Spec.Containers[builder.RayContainerIndex].Env {
		if e.Name == builder.EnvAutoscalerV2 {
			v2Env, hasV2Env = e, true
			break
		}
	}
	head := path.Child("headGroupSpec", "template", "spec")
	envPath := head.Child("containers").Index(builder.RayContainerIndex).Child("env").Key(builder.EnvAutoscalerV2)
	enable := path.Child("enableInTreeAutoscaling")
	if !builder.AutoscalingEnabled(c) {
		if hasV2Env && (v2Env.Value == "1" || v2Env.Value == "true") {
			return field.ErrorList{field.Invalid(envPath, v2Env.Value, fmt.Sprintf("%q asks for autoscaler v2, which needs %s: true", v2Env.Value, enable))}
		}
		return nil
	}
	for i, g := range s.WorkerGroupSpecs {
		if ptr.Deref(g.Suspend, false) {
			return field.ErrorList{field.Forbidden(path.Child("workerGroupSpecs").Index(i).Child("suspend"),
				fmt.Sprintf("worker group %q cannot be suspended while the autoscaler runs (%s)", g.GroupName, enable))}
		}
	}
	if sa := s.HeadGroupSpec.Template.Spec.ServiceAccountName; sa == DefaultServiceAccount {
		// Manta refuses this where KubeRay binds it: the autoscaler's Role would go to every pod of the namespace
		// that names no ServiceAccount.
		return field.ErrorList{field.Forbidden(head.Child("serviceAccountName"),
			fmt.Sprintf("%q cannot be given the autoscaler's Role (every pod of the namespace that names no ServiceAccount runs as it); name another, or none for a ServiceAccount of the cluster's own", sa))}
	}
	o := s.AutoscalerOptions
	if o == nil || o.Version == nil {
		return nil
	}
	version := path.Child("autoscalerOptions", "version")
	if hasV2Env {
		return field.ErrorList{field.Forbidden(envPath, fmt.Sprintf("%s also chooses the autoscaler version; use only %s", version, version))}
	}
	if *o.Version != rayv1.AutoscalerVersionV2 {
		return nil
	}
	restarts := func(p corev1.RestartPolicy) bool { return p != "" && p != corev1.RestartPolicyNever }
	if p := s.HeadGroupSpec.Template.Spec.RestartPolicy; restarts(p) {
		return field.ErrorList{field.Invalid(head.Child("restartPolicy"), p, fmt.Sprintf("%s; autoscaler v2 needs Never (or unset)", p))}
	}
	for i, g := range s.WorkerGroupSpecs {
		if p := g.Template.Spec.RestartPolicy; restarts(p) {
			return field.ErrorList{field.Invalid(path.Child("workerGroupSpecs").Index(i).Child("template", "spec", "restartPolicy"), p,
				fmt.Sprintf("%s; autoscaler v2 needs Never (or unset)", p))}
		}
	}
	return nil
}

// gcsFaultTolerance refuses what KubeRay refuses about GCS fault tolerance: two ways of saying it at once, and
// Redis settings outside gcsFaultToleranceOptions that would be silently overridden or half applied.
func gcsFaultTolerance(c *rayv1.RayCluster, path *field.Path) field.ErrorList {
	h := &c.Spec.HeadGroupSpec
	env := h.Template.Spec.Containers[builder.RayContainerIndex].Env
	hasEnv := func(name string) bool {
		return slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
	}
	opts := path.Child("gcsFaultToleranceOptions")
	annotations := field.NewPath("metadata", "annotations")
	head := path.Child("headGroupSpec")
	o := c.Spec.GcsFaultToleranceOptions
	var e *field.Error
	switch {
	case o != nil && c.Annotations[builder.AnnotationFTEnabled] != "":
		e = field.Forbidden(annotations.Key(builder.AnnotationFTEnabled), fmt.Sprintf("set together with %s; use only the options", opts))
	case !builder.GCSFaultTolerance(c) && o == nil && hasEnv(builder.EnvRedisAddress):
		e = field.Forbidden(head.Child("template"), fmt.Sprintf("%s is set, which enables GCS fault tolerance; set %s instead", builder.EnvRedisAddress, opts))
	case o != nil && h.RayStartParams["redis-password"] != "":
		e = field.Forbidden(head.Child("rayStartParams").Key("redis-password"), fmt.Sprintf("use %s", opts.Child("redisPassword")))
	case o != nil && hasEnv(builder.EnvRedisPassword):
		e = field.Forbidden(head.Child("template"), fmt.Sprintf("REDIS_PASSWORD is set; use %s", opts.Child("redisPassword")))
	case o != nil && hasEnv(builder.EnvRedisAddress):
		e = field.Forbidden(head.Child("template"), fmt.Sprintf("RAY_REDIS_ADDRESS is set; use %s", opts.Child("redisAddress")))
	case o != nil && c.Annotations[builder.AnnotationExternalStorageNamespace] != "":
		e = field.Forbidden(annotations.Key(builder.AnnotationExternalStorageNamespace), fmt.Sprintf("use %s", opts.Child("externalStorageNamespace")))
	case h.RayStartParams["redis-username"] != "" || hasEnv(builder.EnvRedisUsername):
		e = field.Forbidden(head, fmt.Sprintf("a Redis username in rayStartParams or env; use %s", opts.Child("redisUsername")))
	default:
		return nil
	}
	return field.ErrorList{e}
}

// group refuses what KubeRay refuses in a group: resources said both in rayStartParams and in `resources` (which
// one would Ray get?), rayStartParams labels (the `labels` field says them), labels that are not Kubernetes labels,
// and `resources` values that are not quantities (Ray could not be told them).
func group(path *field.Path, params, resources, labels map[string]string) field.ErrorList {
	var errs field.ErrorList
	if len(resources) > 0 {
		for _, k := range []string{"num-cpus", "num-gpus", "memory", "resources"} {
			if params[k] != "" {
				errs = append(errs, field.Forbidden(path, fmt.Sprintf("rayStartParams[%s] and resources both set the group's resources; use only one", k)))
				break
			}
		}
	}
	if _, ok := params["labels"]; ok {
		errs = append(errs, field.Forbidden(path.Child("rayStartParams").Key("labels"), fmt.Sprintf("not supported; use %s", path.Child("labels"))))
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if msgs := k8svalidation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, field.Invalid(path.Child("labels"), k, fmt.Sprintf("invalid key %q: %s", k, strings.Join(msgs, "; "))))
		}
		if msgs := k8svalidation.IsValidLabelValue(labels[k]); len(msgs) > 0 {
			errs = append(errs, field.Invalid(path.Child("labels").Key(k), labels[k], fmt.Sprintf("invalid value %q: %s", labels[k], strings.Join(msgs, "; "))))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(resources)) {
		if _, err := resource.ParseQuantity(resources[k]); err != nil {
			errs = append(errs, field.Invalid(path.Child("resources").Key(k), resources[k], fmt.Sprintf("%q is not a quantity: %v", resources[k], err)))
		}
	}
	return errs
}
