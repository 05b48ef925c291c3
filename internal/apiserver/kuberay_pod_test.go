package apiserver_test

import (
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/code"
	corev1 "k8s.io/api/core/v1"

	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/apiserver/apiservertest"
)

// TestKubeRayPodAdditions pins what KubeRay's API server puts into the pod templates it builds, which its clients'
// usual rayStartParams (node-ip-address: $MY_POD_IP) depend on.
func TestKubeRayPodAdditions(t *testing.T) {
	c := apiservertest.Cluster("ns", "demo")
	c.ClusterSpec.WorkerGroupSpec[0].RayStartParams = map[string]string{"node-ip-address": "$MY_POD_IP"}
	c.ClusterSpec.HeadGroupSpec.Environment = &apiserver.EnvironmentVariables{
		Values:     map[string]string{"A": "1"},
		ValuesFrom: map[string]apiserver.EnvValueFrom{"NODE": {Source: apiserver.EnvFromField, Key: "spec.nodeName"}},
	}
	// A worker group that sets MY_POD_IP itself keeps its value.
	c.ClusterSpec.WorkerGroupSpec = append(c.ClusterSpec.WorkerGroupSpec, apiserver.WorkerGroupSpec{
		GroupName: "own", ComputeTemplate: "small", Replicas: 1, MaxReplicas: 1,
		Environment: &apiserver.EnvironmentVariables{Values: map[string]string{"MY_POD_IP": "10.0.0.1"}},
	})
	c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{Envs: &apiserver.EnvironmentVariables{
		Values:     map[string]string{"LOG": "debug"},
		ValuesFrom: map[string]apiserver.EnvValueFrom{"cfg": {Source: apiserver.EnvFromConfigMap, Name: "autoscaler-cfg"}, "creds": {Source: apiserver.EnvFromSecret, Name: "autoscaler-creds"}},
	}}
	if v := apiserver.ValidateCluster(&c, "ns"); len(v) > 0 {
		t.Fatalf("invalid: %v", v)
	}
	rc := apiserver.ClusterToRay(&c, fakeTemplates(c.ClusterSpec))

	head := rc.Spec.HeadGroupSpec.Template.Spec.Containers[0]
	wantHead := []corev1.EnvVar{
		apiserver.FieldEnv("MY_POD_IP", "status.podIP"),
		{Name: "A", Value: "1"},
		apiserver.FieldEnv("NODE", "spec.nodeName"), // a FIELD source's path is its key, as in KubeRay
	}
	if d := cmp.Diff(wantHead, head.Env); d != "" {
		t.Errorf("head env (-want +got):\n%s", d)
	}
	if head.Lifecycle != nil {
		t.Errorf("head has a lifecycle: %+v", head.Lifecycle)
	}

	worker := rc.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0]
	wantWorker := []corev1.EnvVar{
		{Name: "RAY_DISABLE_DOCKER_CPU_WARNING", Value: "1"},
		{Name: "TYPE", Value: "worker"},
		apiserver.ResourceEnv("CPU_REQUEST", "ray-worker", "requests.cpu"),
		apiserver.ResourceEnv("CPU_LIMITS", "ray-worker", "limits.cpu"),
		apiserver.ResourceEnv("MEMORY_REQUESTS", "ray-worker", "requests.memory"),
		apiserver.ResourceEnv("MEMORY_LIMITS", "ray-worker", "limits.memory"),
		apiserver.FieldEnv("MY_POD_NAME", "metadata.name"),
		apiserver.FieldEnv("MY_POD_IP", "status.podIP"),
	}
	if d := cmp.Diff(wantWorker, worker.Env); d != "" {
		t.Errorf("worker env (-want +got):\n%s", d)
	}
	wantStop := &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "ray stop"}}}}
	if d := cmp.Diff(wantStop, worker.Lifecycle); d != "" {
		t.Errorf("worker preStop (-want +got):\n%s", d)
	}
	own := rc.Spec.WorkerGroupSpecs[1].Template.Spec.Containers[0].Env
	var ips []string
	for _, e := range own {
		if e.Name == "MY_POD_IP" {
			ips = append(ips, e.Value)
		}
	}
	if d := cmp.Diff([]string{"10.0.0.1"}, ips); d != "" {
		t.Errorf("a group's own MY_POD_IP (-want +got):\n%s", d)
	}

	// Autoscaler valuesFrom become envFrom, as in KubeRay.
	a := rc.Spec.AutoscalerOptions
	wantFrom := []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "autoscaler-cfg"}}},
		{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "autoscaler-creds"}}},
	}
	if d := cmp.Diff(wantFrom, a.EnvFrom); d != "" {
		t.Errorf("autoscaler envFrom (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]corev1.EnvVar{{Name: "LOG", Value: "debug"}}, a.Env); d != "" {
		t.Errorf("autoscaler env (-want +got):\n%s", d)
	}

	// Reading the cluster back gives the caller's environment, not KubeRay's additions.
	back := apiserver.ClusterFromRay(rc)
	if d := cmp.Diff(c.ClusterSpec.HeadGroupSpec.Environment, back.ClusterSpec.HeadGroupSpec.Environment); d != "" {
		t.Errorf("head environment read back (-want +got):\n%s", d)
	}
	if back.ClusterSpec.WorkerGroupSpec[0].Environment != nil {
		t.Errorf("worker environment read back: %+v", back.ClusterSpec.WorkerGroupSpec[0].Environment)
	}
	wantAuto := &apiserver.EnvironmentVariables{Values: map[string]string{"LOG": "debug"}, ValuesFrom: map[string]apiserver.EnvValueFrom{
		"autoscaler-cfg": {Source: apiserver.EnvFromConfigMap, Name: "autoscaler-cfg"}, "autoscaler-creds": {Source: apiserver.EnvFromSecret, Name: "autoscaler-creds"}}}
	if d := cmp.Diff(wantAuto, back.ClusterSpec.AutoscalerOptions.Envs); d != "" {
		t.Errorf("autoscaler envs read back, keyed by source name (-want +got):\n%s", d)
	}
}

// TestErrorBodyIsGoogleRPCStatus round-trips every kind of error answer through protobuf's JSON codec, as
// KubeRay's Go client decodes them.
func TestErrorBodyIsGoogleRPCStatus(t *testing.T) {
	for _, e := range []*apiserver.APIError{
		apiserver.Invalid(apiserver.FieldViolation{Field: "clusterSpec.headGroupSpec.imagePullPolicy", Description: "must be Always, Never or IfNotPresent"}, apiserver.FieldViolation{Field: "name", Description: "is required"}),
		apiserver.NotFound("cluster %q not found", "x"),
		apiserver.NewError(401, int(code.Code_UNAUTHENTICATED), "no token"),
	} {
		raw := recordError(e)
		st := apiservertest.DecodeRPCStatus(t, raw)
		if int(st.GetCode()) != e.Code || st.GetMessage() != e.Message {
			t.Errorf("decoded %v from %s", st.Status, raw)
		}
		var want []string
		for _, v := range e.Violations() {
			want = append(want, v.Field+": "+v.Description)
		}
		var got []string
		for _, v := range st.GetFieldViolations() {
			got = append(got, v.GetField()+": "+v.GetDescription())
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("field violations (-want +got):\n%s", d)
		}
	}
}

func recordError(e *apiserver.APIError) []byte {
	rec := httptest.NewRecorder()
	apiserver.WriteError(rec, e)
	return rec.Body.Bytes()
}
