package rayjob

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/features"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/validation"
)

// Validate returns what in the RayJob the schema cannot refuse and the controller cannot run. Each error names
// its field; an invalid RayJob ends in ValidationFailed with these messages.
func Validate(j *rayv1.RayJob) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if len(j.Name) > MaxNameLength {
		errs = append(errs, field.TooLong(field.NewPath("metadata", "name"), j.Name, MaxNameLength))
	}
	errs = append(errs, validateCluster(j, spec)...)
	errs = append(errs, validateSubmission(j, spec)...)
	errs = append(errs, validateLifecycle(j, spec)...)
	errs = append(errs, validateDeletionStrategy(j, spec)...)
	errs = append(errs, validateEntrypoint(j, spec)...)
	errs = append(errs, validateBoolAnnotations(j)...)
	if s := &j.Spec; s.RayClusterSpec != nil && s.RayClusterSpec.Suspend != nil && *s.RayClusterSpec.Suspend {
		errs = append(errs, field.Forbidden(spec.Child("rayClusterSpec", "suspend"), "suspend the RayJob (spec.suspend), not its cluster"))
	}
	return errs
}

// boolAnnotations are Manta's RayJob annotations that take "true" or "false" (absent: "false").
var boolAnnotations = []string{AnnotationFailOnPermanentStartError, AnnotationSubmitBeforeClusterReady}

// validateBoolAnnotations refuses a value of a boolAnnotations annotation other than "true" or "false": a typo
// ("yes", "True") would otherwise leave the job on KubeRay's behaviour unseen.
func validateBoolAnnotations(j *rayv1.RayJob) field.ErrorList {
	var errs field.ErrorList
	for _, a := range boolAnnotations {
		if v, ok := j.Annotations[a]; ok && v != "true" && v != "false" {
			errs = append(errs, field.NotSupported(field.NewPath("metadata", "annotations").Key(a), v, []string{"true", "false"}))
		}
	}
	return errs
}

// validateCluster checks the cluster the RayJob runs on: one it selects (clusterSelector, which rules out what
// only a cluster of its own allows) or one it creates (rayClusterSpec, under the RayCluster rules).
func validateCluster(j *rayv1.RayJob, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	s := &j.Spec
	if len(s.ClusterSelector) > 0 {
		if s.ClusterSelector[rayv1.LabelCluster] == "" {
			errs = append(errs, field.Required(spec.Child("clusterSelector").Key(rayv1.LabelCluster), "the selector must name the cluster with ray.io/cluster"))
		}
		for k := range s.ClusterSelector {
			if k != rayv1.LabelCluster {
				errs = append(errs, field.NotSupported(spec.Child("clusterSelector").Key(k), k, []string{rayv1.LabelCluster}))
			}
		}
		if s.RayClusterSpec != nil {
			errs = append(errs, field.Forbidden(spec.Child("rayClusterSpec"), "set either rayClusterSpec or clusterSelector, not both"))
		}
		if s.Suspend {
			errs = append(errs, field.Forbidden(spec.Child("suspend"), "a RayJob that uses an existing cluster (clusterSelector) cannot be suspended"))
		}
		if ptr.Deref(s.BackoffLimit, 0) > 0 {
			errs = append(errs, field.Forbidden(spec.Child("backoffLimit"), "retries create a new cluster each; not possible with clusterSelector"))
		}
		if submissionMode(j) == rayv1.SidecarMode {
			errs = append(errs, field.Forbidden(spec.Child("submissionMode"), "SidecarMode needs a cluster the RayJob creates (rayClusterSpec), not clusterSelector"))
		}
		if s.ShutdownAfterJobFinishes {
			errs = append(errs, field.Forbidden(spec.Child("shutdownAfterJobFinishes"), "the RayJob never deletes a cluster it selected (clusterSelector)"))
		}
	} else if s.RayClusterSpec == nil {
		errs = append(errs, field.Required(spec.Child("rayClusterSpec"), "set rayClusterSpec or clusterSelector"))
	}
	if s.RayClusterSpec != nil {
		// The RayCluster rules, as for the cluster the RayJob makes (which carries the RayJob's annotations, see
		// ClusterFor). They also keep the head Service name a DNS-1035 label: the controller reaches the dashboard
		// by it.
		errs = append(errs, validation.NoK8sTokenAuth(s.RayClusterSpec, spec.Child("rayClusterSpec"))...)
		errs = append(errs, validation.ClusterSpec(s.RayClusterSpec, j.Annotations, spec.Child("rayClusterSpec"))...)
	}
	return errs
}

