package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	mantavalidation "github.com/manta-dev/manta/internal/validation"
)

// consoleJobForm is the console's "new RayJob" form: the fields a person fills in, each named as the form names it,
// so an error can be shown beside its input.
type consoleJobForm struct {
	Name         string `json:"name"`
	Entrypoint   string `json:"entrypoint"`
	Image        string `json:"image"`
	HeadCPU      string `json:"headCPU"`
	HeadMemory   string `json:"headMemory"`
	Workers      int32  `json:"workers"`
	WorkerCPU    string `json:"workerCPU"`
	WorkerMemory string `json:"workerMemory"`
	// RuntimeEnv is Ray's runtime environment as YAML (pip, env_vars, working_dir, ...).
	RuntimeEnv string `json:"runtimeEnv"`
	// Shutdown deletes the cluster when the job ends.
	Shutdown bool `json:"shutdown"`
	// Env are environment variables of the Ray containers, head's and workers', set before Ray starts (Ray's own
	// settings read them there); the job's processes take theirs from runtimeEnv's env_vars.
	Env []consoleEnvVar `json:"env"`
	// NoCPULimit leaves the Ray containers' CPU limits out: they request headCPU and workerCPU, may use idle CPU
	// beyond it, and Ray counts the request's CPUs, rounded up. By default the limit equals the request, as in
	// KubeRay's samples, and Ray counts the limit's.
	NoCPULimit bool `json:"noCPULimit"`
}

type consoleEnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// maxConsoleWorkers bounds the form's worker count: a typo of 1000 should be an error, not 1000 pods.
const maxConsoleWorkers = 100

// maxConsoleEnv bounds the form's environment variables: a form is filled in by hand, a pasted file of
// thousands is a mistake.
const maxConsoleEnv = 64

// validate applies the REST API's rules (validateJob's helpers) to the form's fields.
func (f *consoleJobForm) validate() violations {
	var v violations
	v.name("name", f.Name)
	v.required("entrypoint", f.Entrypoint)
	if v.required("image", f.Image) {
		v.image("image", f.Image)
	}
	v.quantity("headCPU", f.HeadCPU, true)
	v.quantity("headMemory", f.HeadMemory, true)
	if f.Workers < 0 || f.Workers > maxConsoleWorkers {
		v.add("workers", "must be between 0 and %d", maxConsoleWorkers)
	}
	if f.Workers > 0 {
		v.quantity("workerCPU", f.WorkerCPU, true)
		v.quantity("workerMemory", f.WorkerMemory, true)
	} else {
		// Worker resources without workers would be accepted and never used.
		if f.WorkerCPU != "" {
			v.add("workerCPU", "applies only with workers above 0")
		}
		if f.WorkerMemory != "" {
			v.add("workerMemory", "applies only with workers above 0")
		}
	}
	v.yamlObject("runtimeEnv", f.RuntimeEnv)
	v.consoleEnv("env", f.Env)
	return v
}

// consoleEnv checks the form's environment variables as Kubernetes checks a container's env names (IsEnvVarName),
// and refuses a name given twice, which Kubernetes would take with the last value winning.
func (v *violations) consoleEnv(field string, env []consoleEnvVar) {
	if len(env) > maxConsoleEnv {
		v.add(field, "at most %d variables, got %d", maxConsoleEnv, len(env))
		return
	}
	first := map[string]int{}
	for i, e := range env {
		f := fmt.Sprintf("%s[%d].name", field, i)
		if !v.required(f, e.Name) {
			continue
		}
		if msgs := validation.IsEnvVarName(e.Name); len(msgs) > 0 {
			v.add(f, "invalid environment variable name: %s", strings.Join(msgs, "; "))
			continue
		}
		if j, dup := first[e.Name]; dup {
			v.add(f, "%s is already set by %s[%d]", e.Name, field, j)
			continue
		}
		first[e.Name] = i
	}
}

func (f *consoleJobForm) container(name, cpu, memory string) corev1.PodTemplateSpec {
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
	limits := requests
	if f.NoCPULimit {
		limits = corev1.ResourceList{corev1.ResourceMemory: requests[corev1.ResourceMemory]}
	}
	var env []corev1.EnvVar
	for _, e := range f.Env {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: name, Image: f.Image, Env: env, Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits},
	}}}}
}

