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
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/features"
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
		errs = append(errs, gcsBackend(spec, path)...)
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
		errs = append(errs, autoscalerV2Fields(spec, path)...)
	}
	errs = append(errs, historyServer(spec, path)...)
	errs = append(errs, gatedOff(spec, path)...)
	if o := spec.AutoscalerOptions; o != nil {
		op := path.Child("autoscalerOptions")
		if t := o.IdleTimeoutSeconds; t != nil && *t < 0 {
			errs = append(errs, field.Invalid(op.Child("idleTimeoutSeconds"), *t, fmt.Sprintf("autoscalerOptions.idleTimeoutSeconds must be non-negative, got %d", *t)))
		}
		// Users' autoscalerOptions.args may run $KUBERAY_GEN_AUTOSCALER_START_CMD; a value of their own would
		// silently replace the command the operator generates.
		if i := slices.IndexFunc(o.Env, func(e corev1.EnvVar) bool { return e.Name == clusterbuild.EnvAutoscalerStartCmd }); i >= 0 {
			errs = append(errs, field.Forbidden(op.Child("env").Key(clusterbuild.EnvAutoscalerStartCmd),
				fmt.Sprintf("autoscalerOptions.env must not contain %s: it is managed by the operator and injected automatically into the autoscaler container", clusterbuild.EnvAutoscalerStartCmd)))
		}
	}
	return errs
}

// AutoscalerV1RestartPolicy is KubeRay's warning (not an error: the cluster still runs) about worker groups that
// restart their pods in place under an explicitly chosen autoscaler v1, which should let them end instead: empty when
// there is nothing to say.
func AutoscalerV1RestartPolicy(spec *rayv1.RayClusterSpec, path *field.Path) string {
	if !ptr.Deref(spec.EnableInTreeAutoscaling, false) || spec.AutoscalerOptions == nil || ptr.Deref(spec.AutoscalerOptions.Version, "") != rayv1.AutoscalerVersionV1 {
		return ""
	}
	var groups, fields []string
	for i, g := range spec.WorkerGroupSpecs {
		if p := g.Template.Spec.RestartPolicy; p != "" && p != corev1.RestartPolicyNever {
			groups = append(groups, g.GroupName)
			fields = append(fields, path.Child("workerGroupSpecs").Index(i).Child("template", "spec", "restartPolicy").String())
		}
	}
	if len(groups) == 0 {
		return ""
	}
	return fmt.Sprintf("%s: restartPolicy for worker groups [%s] should be Never or unset when using autoscaler V1",
		strings.Join(fields, ", "), strings.Join(groups, ", "))
}

// minRayVersionForPriority is the first Ray whose autoscaler reads a worker group's priority.
var minRayVersionForPriority = version.MustParseGeneric("2.56.0")

// autoscalerV2Fields refuses, as KubeRay does, the worker group fields only autoscaler v2 reads (idleTimeoutSeconds,
// priority) on a cluster that does not ask for it, and a priority the cluster's Ray version cannot read. Autoscaler
// v2 is asked for by autoscalerOptions.version or, as before KubeRay 1.4, by the head's RAY_enable_autoscaler_v2.
func autoscalerV2Fields(spec *rayv1.RayClusterSpec, path *field.Path) field.ErrorList {
	v2 := false
	if o := spec.AutoscalerOptions; o != nil && o.Version != nil && *o.Version == rayv1.AutoscalerVersionV2 {
		v2 = true
	}
	for _, e := range spec.HeadGroupSpec.Template.Spec.Containers[clusterbuild.RayContainerIndex].Env {
		if e.Name == clusterbuild.EnvAutoscalerV2 && (e.Value == "1" || e.Value == "true") {
			v2 = true
		}
	}
	var errs field.ErrorList
	for i, g := range spec.WorkerGroupSpecs {
		gp := path.Child("workerGroupSpecs").Index(i)
		if t := g.IdleTimeoutSeconds; t != nil {
			switch {
			case *t < 0:
				errs = append(errs, field.Invalid(gp.Child("idleTimeoutSeconds"), *t, fmt.Sprintf("worker group %s: idleTimeoutSeconds must be non-negative, got %d", g.GroupName, *t)))
			case !v2:
				errs = append(errs, field.Forbidden(gp.Child("idleTimeoutSeconds"), fmt.Sprintf(
					"worker group %s: idleTimeoutSeconds is set, but autoscaler v2 is not enabled. Please set .spec.autoscalerOptions.version to 'v2' (or set %s environment variable to 'true' in the head pod if using KubeRay < 1.4.0)",
					g.GroupName, clusterbuild.EnvAutoscalerV2)))
			}
		}
		if p := ptr.Deref(g.Priority, 0); p != 0 {
			pp := gp.Child("priority")
			if spec.RayVersion == "" {
				errs = append(errs, field.Forbidden(pp, fmt.Sprintf("worker group %s: priority is set, but RayVersion was not specified. Ray version %s or later is required", g.GroupName, minRayVersionForPriority)))
				continue
			}
			v, err := version.ParseGeneric(spec.RayVersion)
			switch {
			case err != nil:
				errs = append(errs, field.Invalid(path.Child("rayVersion"), spec.RayVersion, fmt.Sprintf("worker group %s: priority is set, but RayVersion format is invalid: %s, %v", g.GroupName, spec.RayVersion, err)))
			case v.LessThan(minRayVersionForPriority):
				errs = append(errs, field.Forbidden(pp, fmt.Sprintf("worker group %s: priority is set, but minimum Ray version is %s, got %s", g.GroupName, minRayVersionForPriority, spec.RayVersion)))
			case !v2:
				errs = append(errs, field.Forbidden(pp, fmt.Sprintf("worker group %s: priority is set to %d, but autoscaler v2 is not enabled. Priority is only supported with autoscaler v2 enabled", g.GroupName, p)))
			}
		}
	}
	return append(errs, authOptions(spec, path)...)
}