// validateSubmission checks the fields the submission mode needs or rules out.
func validateSubmission(j *rayv1.RayJob, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	s := &j.Spec
	mode := submissionMode(j)
	if mode != rayv1.InteractiveMode && strings.TrimSpace(s.Entrypoint) == "" && !ownSubmitterCommand(j) {
		errs = append(errs, field.Required(spec.Child("entrypoint"), fmt.Sprintf("%s needs an entrypoint", mode)))
	}
	if mode == rayv1.InteractiveMode && ptr.Deref(s.BackoffLimit, 0) > 0 {
		errs = append(errs, field.Forbidden(spec.Child("backoffLimit"), "InteractiveMode does not retry: the user submits the job"))
	}
	if mode != rayv1.K8sJobMode {
		if s.SubmitterPodTemplate != nil {
			errs = append(errs, field.Forbidden(spec.Child("submitterPodTemplate"), fmt.Sprintf("only K8sJobMode runs a submitter pod; submissionMode is %s", mode)))
		}
		if s.SubmitterConfig != nil {
			errs = append(errs, field.Forbidden(spec.Child("submitterConfig"), fmt.Sprintf("only K8sJobMode runs a submitter Job; submissionMode is %s", mode)))
		}
	}
	if mode == rayv1.SidecarMode && s.RayClusterSpec != nil {
		p := s.RayClusterSpec.HeadGroupSpec.Template.Spec.RestartPolicy
		if p != "" && p != corev1.RestartPolicyNever {
			errs = append(errs, field.NotSupported(spec.Child("rayClusterSpec", "headGroupSpec", "template", "spec", "restartPolicy"), p, []string{string(corev1.RestartPolicyNever)}))
		}
	}
	return errs
}

// legacyDeletion: the deletionStrategy uses the older onSuccess/onFailure policies.
func legacyDeletion(s *rayv1.RayJobSpec) bool {
	return s.DeletionStrategy != nil && (s.DeletionStrategy.OnSuccess != nil || s.DeletionStrategy.OnFailure != nil)
}

// validateLifecycle checks suspension, the deadline, retries and the TTL after the job finished.
func validateLifecycle(j *rayv1.RayJob, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	s := &j.Spec
	if s.Suspend && !s.ShutdownAfterJobFinishes {
		errs = append(errs, field.Forbidden(spec.Child("suspend"), "a RayJob can be suspended only with shutdownAfterJobFinishes: true"))
	}
	if d := s.ActiveDeadlineSeconds; d != nil && *d <= 0 {
		errs = append(errs, field.Invalid(spec.Child("activeDeadlineSeconds"), *d, "must be greater than 0"))
	}
	if s.BackoffLimit != nil && *s.BackoffLimit < 0 {
		errs = append(errs, field.Invalid(spec.Child("backoffLimit"), *s.BackoffLimit, "must be 0 or greater"))
	}
	if s.TTLSecondsAfterFinished < 0 {
		errs = append(errs, field.Invalid(spec.Child("ttlSecondsAfterFinished"), s.TTLSecondsAfterFinished, "must be 0 or greater"))
	}
	if s.TTLSecondsAfterFinished > 0 && !s.ShutdownAfterJobFinishes && !legacyDeletion(s) {
		errs = append(errs, field.Invalid(spec.Child("ttlSecondsAfterFinished"), s.TTLSecondsAfterFinished, "needs shutdownAfterJobFinishes: true or deletionStrategy.onSuccess/onFailure"))
	}
	return errs
}