// rayJob builds the RayJob of a valid form.
func (f *consoleJobForm) rayJob(ns string) *rayv1.RayJob {
	spec := &rayv1.RayClusterSpec{
		HeadGroupSpec: rayv1.HeadGroupSpec{RayStartParams: map[string]string{}, Template: f.container(headContainerName, f.HeadCPU, f.HeadMemory)},
	}
	if f.Workers > 0 {
		spec.WorkerGroupSpecs = []rayv1.WorkerGroupSpec{{
			GroupName: "workers", Replicas: ptr.To(f.Workers), MinReplicas: ptr.To(f.Workers), MaxReplicas: ptr.To(f.Workers),
			RayStartParams: map[string]string{}, Template: f.container("ray-worker", f.WorkerCPU, f.WorkerMemory),
		}}
	}
	return &rayv1.RayJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: rayv1.GroupVersion.String(), Kind: "RayJob"},
		ObjectMeta: metav1.ObjectMeta{Name: f.Name, Namespace: ns},
		Spec: rayv1.RayJobSpec{Entrypoint: f.Entrypoint, RuntimeEnvYAML: f.RuntimeEnv, ShutdownAfterJobFinishes: f.Shutdown,
			RayClusterSpec: spec},
	}
}

// formFields maps Kubernetes field paths of the built RayJob back to the form's fields, longest prefix first. The
// containers' env lists are the form's env list, so an item's path keeps its index and field (env[2].name).
var formFields = []struct{ prefix, field string }{
	{"spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].env", "env"},
	{"spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].env", "env"},
	{"metadata.name", "name"},
	{"spec.entrypoint", "entrypoint"},
	{"spec.runtimeEnvYAML", "runtimeEnv"},
	{"spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].image", "image"},
	{"spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].image", "image"},
	{"spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].resources", "headCPU"},
	{"spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources", "workerCPU"},
	{"spec.rayClusterSpec.workerGroupSpecs[0].replicas", "workers"},
}

func formField(path string) string {
	for _, f := range formFields {
		switch {
		case f.field == "env" && strings.HasPrefix(path, f.prefix+"["):
			return f.field + strings.TrimPrefix(path, f.prefix)
		case path == f.prefix || strings.HasPrefix(path, f.prefix+".") || strings.HasPrefix(path, f.prefix+"["):
			return f.field
		}
	}
	return path
}

// consoleCreateJob validates the form as the REST API validates a RayJob, builds the RayJob, checks its cluster
// with the rules the operator applies, and creates it with the caller's token, so Kubernetes (RBAC, the CRD's
// schema and CEL rules) has the last word; Kubernetes' field causes come back under the form's field names.
func (s *Server) consoleCreateJob(w http.ResponseWriter, r *http.Request) *apiError {
	if r.Header.Get(consoleHeader) == "" {
		return invalid(FieldViolation{Field: consoleHeader, Description: "the console's form sends this header"})
	}
	var f consoleJobForm
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return newError(http.StatusRequestEntityTooLarge, codeInvalidArgument, "request body is larger than %d bytes", maxBodyBytes)
		}
		return invalid(FieldViolation{Field: "body", Description: "could not read the request body: " + err.Error()})
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return invalid(FieldViolation{Field: "body", Description: "must be the console's RayJob form as JSON: " + err.Error()})
	}
	ns := r.PathValue("namespace")
	if v := f.validate(); len(v) > 0 {
		return invalid(v...)
	}
	job := f.rayJob(ns)
	if errs := mantavalidation.ClusterSpec(job.Spec.RayClusterSpec, nil, field.NewPath("spec", "rayClusterSpec")); len(errs) > 0 {
		var v violations
		for _, e := range errs {
			v.add(formField(e.Field), "%s", e.ErrorBody())
		}
		return invalid(v...)
	}
	c, err := s.callerClient(info(r).token)
	if err != nil {
		return internalError(http.StatusInternalServerError, codeInternal, err, "internal error")
	}
	if err := c.Create(r.Context(), job); err != nil {
		var se apierrors.APIStatus
		switch {
		case apierrors.IsAlreadyExists(err):
			return invalid(FieldViolation{Field: "name", Description: "a RayJob of this name already exists in namespace " + ns})
		case apierrors.IsInvalid(err) && errors.As(err, &se) && se.Status().Details != nil:
			var v violations
			for _, c := range se.Status().Details.Causes {
				v.add(formField(c.Field), "%s", c.Message)
			}
			return invalid(v...)
		case apierrors.IsForbidden(err):
			// Kubernetes refused the caller's own token: its message is about the caller, theirs to read.
			return newError(http.StatusForbidden, codePermissionDenied, "%s", statusMessage(err))
		}
		return fromKubernetes(err, "RayJob "+strconv.Quote(job.Name)+" in namespace "+strconv.Quote(ns))
	}
	writeJSON(w, http.StatusCreated, summarizeJob(job))
	return nil
}