// authOptions refuses what KubeRay refuses about token authentication: a Ray too old to have it (2.52), or to
// check Kubernetes tokens (2.55), and enableK8sTokenAuth without mode token or beside a secretName it would ignore.
func authOptions(spec *rayv1.RayClusterSpec, path *field.Path) field.ErrorList {
	o := spec.AuthOptions
	if o == nil {
		return nil
	}
	ap := path.Child("authOptions")
	k8s := ptr.Deref(o.EnableK8sTokenAuth, false)
	if o.Mode != rayv1.AuthModeToken {
		if k8s {
			return field.ErrorList{field.Invalid(ap.Child("enableK8sTokenAuth"), true, fmt.Sprintf("needs %s: token", ap.Child("mode")))}
		}
		return nil
	}
	rv := path.Child("rayVersion")
	if spec.RayVersion == "" {
		return field.ErrorList{field.Required(rv, fmt.Sprintf("%s: token needs Ray 2.52.0 or later; say which Ray the images run", ap.Child("mode")))}
	}
	v, err := version.ParseGeneric(spec.RayVersion)
	if err != nil { // the parser's message repeats the value and says nothing more
		return field.ErrorList{field.Invalid(rv, spec.RayVersion, fmt.Sprintf("%q is not a version; %s: token needs Ray 2.52.0 or later", spec.RayVersion, ap.Child("mode")))}
	}
	if v.LessThan(version.MustParseGeneric("2.52.0")) {
		return field.ErrorList{field.Invalid(rv, spec.RayVersion, fmt.Sprintf("%s: %s: token needs Ray 2.52.0 or later", spec.RayVersion, ap.Child("mode")))}
	}
	if !k8s {
		return nil
	}
	if v.LessThan(version.MustParseGeneric("2.55.0")) {
		return field.ErrorList{field.Invalid(rv, spec.RayVersion, fmt.Sprintf("%s: %s needs Ray 2.55.0 or later", spec.RayVersion, ap.Child("enableK8sTokenAuth")))}
	}
	if ptr.Deref(o.SecretName, "") != "" {
		return field.ErrorList{field.Forbidden(ap.Child("secretName"), fmt.Sprintf("Ray checks Kubernetes tokens when %s is true, so no token Secret is used", ap.Child("enableK8sTokenAuth")))}
	}
	return nil
}

// NoK8sTokenAuth refuses enableK8sTokenAuth in the cluster spec of a RayJob or a RayService, as KubeRay does: their
// operator and submitter calls carry the shared token, not a ServiceAccount token Ray would accept.
func NoK8sTokenAuth(spec *rayv1.RayClusterSpec, path *field.Path) field.ErrorList {
	if spec == nil || !clusterbuild.K8sTokenAuth(spec) {
		return nil
	}
	return field.ErrorList{field.Forbidden(path.Child("authOptions", "enableK8sTokenAuth"), "Kubernetes token authentication is for standalone RayClusters only")}
}