// validateDeletionStrategy checks spec.deletionStrategy: either the onSuccess/onFailure pair or deletionRules
// without duplicates, each policy one the RayJob can carry out.
func validateDeletionStrategy(j *rayv1.RayJob, spec *field.Path) field.ErrorList {
	s := &j.Spec
	ds := s.DeletionStrategy
	if ds == nil {
		return nil
	}
	var errs field.ErrorList
	p := spec.Child("deletionStrategy")
	if !features.Enabled(features.RayJobDeletionPolicy) {
		return field.ErrorList{field.Forbidden(p, "the RayJobDeletionPolicy feature gate is off (--feature-gates)")}
	}
	if s.ShutdownAfterJobFinishes {
		errs = append(errs, field.Forbidden(p, "deletionStrategy and shutdownAfterJobFinishes: true both say what to delete; use one"))
	}
	if len(ds.DeletionRules) > 0 && s.TTLSecondsAfterFinished > 0 {
		errs = append(errs, field.Forbidden(spec.Child("ttlSecondsAfterFinished"), "with deletionRules each rule has its own condition.ttlSeconds"))
	}
	if legacyDeletion(s) && (ds.OnSuccess == nil || ds.OnFailure == nil) {
		errs = append(errs, field.Required(p, "onSuccess and onFailure go together"))
	}
	for i, pol := range []*rayv1.DeletionPolicy{ds.OnSuccess, ds.OnFailure} {
		name := []string{"onSuccess", "onFailure"}[i]
		if pol != nil && pol.Policy == nil {
			errs = append(errs, field.Required(p.Child(name, "policy"), "name the policy"))
		}
		if pol != nil && pol.Policy != nil {
			errs = append(errs, policyErrs(j, *pol.Policy, p.Child(name, "policy"))...)
		}
	}
	seen := map[string]bool{}
	for i, r := range ds.DeletionRules {
		rp := p.Child("deletionRules").Index(i)
		key := fmt.Sprintf("%s/%s/%s/%d", r.Policy, ptr.Deref(r.Condition.JobStatus, ""), ptr.Deref(r.Condition.JobDeploymentStatus, ""), r.Condition.TTLSeconds)
		if seen[key] {
			errs = append(errs, field.Duplicate(rp, key))
		}
		seen[key] = true
		errs = append(errs, policyErrs(j, r.Policy, rp.Child("policy"))...)
	}
	return errs
}

// validateEntrypoint checks what the job's entrypoint runs with: its runtime environment and resources.
func validateEntrypoint(j *rayv1.RayJob, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	s := &j.Spec
	if _, err := ray.RuntimeEnvFromYAML(s.RuntimeEnvYAML); err != nil {
		errs = append(errs, field.Invalid(spec.Child("runtimeEnvYAML"), "(omitted)", err.Error()))
	}
	if _, err := entrypointResources(s.EntrypointResources); err != nil {
		errs = append(errs, field.Invalid(spec.Child("entrypointResources"), s.EntrypointResources, err.Error()))
	}
	if s.EntrypointNumCpus < 0 {
		errs = append(errs, field.Invalid(spec.Child("entrypointNumCpus"), s.EntrypointNumCpus, "must be 0 or greater"))
	}
	if s.EntrypointNumGpus < 0 {
		errs = append(errs, field.Invalid(spec.Child("entrypointNumGpus"), s.EntrypointNumGpus, "must be 0 or greater"))
	}
	return errs
}

// policyErrs: DeleteCluster and DeleteWorkers act only on a cluster the RayJob made, and DeleteWorkers suspends the
// worker groups, which an autoscaled cluster would undo.
func policyErrs(j *rayv1.RayJob, pol rayv1.DeletionPolicyType, p *field.Path) field.ErrorList {
	if pol != rayv1.DeleteCluster && pol != rayv1.DeleteWorkers {
		return nil
	}
	if len(j.Spec.ClusterSelector) > 0 {
		return field.ErrorList{field.Forbidden(p, fmt.Sprintf("%s acts on a cluster the RayJob created, not one it selected (clusterSelector)", pol))}
	}
	if pol != rayv1.DeleteWorkers {
		return nil
	}
	if c := j.Spec.RayClusterSpec; c != nil && ptr.Deref(c.EnableInTreeAutoscaling, false) {
		return field.ErrorList{field.Forbidden(p, "DeleteWorkers cannot be used with enableInTreeAutoscaling: the autoscaler would bring the workers back")}
	}
	return nil
}

// entrypointResources parses spec.entrypointResources, a JSON object of resource name to amount.
func entrypointResources(s string) (map[string]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var m map[string]float64
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf(`want a JSON object of resource amounts, e.g. {"custom": 1}: %v`, err)
	}
	for k, v := range m {
		if v < 0 {
			return nil, fmt.Errorf("resource %q: amount must be 0 or greater", k)
		}
	}
	return m, nil
}

// ownSubmitterCommand: a K8sJobMode submitter whose container brings its own command submits on its own terms
// (KubeRay's light-weight submitter); the entrypoint is then in its arguments.
func ownSubmitterCommand(j *rayv1.RayJob) bool {
	t := j.Spec.SubmitterPodTemplate
	return submissionMode(j) == rayv1.K8sJobMode && t != nil && len(t.Spec.Containers) > 0 &&
		(len(t.Spec.Containers[0].Command) > 0 || len(t.Spec.Containers[0].Args) > 0)
}

// submissionMode is spec.submissionMode, K8sJobMode when empty (objects created before the default existed).
func submissionMode(j *rayv1.RayJob) rayv1.JobSubmissionMode {
	if j.Spec.SubmissionMode == "" {
		return rayv1.K8sJobMode
	}
	return j.Spec.SubmissionMode
}
