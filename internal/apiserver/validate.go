package apiserver

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	mantavalidation "github.com/manta-dev/manta/internal/validation"
)

// Validation of request bodies. Each function returns every violation it finds, naming fields by their JSON path,
// so one answer tells the caller everything to fix. Checks that need the cluster (does the compute template exist)
// are done by the handlers.

type violations []FieldViolation

func (v *violations) add(field, format string, args ...any) {
	*v = append(*v, FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

func (v *violations) required(field, value string) bool {
	if strings.TrimSpace(value) == "" {
		v.add(field, "is required")
		return false
	}
	return true
}

// name checks a DNS-1123 label (object names that become pod and service name prefixes).
func (v *violations) name(field, value string) {
	if !v.required(field, value) {
		return
	}
	if errs := validation.IsDNS1123Label(value); len(errs) > 0 {
		v.add(field, "must be a DNS-1123 label: %s", strings.Join(errs, "; "))
	}
}

func (v *violations) subdomain(field, value string) {
	if value == "" {
		return
	}
	if errs := validation.IsDNS1123Subdomain(value); len(errs) > 0 {
		v.add(field, "must be a DNS-1123 subdomain: %s", strings.Join(errs, "; "))
	}
}

// namespace checks the body's namespace against the path's.
func (v *violations) namespace(field, body, pathNS string) {
	if !v.required(field, body) {
		return
	}
	if body != pathNS {
		v.add(field, "must equal the namespace in the path (%q), got %q", pathNS, body)
	}
}

func (v *violations) oneOf(field, value string, allowed ...string) {
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	shown := make([]string, 0, len(allowed))
	for _, a := range allowed {
		if a == "" {
			shown = append(shown, "empty")
		} else {
			shown = append(shown, a)
		}
	}
	v.add(field, "must be %s; got %q", orList(shown), value)
}

func orList(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

func (v *violations) quantity(field, value string, required bool) {
	if value == "" {
		if required {
			v.add(field, "is required")
		}
		return
	}
	q, err := resource.ParseQuantity(value)
	if err != nil {
		v.add(field, "must be a Kubernetes quantity such as 500m, 2 or 4Gi")
		return
	}
	if q.Sign() < 0 {
		v.add(field, "must not be negative")
	}
}

func (v *violations) labels(field string, m map[string]string) {
	for _, k := range sortedKeys(m) {
		for _, e := range validation.IsQualifiedName(k) {
			v.add(field+"."+k, "invalid label key: %s", e)
		}
		for _, e := range validation.IsValidLabelValue(m[k]) {
			v.add(field+"."+k, "invalid label value: %s", e)
		}
	}
}

func (v *violations) annotations(field string, m map[string]string) {
	for _, k := range sortedKeys(m) {
		for _, e := range validation.IsQualifiedName(strings.ToLower(k)) {
			v.add(field+"."+k, "invalid annotation key: %s", e)
		}
	}
}

func (v *violations) nonNegative(field string, n int64) {
	if n < 0 {
		v.add(field, "must not be negative")
	}
}

var imageRef = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$`)

func (v *violations) image(field, value string) {
	if value != "" && (!imageRef.MatchString(value) || len(value) > 4096) {
		v.add(field, "must be a container image reference such as rayproject/ray:2.52.0")
	}
}

var imageTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// pullPolicies are the values Kubernetes accepts for imagePullPolicy; KubeRay's v1 server accepted only Always
// and IfNotPresent, Manta also accepts Never.
var pullPolicies = []string{"", "Always", "Never", "IfNotPresent"}

func validateComputeTemplate(t *ComputeTemplate, pathNS string) violations {
	var v violations
	v.name("name", t.Name)
	v.namespace("namespace", t.Namespace, pathNS)
	if t.CPU == 0 {
		v.add("cpu", "must be greater than 0")
	}
	if t.Memory == 0 {
		v.add("memory", "must be greater than 0")
	}
	v.oneOf("memoryUnit", t.MemoryUnit, "", "Ki", "Mi", "Gi", "Ti")
	if t.GPUAccelerator != "" {
		for _, e := range validation.IsQualifiedName(t.GPUAccelerator) {
			v.add("gpuAccelerator", "must be a resource name such as nvidia.com/gpu: %s", e)
		}
	}
	for _, k := range sortedKeys(t.ExtendedResources) {
		f := "extendedResources." + k
		for _, e := range validation.IsQualifiedName(k) {
			v.add(f, "must be a resource name such as vpc.amazonaws.com/efa: %s", e)
		}
		if k == "cpu" || k == "memory" || (k == t.gpuResource() && t.GPU > 0) {
			v.add(f, "duplicates the template's own %s", k)
		}
	}
	v.tolerations("tolerations", t.Tolerations)
	return v
}

func (v *violations) tolerations(field string, ts []PodToleration) {
	for i, t := range ts {
		f := fmt.Sprintf("%s[%d]", field, i)
		v.oneOf(f+".operator", t.Operator, "Exists", "Equal")
		if t.Key == "" && t.Operator != "Exists" {
			v.add(f+".key", "is required unless operator is Exists")
		}
		if t.Key != "" {
			for _, e := range validation.IsQualifiedName(t.Key) {
				v.add(f+".key", "invalid taint key: %s", e)
			}
		}
		if t.Operator == "Exists" && t.Value != "" {
			v.add(f+".value", "must be empty when operator is Exists")
		}
		v.oneOf(f+".effect", t.Effect, "NoSchedule", "PreferNoSchedule", "NoExecute")
	}
}

func validateCluster(c *Cluster, pathNS string) violations {
	var v violations
	v.name("name", c.Name)
	v.namespace("namespace", c.Namespace, pathNS)
	v.required("user", c.User)
	if c.Version != "" && !imageTag.MatchString(c.Version) {
		v.add("version", "must be a Ray version usable as an image tag, such as 2.52.0")
	}
	v.annotations("annotations", c.Annotations)
	v.env("envs", c.Envs)
	v = append(v, validateClusterSpec(c.ClusterSpec, "clusterSpec")...)
	return v
}

// validateClusterSpec applies KubeRay's ValidateClusterSpec rules and Manta's additions.
func validateClusterSpec(s *ClusterSpec, field string) violations {
	var v violations
	if s == nil {
		v.add(field, "is required")
		return v
	}
	h := s.HeadGroupSpec
	hf := field + ".headGroupSpec"
	if h == nil {
		v.add(hf, "is required")
	} else {
		if v.required(hf+".computeTemplate", h.ComputeTemplate) {
			v.subdomain(hf+".computeTemplate", h.ComputeTemplate)
		}
		if len(h.RayStartParams) == 0 {
			v.add(hf+".rayStartParams", "must not be empty (for example {\"dashboard-host\": \"0.0.0.0\"})")
		}
		v.image(hf+".image", h.Image)
		v.oneOf(hf+".serviceType", h.ServiceType, "", "ClusterIP", "NodePort", "LoadBalancer")
		v.oneOf(hf+".imagePullPolicy", h.ImagePullPolicy, pullPolicies...)
		v.subdomain(hf+".serviceAccount", h.ServiceAccount)
		v.subdomain(hf+".imagePullSecret", h.ImagePullSecret)
		v.labels(hf+".labels", h.Labels)
		v.annotations(hf+".annotations", h.Annotations)
		v.env(hf+".environment", h.Environment)
		v.volumes(hf+".volumes", h.Volumes)
		v.securityContext(hf+".securityContext", h.SecurityContext)
		v.rayStartParams(hf+".rayStartParams", h.RayStartParams)
	}
	seen := map[string]bool{}
	for i, w := range s.WorkerGroupSpec {
		wf := fmt.Sprintf("%s.workerGroupSpec[%d]", field, i)
		v.name(wf+".groupName", w.GroupName)
		if w.GroupName != "" && seen[w.GroupName] {
			v.add(wf+".groupName", "duplicates another worker group's name %q", w.GroupName)
		}
		seen[w.GroupName] = true
		if v.required(wf+".computeTemplate", w.ComputeTemplate) {
			v.subdomain(wf+".computeTemplate", w.ComputeTemplate)
		}
		v.image(wf+".image", w.Image)
		switch {
		case w.MaxReplicas <= 0:
			v.add(wf+".maxReplicas", "must be greater than 0")
		case w.MinReplicas < 0:
			v.add(wf+".minReplicas", "must not be negative")
		case w.MinReplicas > w.MaxReplicas:
			v.add(wf+".minReplicas", "must not be greater than maxReplicas (%d)", w.MaxReplicas)
		case w.Replicas < w.MinReplicas || w.Replicas > w.MaxReplicas:
			v.add(wf+".replicas", "must be between minReplicas (%d) and maxReplicas (%d)", w.MinReplicas, w.MaxReplicas)
		}
		v.oneOf(wf+".imagePullPolicy", w.ImagePullPolicy, pullPolicies...)
		v.subdomain(wf+".serviceAccount", w.ServiceAccount)
		v.subdomain(wf+".imagePullSecret", w.ImagePullSecret)
		v.labels(wf+".labels", w.Labels)
		v.annotations(wf+".annotations", w.Annotations)
		v.env(wf+".environment", w.Environment)
		v.volumes(wf+".volumes", w.Volumes)
		v.securityContext(wf+".securityContext", w.SecurityContext)
		v.rayStartParams(wf+".rayStartParams", w.RayStartParams)
	}
	if a := s.AutoscalerOptions; a != nil {
		af := field + ".autoscalerOptions"
		v.nonNegative(af+".idleTimeoutSeconds", int64(a.IdleTimeoutSeconds))
		v.oneOf(af+".upscalingMode", a.UpscalingMode, "", "Default", "Aggressive", "Conservative")
		v.image(af+".image", a.Image)
		v.oneOf(af+".imagePullPolicy", a.ImagePullPolicy, pullPolicies...)
		v.quantity(af+".cpu", a.CPU, false)
		v.quantity(af+".memory", a.Memory, false)
		v.autoscalerEnv(af+".envs", a.Envs)
		for i, vol := range a.Volumes {
			f := fmt.Sprintf("%s.volumes[%d]", af, i)
			v.name(f+".name", vol.Name)
			v.mountPath(f+".mountPath", vol.MountPath)
		}
	}
	v.annotations(field+".headServiceAnnotations", s.HeadServiceAnnotations)
	return v
}

func (v *violations) rayStartParams(field string, m map[string]string) {
	for _, k := range sortedKeys(m) {
		if k == "" || strings.ContainsAny(k, " \t\n=") || strings.HasPrefix(k, "-") {
			v.add(field+"."+k, "must be a ray start option name without leading dashes, such as num-cpus")
		}
	}
}

func (v *violations) env(field string, e *EnvironmentVariables) {
	if e == nil {
		return
	}
	for _, k := range sortedKeys(e.Values) {
		for _, msg := range validation.IsEnvVarName(k) {
			v.add(field+".values."+k, "invalid environment variable name: %s", msg)
		}
	}
	for _, k := range sortedKeys(e.ValuesFrom) {
		f := field + ".valuesFrom." + k
		for _, msg := range validation.IsEnvVarName(k) {
			v.add(f, "invalid environment variable name: %s", msg)
		}
		if _, dup := e.Values[k]; dup {
			v.add(f, "is also set in values")
		}
		src := e.ValuesFrom[k]
		v.required(f+".key", src.Key)
		if src.Source == EnvFromField {
			if src.Name != "" {
				v.add(f+".name", "is not used by a FIELD source; the field path goes in key")
			}
		} else {
			v.required(f+".name", src.Name)
		}
	}
}

// autoscalerEnv checks autoscalerOptions.envs: its valuesFrom become envFrom entries, which import a whole
// ConfigMap or Secret, so only those sources fit and key has no meaning.
func (v *violations) autoscalerEnv(field string, e *EnvironmentVariables) {
	if e == nil {
		return
	}
	v.env(field, &EnvironmentVariables{Values: e.Values})
	for _, k := range sortedKeys(e.ValuesFrom) {
		f := field + ".valuesFrom." + k
		src := e.ValuesFrom[k]
		if src.Source != EnvFromConfigMap && src.Source != EnvFromSecret {
			v.add(f+".source", "must be CONFIGMAP or SECRET: the autoscaler's valuesFrom import a whole ConfigMap or Secret (envFrom)")
		}
		if v.required(f+".name", src.Name) {
			v.subdomain(f+".name", src.Name)
		}
		if src.Key != "" {
			v.add(f+".key", "is not used: the autoscaler's valuesFrom import every key of the ConfigMap or Secret (envFrom)")
		}
	}
}

func (v *violations) mountPath(field, p string) {
	if !v.required(field, p) {
		return
	}
	if !path.IsAbs(p) || strings.Contains(p, ":") {
		v.add(field, "must be an absolute path without ':'")
	}
}

func (v *violations) volumes(field string, vols []Volume) {
	names := map[string]bool{}
	mounts := map[string]bool{}
	for i, vol := range vols {
		f := fmt.Sprintf("%s[%d]", field, i)
		v.name(f+".name", vol.Name)
		if vol.Name != "" && names[vol.Name] {
			v.add(f+".name", "duplicates another volume's name %q", vol.Name)
		}
		names[vol.Name] = true
		v.mountPath(f+".mountPath", vol.MountPath)
		if vol.MountPath != "" && mounts[vol.MountPath] {
			v.add(f+".mountPath", "duplicates another volume's mount path %q", vol.MountPath)
		}
		mounts[vol.MountPath] = true
		switch vol.VolumeType {
		case VolumePVC, VolumeConfigMap, VolumeSecret:
			if v.required(f+".source", vol.Source) {
				v.subdomain(f+".source", vol.Source)
			}
		case VolumeHostPath:
			if v.required(f+".source", vol.Source) && !path.IsAbs(vol.Source) {
				v.add(f+".source", "must be an absolute host path")
			}
		case VolumeEphemeral:
			v.quantity(f+".storage", vol.Storage, true)
			v.subdomain(f+".storageClassName", vol.StorageClassName)
		case VolumeEmptyDir:
			v.quantity(f+".storage", vol.Storage, false)
		}
		if vol.VolumeType != VolumeConfigMap && vol.VolumeType != VolumeSecret && len(vol.Items) > 0 {
			v.add(f+".items", "applies only to CONFIGMAP and SECRET volumes")
		}
		for _, k := range sortedKeys(vol.Items) {
			p := vol.Items[k]
			if p == "" || path.IsAbs(p) || strings.Contains(p, "..") {
				v.add(f+".items."+k, "must be a relative path without '..'")
			}
		}
	}
}

func (v *violations) securityContext(field string, sc *SecurityContext) {
	if sc == nil || sc.Capabilities == nil {
		return
	}
	for i, c := range sc.Capabilities.Add {
		if strings.TrimSpace(c) == "" {
			v.add(fmt.Sprintf("%s.capabilities.add[%d]", field, i), "must not be empty")
		}
	}
	for i, c := range sc.Capabilities.Drop {
		if strings.TrimSpace(c) == "" {
			v.add(fmt.Sprintf("%s.capabilities.drop[%d]", field, i), "must not be empty")
		}
	}
}

func (v *violations) yamlObject(field, s string) {
	if s == "" {
		return
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		v.add(field, "must be a YAML object: %v", err)
	}
}

func validateJob(j *RayJob, pathNS string) violations {
	var v violations
	v.name("name", j.Name)
	v.namespace("namespace", j.Namespace, pathNS)
	v.required("user", j.User)
	v.required("entrypoint", j.Entrypoint)
	if j.Version != "" && !imageTag.MatchString(j.Version) {
		v.add("version", "must be a Ray version usable as an image tag, such as 2.52.0")
	}
	switch {
	case len(j.ClusterSelector) > 0 && j.ClusterSpec != nil:
		v.add("clusterSpec", "must not be set together with clusterSelector")
	case len(j.ClusterSelector) > 0:
		v.labels("clusterSelector", j.ClusterSelector)
	default:
		v = append(v, validateClusterSpec(j.ClusterSpec, "clusterSpec")...)
	}
	v.yamlObject("runtimeEnv", j.RuntimeEnv)
	if j.EntrypointResources != "" {
		var m map[string]float64
		if err := json.Unmarshal([]byte(j.EntrypointResources), &m); err != nil {
			v.add("entrypointResources", "must be a JSON object of resource names to numbers")
		}
	}
	if j.EntrypointNumCpus < 0 {
		v.add("entrypointNumCpus", "must not be negative")
	}
	if j.EntrypointNumGpus < 0 {
		v.add("entrypointNumGpus", "must not be negative")
	}
	v.nonNegative("activeDeadlineSeconds", int64(j.ActiveDeadlineSeconds))
	v.nonNegative("ttlSecondsAfterFinished", int64(j.TTLSecondsAfterFinished))
	if s := j.JobSubmitter; s != nil {
		if v.required("jobSubmitter.image", s.Image) {
			v.image("jobSubmitter.image", s.Image)
		}
		v.quantity("jobSubmitter.cpu", s.CPU, false)
		v.quantity("jobSubmitter.memory", s.Memory, false)
	}
	return v
}

func validateService(s *RayService, pathNS, pathName string) violations {
	var v violations
	v.name("name", s.Name)
	if pathName != "" && s.Name != pathName {
		v.add("name", "must equal the name in the path (%q), got %q", pathName, s.Name)
	}
	v.namespace("namespace", s.Namespace, pathNS)
	v.required("user", s.User)
	if s.Version != "" && !imageTag.MatchString(s.Version) {
		v.add("version", "must be a Ray version usable as an image tag, such as 2.52.0")
	}
	if v.required("serveConfigV2", s.ServeConfigV2) {
		v.yamlObject("serveConfigV2", s.ServeConfigV2)
	}
	v.nonNegative("serviceUnhealthySecondThreshold", int64(s.ServiceUnhealthySecondThreshold))
	v.nonNegative("deploymentUnhealthySecondThreshold", int64(s.DeploymentUnhealthySecondThreshold))
	v = append(v, validateClusterSpec(s.ClusterSpec, "clusterSpec")...)
	return v
}

// Limits of the ImagePullJob CRD, checked here so the caller gets a 400 naming the REST field rather than a 422
// naming the CRD's.
const (
	maxPullSecrets  = 32
	maxNodeNames    = 10000
	maxTolerations  = 64
	maxBackoffLimit = 100
)

var submissionID = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

func validateSubmission(s *RayJobSubmission) violations {
	var v violations
	v.required("entrypoint", s.Entrypoint)
	if s.SubmissionID != "" && !submissionID.MatchString(s.SubmissionID) {
		v.add("submissionId", "must be 1-128 letters, digits, '_', '.', ':' or '-'")
	}
	v.yamlObject("runtimeEnv", s.RuntimeEnv)
	if s.EntrypointNumCpus < 0 {
		v.add("entrypointNumCpus", "must not be negative")
	}
	if s.EntrypointNumGpus < 0 {
		v.add("entrypointNumGpus", "must not be negative")
	}
	for _, k := range sortedKeys(s.EntrypointResources) {
		f, err := strconv.ParseFloat(s.EntrypointResources[k], 64)
		if err != nil || f < 0 {
			v.add("entrypointResources."+k, "must be a non-negative number")
		}
	}
	return v
}

func validateImagePullJob(j *ImagePullJob, pathNS string) violations {
	var v violations
	v.name("name", j.Name)
	v.namespace("namespace", j.Namespace, pathNS)
	if v.required("image", j.Image) && !mantavalidation.Image(j.Image) {
		// The CRD's grammar (distribution/reference), so Kubernetes never refuses what passed here.
		v.add("image", "must be a valid image reference of at most 512 characters, such as rayproject/ray:2.52.0 (lower-case repository)")
	}
	if len(j.PullSecrets) > maxPullSecrets {
		v.add("pullSecrets", "must list at most %d secrets", maxPullSecrets)
	}
	if len(j.NodeNames) > maxNodeNames {
		v.add("nodeNames", "must list at most %d nodes; use nodeSelector for more", maxNodeNames)
	}
	if len(j.Tolerations) > maxTolerations {
		v.add("tolerations", "must list at most %d tolerations", maxTolerations)
	}
	v.oneOf("imagePullPolicy", j.ImagePullPolicy, "", "Always", "IfNotPresent")
	for i, s := range j.PullSecrets {
		f := fmt.Sprintf("pullSecrets[%d]", i)
		if v.required(f, s) {
			v.subdomain(f, s)
		}
	}
	for i, n := range j.NodeNames {
		f := fmt.Sprintf("nodeNames[%d]", i)
		if v.required(f, n) {
			v.subdomain(f, n)
		}
	}
	v.labels("nodeSelector", j.NodeSelector)
	if len(j.NodeNames) > 0 && len(j.NodeSelector) > 0 {
		v.add("nodeSelector", "must not be set together with nodeNames")
	}
	if j.Parallelism != nil {
		v.nonNegative("parallelism", int64(*j.Parallelism))
	}
	v.nonNegative("timeoutSeconds", int64(j.TimeoutSeconds))
	if j.BackoffLimit != nil {
		v.nonNegative("backoffLimit", int64(*j.BackoffLimit))
		if *j.BackoffLimit > maxBackoffLimit {
			v.add("backoffLimit", "must be at most %d", maxBackoffLimit)
		}
	}
	v.oneOf("completionPolicy", j.CompletionPolicy, "", "Always", "Never")
	v.nonNegative("activeDeadlineSeconds", j.ActiveDeadlineSeconds)
	timeout := int64(j.TimeoutSeconds)
	if timeout <= 0 {
		timeout = int64(mantav1alpha1.DefaultTimeoutSeconds)
	}
	if j.ActiveDeadlineSeconds > 0 && j.ActiveDeadlineSeconds < timeout {
		v.add("activeDeadlineSeconds", "must not be shorter than timeoutSeconds (%d)", timeout)
	}
	v.nonNegative("ttlSecondsAfterFinished", int64(j.TTLSecondsAfterFinished))
	if j.CompletionPolicy == "Never" && (j.ActiveDeadlineSeconds > 0 || j.TTLSecondsAfterFinished > 0) {
		v.add("completionPolicy", "Never cannot be combined with activeDeadlineSeconds or ttlSecondsAfterFinished")
	}
	v.tolerations("tolerations", j.Tolerations)
	return v
}