// autoscaling refuses what KubeRay refuses about the autoscaler: autoscaler v2 asked for by env without the
// autoscaler, a suspended worker group the autoscaler would scale anyway, the version chosen twice, and pods that
// restart in place under autoscaler v2 (which replaces dead Ray nodes itself).
func autoscaling(c *rayv1.RayCluster, path *field.Path) field.ErrorList {
	s := &c.Spec
	v2Env, hasV2Env := corev1.EnvVar{}, false
	for _, e := range s.HeadGroupSpec.Template.Spec.Containers[clusterbuild.RayContainerIndex].Env {
		if e.Name == clusterbuild.EnvAutoscalerV2 {
			v2Env, hasV2Env = e, true
			break
		}
	}
	head := path.Child("headGroupSpec", "template", "spec")
	envPath := head.Child("containers").Index(clusterbuild.RayContainerIndex).Child("env").Key(clusterbuild.EnvAutoscalerV2)
	enable := path.Child("enableInTreeAutoscaling")
	if !clusterbuild.AutoscalingEnabled(c) {
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
	env := h.Template.Spec.Containers[clusterbuild.RayContainerIndex].Env
	hasEnv := func(name string) bool {
		return slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
	}
	opts := path.Child("gcsFaultToleranceOptions")
	annotations := field.NewPath("metadata", "annotations")
	head := path.Child("headGroupSpec")
	o := c.Spec.GcsFaultToleranceOptions
	var e *field.Error
	switch {
	case o != nil && c.Annotations[clusterbuild.AnnotationFTEnabled] != "":
		e = field.Forbidden(annotations.Key(clusterbuild.AnnotationFTEnabled), fmt.Sprintf("set together with %s; use only the options", opts))
	case !clusterbuild.GCSFaultTolerance(c) && o == nil && hasEnv(clusterbuild.EnvRedisAddress):
		e = field.Forbidden(head.Child("template"), fmt.Sprintf("%s is set, which enables GCS fault tolerance; set %s instead", clusterbuild.EnvRedisAddress, opts))
	case o != nil && h.RayStartParams["redis-password"] != "":
		e = field.Forbidden(head.Child("rayStartParams").Key("redis-password"), fmt.Sprintf("use %s", opts.Child("redisPassword")))
	case o != nil && hasEnv(clusterbuild.EnvRedisPassword):
		e = field.Forbidden(head.Child("template"), fmt.Sprintf("REDIS_PASSWORD is set; use %s", opts.Child("redisPassword")))
	case o != nil && hasEnv(clusterbuild.EnvRedisAddress):
		e = field.Forbidden(head.Child("template"), fmt.Sprintf("RAY_REDIS_ADDRESS is set; use %s", opts.Child("redisAddress")))
	case o != nil && c.Annotations[clusterbuild.AnnotationExternalStorageNamespace] != "":
		e = field.Forbidden(annotations.Key(clusterbuild.AnnotationExternalStorageNamespace), fmt.Sprintf("use %s", opts.Child("externalStorageNamespace")))
	case h.RayStartParams["redis-username"] != "" || hasEnv(clusterbuild.EnvRedisUsername):
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

// gatedOff refuses, as KubeRay does, the fields whose feature gate --feature-gates turned off (see internal/features).
func gatedOff(spec *rayv1.RayClusterSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	off := func(f features.Gate) string { return fmt.Sprintf("the %s feature gate is off (--feature-gates)", f) }
	if spec.NetworkPolicy != nil && !features.Enabled(features.RayClusterNetworkPolicy) {
		errs = append(errs, field.Forbidden(path.Child("networkPolicy"), off(features.RayClusterNetworkPolicy)))
	}
	if spec.TLSOptions != nil && !features.Enabled(features.RayClusterMTLS) {
		errs = append(errs, field.Forbidden(path.Child("tlsOptions"), off(features.RayClusterMTLS)))
	}
	if spec.HistoryServerOptions != nil && !features.Enabled(features.RayClusterHistoryServer) {
		errs = append(errs, field.Forbidden(path.Child("historyServerOptions"), off(features.RayClusterHistoryServer)))
	}
	if o := spec.GcsFaultToleranceOptions; o != nil && o.Backend == rayv1.GcsFaultToleranceBackendRocksDB && !features.Enabled(features.GCSFaultToleranceEmbeddedStorage) {
		errs = append(errs, field.Forbidden(path.Child("gcsFaultToleranceOptions", "backend"), off(features.GCSFaultToleranceEmbeddedStorage)))
	}
	if !features.Enabled(features.RayJobDeletionPolicy) {
		for i, g := range spec.WorkerGroupSpecs {
			if ptr.Deref(g.Suspend, false) {
				errs = append(errs, field.Forbidden(path.Child("workerGroupSpecs").Index(i).Child("suspend"),
					fmt.Sprintf("worker group %q can be suspended only with the %s feature gate on (--feature-gates)", g.GroupName, features.RayJobDeletionPolicy)))
			}
		}
	}
	return errs
}
