package apiserver

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// TestConsoleCookieOnlyWhereSafe: the console's cookie stands in for a token on reads, and on writes only with the
// console's header, which another origin's page cannot send; an Authorization header always wins.
func TestConsoleCookieOnlyWhereSafe(t *testing.T) {
	for _, tc := range []struct {
		method string
		header bool
		want   bool
	}{
		{http.MethodGet, false, true},
		{http.MethodHead, false, true},
		{http.MethodPost, false, false},
		{http.MethodDelete, false, false},
		{http.MethodPatch, true, true},
		{http.MethodDelete, true, true},
	} {
		r := httptest.NewRequest(tc.method, "/console/api/stream", nil)
		r.AddCookie(&http.Cookie{Name: consoleCookie, Value: "tok"})
		if tc.header {
			r.Header.Set(consoleHeader, "1")
		}
		tok, ok := consoleCookieToken(r)
		if ok != tc.want || (ok && tok != "tok") {
			t.Errorf("%s with header %v: got %q %v, want %v", tc.method, tc.header, tok, ok, tc.want)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/console/api/stream", nil)
	if _, ok := consoleCookieToken(r); ok {
		t.Errorf("no cookie: a token was found")
	}
}

func TestConsoleLongRunning(t *testing.T) {
	for path, want := range map[string]bool{
		"/console/api/stream":                              true,
		"/console/api/stream?namespace=a":                  true,
		"/console/api/namespaces/a/rayclusters/b/stream":   true,
		"/console/api/namespaces/a/pods/p/log?follow=true": true,
		"/console/api/namespaces/a/pods/p/log":             false,
		"/console/api/namespaces":                          false,
		"/apis/ray.io/v1/rayclusters?watch=true":           true,
		"/apis/ray.io/v1/rayclusters":                      false,
	} {
		if got := isLongRunning(httptest.NewRequest(http.MethodGet, path, nil)); got != want {
			t.Errorf("%s: long-running %v, want %v", path, got, want)
		}
	}
}

// TestConsoleJobForm: the form's errors name the form's fields, and a valid form makes the RayJob it describes.
func TestConsoleJobForm(t *testing.T) {
	good := consoleJobForm{Name: "job", Entrypoint: "python x.py", Image: "rayproject/ray:2.52.0", HeadCPU: "1", HeadMemory: "2Gi",
		Workers: 2, WorkerCPU: "500m", WorkerMemory: "1Gi", RuntimeEnv: "pip: [requests]", Shutdown: true}
	if v := good.validate(); len(v) > 0 {
		t.Fatalf("a valid form: %v", v)
	}
	bad := consoleJobForm{Name: "Bad_Name", Image: "not an image", HeadCPU: "lots", HeadMemory: "", Workers: 101, RuntimeEnv: "[unclosed"}
	var fields []string
	for _, v := range bad.validate() {
		fields = append(fields, v.Field)
	}
	want := []string{"name", "entrypoint", "image", "headCPU", "headMemory", "workers", "workerCPU", "workerMemory", "runtimeEnv"}
	if diff := cmp.Diff(want, fields); diff != "" {
		t.Errorf("fields named by errors (-want +got):\n%s", diff)
	}

	j := good.rayJob("ns")
	spec := j.Spec.RayClusterSpec
	if j.Name != "job" || j.Namespace != "ns" || j.Spec.Entrypoint != "python x.py" || j.Spec.RuntimeEnvYAML != "pip: [requests]" || !j.Spec.ShutdownAfterJobFinishes {
		t.Errorf("RayJob: %+v", j)
	}
	head := spec.HeadGroupSpec.Template.Spec.Containers[0]
	if head.Name != headContainerName || head.Image != good.Image || head.Resources.Limits.Cpu().String() != "1" || head.Resources.Requests.Memory().String() != "2Gi" {
		t.Errorf("head container: %+v", head)
	}
	w := spec.WorkerGroupSpecs[0]
	if *w.Replicas != 2 || *w.MinReplicas != 2 || *w.MaxReplicas != 2 || w.Template.Spec.Containers[0].Resources.Limits.Cpu().String() != "500m" {
		t.Errorf("worker group: %+v", w)
	}
	idle := consoleJobForm{Name: "j", Entrypoint: "e", Image: "i", HeadCPU: "1", HeadMemory: "1Gi", WorkerCPU: "1"}
	if v := idle.validate(); len(v) != 1 || v[0].Field != "workerCPU" {
		t.Errorf("worker CPU without workers: %v, want an error naming workerCPU", v)
	}
	if none := (&consoleJobForm{Name: "j", Entrypoint: "e", Image: "i", HeadCPU: "1", HeadMemory: "1Gi"}).rayJob("ns"); len(none.Spec.RayClusterSpec.WorkerGroupSpecs) != 0 {
		t.Errorf("no workers asked for, got worker groups: %+v", none.Spec.RayClusterSpec.WorkerGroupSpecs)
	}

	for path, want := range map[string]string{
		"spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].env[2].name":     "env[2].name",
		"spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].env[0]":    "env[0]",
		"spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].env":       "env",
		"spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].envFrom[0].name": "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].envFrom[0].name",
		"metadata.name": "name",
		"spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].resources.limits.cpu": "headCPU",
		"spec.rayClusterSpec.workerGroupSpecs[0].replicas":                                   "workers",
		"spec.entrypointNumCpus": "spec.entrypointNumCpus",
	} {
		if got := formField(path); got != want {
			t.Errorf("formField(%s) = %s, want %s", path, got, want)
		}
	}
}

// TestConsoleSummaries: status reads as words, with the clusters whose pods an object's page shows and the Ray
// dashboard through the services proxy.
func TestConsoleSummaries(t *testing.T) {
	c := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	c.Status.State = rayv1.Ready
	c.Status.ReadyWorkerReplicas, c.Status.DesiredWorkerReplicas = 1, 2
	c.Status.Head.ServiceName = "c-head-svc"
	it := summarizeCluster(c)
	if it.State != "ready" || it.Summary != "1 of 2 workers ready" || it.Dashboard != "/api/v1/namespaces/ns/services/c-head-svc:dashboard/proxy/" ||
		!slices.Equal(it.Clusters, []string{"c"}) || it.Suspend == nil || *it.Suspend {
		t.Errorf("cluster: %+v", it)
	}
	j := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j"}}
	j.Status.JobDeploymentStatus, j.Status.JobStatus, j.Status.RayClusterName = "Running", "RUNNING", "j-abc"
	if it := summarizeJob(j); it.State != "Running / RUNNING" || !slices.Equal(it.Clusters, []string{"j-abc"}) {
		t.Errorf("job: %+v", it)
	}
	if it := summarizeJob(&rayv1.RayJob{}); it.State != "New" || len(it.Clusters) != 0 || it.Dashboard != "" {
		t.Errorf("new job: %+v", it)
	}
}

// TestConsoleJobFormEnv: the form's environment variables reach the head's and the workers' Ray containers in the
// form's order; names are checked as Kubernetes checks them, once each, and every error names its item.
func TestConsoleJobFormEnv(t *testing.T) {
	form := func(env ...consoleEnvVar) consoleJobForm {
		return consoleJobForm{Name: "job", Entrypoint: "python x.py", Image: "rayproject/ray:2.52.0", HeadCPU: "1", HeadMemory: "2Gi",
			Workers: 1, WorkerCPU: "1", WorkerMemory: "1Gi", Env: env}
	}
	good := form(consoleEnvVar{"RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT", "600"}, consoleEnvVar{"my.setting-2", ""}, consoleEnvVar{"_X", "a=b c"})
	if v := good.validate(); len(v) > 0 {
		t.Fatalf("a valid form: %v", v)
	}
	want := []corev1.EnvVar{{Name: "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT", Value: "600"}, {Name: "my.setting-2"}, {Name: "_X", Value: "a=b c"}}
	spec := good.rayJob("ns").Spec.RayClusterSpec
	for what, c := range map[string]corev1.Container{"head": spec.HeadGroupSpec.Template.Spec.Containers[0], "worker": spec.WorkerGroupSpecs[0].Template.Spec.Containers[0]} {
		if diff := cmp.Diff(want, c.Env); diff != "" {
			t.Errorf("%s container's env (-want +got):\n%s", what, diff)
		}
	}
	none := form()
	if env := none.rayJob("ns").Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Env; env != nil {
		t.Errorf("no variables asked for, the head has %v", env)
	}

	bad := form(consoleEnvVar{"A", "1"}, consoleEnvVar{"", "x"}, consoleEnvVar{"1ST", ""}, consoleEnvVar{"A", "2"}, consoleEnvVar{"HAS SPACE", ""}, consoleEnvVar{"B", ""})
	// Kubernetes' own words follow the prefix; they are apimachinery's to change.
	wantErrs := []FieldViolation{
		{"env[1].name", "is required"},
		{"env[2].name", "invalid environment variable name: "},
		{"env[3].name", "A is already set by env[0]"},
		{"env[4].name", "invalid environment variable name: "},
	}
	got := bad.validate()
	if len(got) != len(wantErrs) {
		t.Fatalf("env errors: %v, want %v", got, wantErrs)
	}
	for i, w := range wantErrs {
		if got[i].Field != w.Field || !strings.HasPrefix(got[i].Description, w.Description) {
			t.Errorf("env error %d: %v, want %s: %s...", i, got[i], w.Field, w.Description)
		}
	}

	many := form()
	for i := range maxConsoleEnv + 1 {
		many.Env = append(many.Env, consoleEnvVar{Name: fmt.Sprintf("V%d", i)})
	}
	if v := many.validate(); len(v) != 1 || v[0].Field != "env" {
		t.Errorf("%d variables: %v, want one error naming env", len(many.Env), v)
	}
	many.Env = many.Env[:maxConsoleEnv]
	if v := many.validate(); len(v) > 0 {
		t.Errorf("%d variables: %v, want none", len(many.Env), v)
	}
}

// TestConsoleJobFormCPULimit: by default each Ray container's CPU limit is its request (Ray counts the limit's
// CPUs); with noCPULimit only the CPU limit goes, and memory keeps its limit.
func TestConsoleJobFormCPULimit(t *testing.T) {
	f := consoleJobForm{Name: "job", Entrypoint: "e", Image: "rayproject/ray:2.52.0", HeadCPU: "500m", HeadMemory: "2Gi",
		Workers: 1, WorkerCPU: "1500m", WorkerMemory: "1Gi"}
	res := func(f consoleJobForm) (head, worker corev1.ResourceRequirements) {
		spec := f.rayJob("ns").Spec.RayClusterSpec
		return spec.HeadGroupSpec.Template.Spec.Containers[0].Resources, spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Resources
	}
	rl := func(cpu, mem string) corev1.ResourceList {
		l := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)}
		if cpu != "" {
			l[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		return l
	}
	head, worker := res(f)
	if diff := cmp.Diff(corev1.ResourceRequirements{Requests: rl("500m", "2Gi"), Limits: rl("500m", "2Gi")}, head); diff != "" {
		t.Errorf("head resources by default (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(corev1.ResourceRequirements{Requests: rl("1500m", "1Gi"), Limits: rl("1500m", "1Gi")}, worker); diff != "" {
		t.Errorf("worker resources by default (-want +got):\n%s", diff)
	}
	f.NoCPULimit = true
	head, worker = res(f)
	if diff := cmp.Diff(corev1.ResourceRequirements{Requests: rl("500m", "2Gi"), Limits: rl("", "2Gi")}, head); diff != "" {
		t.Errorf("head resources without a CPU limit (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(corev1.ResourceRequirements{Requests: rl("1500m", "1Gi"), Limits: rl("", "1Gi")}, worker); diff != "" {
		t.Errorf("worker resources without a CPU limit (-want +got):\n%s", diff)
	}
}
