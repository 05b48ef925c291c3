package envtest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/code"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/apiserver/apiservertest"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestAPIServer runs every envtest-backed test against one control plane: handler tests for each endpoint and
// validation rule, auth with real tokens, and Schemathesis against the live server.
func TestAPIServer(t *testing.T) {
	cfg, k := testutil.StartEnvtest(t)
	e := newTestEnv(t, cfg, k)
	t.Run("ComputeTemplates", e.testComputeTemplates)
	t.Run("Clusters", e.testClusters)
	t.Run("ClusterValidation", e.testClusterValidation)
	t.Run("Pagination", e.testPagination)
	t.Run("Jobs", e.testJobs)
	t.Run("Services", e.testServices)
	t.Run("ImagePullJobs", e.testImagePullJobs)
	t.Run("JobSubmissions", e.testJobSubmissions)
	t.Run("Requests", e.testRequests)
	t.Run("KubeRayClients", e.testKubeRayClients)
	t.Run("V2", e.testV2)
	t.Run("KubeRayDashboard", e.testKubeRayDashboard)
	t.Run("Auth", e.testAuth)
	t.Run("Schemathesis", e.testSchemathesis)
}

func (e *testEnv) testComputeTemplates(t *testing.T) {
	ns := e.Namespace(t)
	base := "/apis/v1/namespaces/" + ns + "/compute_templates"
	tpl := apiserver.ComputeTemplate{
		Name: "gpu", Namespace: ns, CPU: 8, Memory: 32, GPU: 1, GPUAccelerator: "nvidia.com/gpu",
		ExtendedResources: map[string]uint32{"vpc.amazonaws.com/efa": 2},
		Tolerations:       []apiserver.PodToleration{{Key: "ray.io/node-type", Operator: "Equal", Value: "worker", Effect: "NoSchedule"}},
	}
	var got apiserver.ComputeTemplate
	mustOK(t, e.do(t, "POST", base, tpl), &got)
	want := tpl
	want.MemoryUnit = "Gi"
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("created template (-want +got):\n%s", d)
	}
	// Stored the way KubeRay stores it.
	var cm corev1.ConfigMap
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "gpu"}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels["ray.io/config-type"] != "compute-template" || cm.Labels["ray.io/compute-template"] != "gpu" {
		t.Errorf("labels: %v", cm.Labels)
	}
	for k, v := range map[string]string{"name": "gpu", "namespace": ns, "cpu": "8", "memory": "32", "memory_unit": "Gi", "gpu": "1", "gpu_accelerator": "nvidia.com/gpu", "extended_resources": `{"vpc.amazonaws.com/efa":2}`} {
		if cm.Data[k] != v {
			t.Errorf("data[%s] = %q, want %q", k, cm.Data[k], v)
		}
	}
	mustOK(t, e.do(t, "GET", base+"/gpu", nil), &got)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("got template (-want +got):\n%s", d)
	}
	mustFail(t, e.do(t, "POST", base, tpl), 409, code.Code_ALREADY_EXISTS, "")
	var list apiserver.ListComputeTemplatesResponse
	mustOK(t, e.do(t, "GET", base, nil), &list)
	if len(list.ComputeTemplates) != 1 {
		t.Errorf("list: %+v", list)
	}
	mustOK(t, e.do(t, "GET", "/apis/v1/compute_templates", nil), &list)
	found := false
	for _, c := range list.ComputeTemplates {
		found = found || (c.Namespace == ns && c.Name == "gpu")
	}
	if !found {
		t.Errorf("list across namespaces misses %s/gpu", ns)
	}
	// A ConfigMap that is not a template is not one.
	plain := &corev1.ConfigMap{}
	plain.Name, plain.Namespace = "plain", ns
	if err := e.k.Create(context.Background(), plain); err != nil {
		t.Fatal(err)
	}
	mustFail(t, e.do(t, "GET", base+"/plain", nil), 404, code.Code_NOT_FOUND, "")
	mustFail(t, e.do(t, "DELETE", base+"/plain", nil), 404, code.Code_NOT_FOUND, "")
	mustOK(t, e.do(t, "DELETE", base+"/gpu", nil), nil)
	mustFail(t, e.do(t, "GET", base+"/gpu", nil), 404, code.Code_NOT_FOUND, "")
	mustFail(t, e.do(t, "DELETE", base+"/gpu", nil), 404, code.Code_NOT_FOUND, "")

	// Every validation rule names its field.
	for _, tc := range []struct {
		field  string
		mutate func(*apiserver.ComputeTemplate)
	}{
		{"name", func(c *apiserver.ComputeTemplate) { c.Name = "" }},
		{"name", func(c *apiserver.ComputeTemplate) { c.Name = "Not_A_Name" }},
		{"namespace", func(c *apiserver.ComputeTemplate) { c.Namespace = "" }},
		{"namespace", func(c *apiserver.ComputeTemplate) { c.Namespace = "other" }},
		{"cpu", func(c *apiserver.ComputeTemplate) { c.CPU = 0 }},
		{"memory", func(c *apiserver.ComputeTemplate) { c.Memory = 0 }},
		{"memoryUnit", func(c *apiserver.ComputeTemplate) { c.MemoryUnit = "GB" }},
		{"gpuAccelerator", func(c *apiserver.ComputeTemplate) { c.GPUAccelerator = "bad accelerator" }},
		{"extendedResources.bad key", func(c *apiserver.ComputeTemplate) { c.ExtendedResources = map[string]uint32{"bad key": 1} }},
		{"extendedResources.cpu", func(c *apiserver.ComputeTemplate) { c.ExtendedResources = map[string]uint32{"cpu": 1} }},
		{"tolerations[0].operator", func(c *apiserver.ComputeTemplate) {
			c.Tolerations = []apiserver.PodToleration{{Key: "k", Operator: "Like", Effect: "NoSchedule"}}
		}},
		{"tolerations[0].key", func(c *apiserver.ComputeTemplate) {
			c.Tolerations = []apiserver.PodToleration{{Operator: "Equal", Effect: "NoSchedule"}}
		}},
		{"tolerations[0].value", func(c *apiserver.ComputeTemplate) {
			c.Tolerations = []apiserver.PodToleration{{Key: "k", Operator: "Exists", Value: "v", Effect: "NoSchedule"}}
		}},
		{"tolerations[0].effect", func(c *apiserver.ComputeTemplate) {
			c.Tolerations = []apiserver.PodToleration{{Key: "k", Operator: "Exists", Effect: "Sometimes"}}
		}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			c := apiservertest.Template(ns, "bad")
			tc.mutate(&c)
			mustFail(t, e.do(t, "POST", base, c), 400, code.Code_INVALID_ARGUMENT, tc.field)
		})
	}
	// Wrong JSON types and (under Strict field validation) unknown fields name the field too.
	for field, body := range map[string]string{
		"cpu":                `{"name":"x","namespace":"` + ns + `","cpu":-1,"memory":1}`,
		"memory":             `{"name":"x","namespace":"` + ns + `","cpu":1,"memory":"lots"}`,
		"colour":             `{"name":"x","namespace":"` + ns + `","cpu":1,"memory":1,"colour":"red"}`,
		"Name":               `{"Name":"x","namespace":"` + ns + `","cpu":1,"memory":1}`,
		"gpu":                `{"name":"x","namespace":"` + ns + `","cpu":1,"memory":1,"gpu":4294967296}`,
		"body":               `{"name":"x"} {"more":1}`,
		"tolerations[0].key": `{"name":"x","namespace":"` + ns + `","cpu":1,"memory":1,"tolerations":[{"key":1,"operator":"Exists","effect":"NoSchedule"}]}`,
	} {
		t.Run("json/"+field, func(t *testing.T) {
			mustFail(t, e.do(t, "POST", base+"?fieldValidation=Strict", body), 400, code.Code_INVALID_ARGUMENT, field)
		})
	}
}

func (e *testEnv) testClusters(t *testing.T) {
	ns := e.Namespace(t)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", apiservertest.Template(ns, "small")), nil)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", apiserver.ComputeTemplate{
		Name: "big", Namespace: ns, CPU: 16, Memory: 512, MemoryUnit: "Mi", GPU: 2,
		Tolerations: []apiserver.PodToleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}},
	}), nil)
	base := "/apis/v1/namespaces/" + ns + "/clusters"
	c := apiservertest.Cluster(ns, "demo")
	c.Environment = 2
	c.Annotations = map[string]string{"ray.io/enable-serve-service": "true"}
	c.Envs = &apiserver.EnvironmentVariables{Values: map[string]string{"SHARED": "1"}}
	c.ClusterSpec.EnableInTreeAutoscaling = true
	c.ClusterSpec.HeadServiceAnnotations = map[string]string{"example.com/lb": "internal"}
	c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{IdleTimeoutSeconds: 30, UpscalingMode: "Conservative", ImagePullPolicy: "IfNotPresent", CPU: "500m", Memory: "512Mi",
		Envs: &apiserver.EnvironmentVariables{Values: map[string]string{"AUTOSCALER_LOG": "debug"}}, Volumes: []apiserver.Volume{{Name: "data", MountPath: "/data"}}}
	h := c.ClusterSpec.HeadGroupSpec
	h.Image, h.ImagePullPolicy, h.ServiceType, h.EnableIngress = "rayproject/ray:2.52.0-py311", "Always", "NodePort", true
	h.ServiceAccount, h.ImagePullSecret = "ray-head", "regcred"
	h.Labels, h.Annotations = map[string]string{"team": "ml"}, map[string]string{"example.com/owner": "alice"}
	h.Environment = &apiserver.EnvironmentVariables{
		Values: map[string]string{"HEAD_ONLY": "yes"},
		ValuesFrom: map[string]apiserver.EnvValueFrom{
			"FROM_CM":     {Source: apiserver.EnvFromConfigMap, Name: "cm", Key: "k"},
			"FROM_SECRET": {Source: apiserver.EnvFromSecret, Name: "sec", Key: "token"},
			"CPU_LIMIT":   {Source: apiserver.EnvFromResourceField, Name: "ray-head", Key: "limits.cpu"},
			"POD_IP":      {Source: apiserver.EnvFromField, Key: "status.podIP"},
		},
	}
	h.SecurityContext = &apiserver.SecurityContext{Privileged: ptrBool(false), Capabilities: &apiserver.Capabilities{Add: []string{"SYS_PTRACE"}, Drop: []string{"NET_RAW"}}}
	h.Volumes = []apiserver.Volume{
		{Name: "data", MountPath: "/data", VolumeType: apiserver.VolumePVC, Source: "claim", ReadOnly: true},
		{Name: "host", MountPath: "/host", VolumeType: apiserver.VolumeHostPath, Source: "/var/log", HostPathType: apiserver.HostPathFile, MountPropagationMode: apiserver.PropagationHostToContainer},
		{Name: "scratch", MountPath: "/scratch", VolumeType: apiserver.VolumeEphemeral, StorageClassName: "fast", AccessMode: apiserver.AccessRWX, Storage: "10Gi"},
		{Name: "conf", MountPath: "/conf", VolumeType: apiserver.VolumeConfigMap, Source: "conf", Items: map[string]string{"a": "a.yaml"}},
		{Name: "creds", MountPath: "/creds", VolumeType: apiserver.VolumeSecret, Source: "creds"},
		{Name: "shm", MountPath: "/dev/shm", VolumeType: apiserver.VolumeEmptyDir, Storage: "1Gi"},
	}
	w := &c.ClusterSpec.WorkerGroupSpec[0]
	w.ComputeTemplate, w.ImagePullPolicy = "big", "Never"
	c.ClusterSpec.WorkerGroupSpec = append(c.ClusterSpec.WorkerGroupSpec, apiserver.WorkerGroupSpec{
		GroupName: "cpu", ComputeTemplate: "small", Replicas: 2, MinReplicas: 2, MaxReplicas: 2,
	})

	var got apiserver.Cluster
	mustOK(t, e.do(t, "POST", base, c), &got)
	if got.CreatedAt == nil {
		t.Error("createdAt is not set")
	}
	// The answer is the cluster as stored: compare the input fields (environment variables of the cluster move
	// into each group's, as they are merged into the Ray container's env).
	in := c
	in.Envs = nil
	in.ClusterSpec.HeadGroupSpec.Environment.Values["SHARED"] = "1"
	in.ClusterSpec.WorkerGroupSpec[0].Environment = &apiserver.EnvironmentVariables{Values: map[string]string{"SHARED": "1"}}
	in.ClusterSpec.WorkerGroupSpec[1].Environment = &apiserver.EnvironmentVariables{Values: map[string]string{"SHARED": "1"}}
	in.ClusterSpec.WorkerGroupSpec[0].Image = "rayproject/ray:2.52.0"
	in.ClusterSpec.WorkerGroupSpec[0].MinReplicas = 1 // KubeRay's rule: minReplicas 0 is stored as replicas
	in.ClusterSpec.WorkerGroupSpec[1].Image = "rayproject/ray:2.52.0"
	got.CreatedAt = nil
	if d := cmp.Diff(in, got); d != "" {
		t.Errorf("created cluster (-want +got):\n%s", d)
	}

	var rc rayv1.RayCluster
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "demo"}, &rc); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"ray.io/cluster-name": "demo", "ray.io/user": "alice", "ray.io/version": "2.52.0", "ray.io/environment": "STAGING",
		"app.kubernetes.io/name": "kuberay", "app.kubernetes.io/managed-by": "kuberay-apiserver"} {
		if rc.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, rc.Labels[k], v)
		}
	}
	head := rc.Spec.HeadGroupSpec.Template
	hc := head.Spec.Containers[0]
	if hc.Name != "ray-head" || hc.Image != "rayproject/ray:2.52.0-py311" || hc.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("head container: %s %s %s", hc.Name, hc.Image, hc.ImagePullPolicy)
	}
	if head.Annotations["ray.io/compute-template"] != "small" || head.Annotations["ray.io/compute-image"] != hc.Image {
		t.Errorf("head annotations: %v", head.Annotations)
	}
	if q := hc.Resources.Limits[corev1.ResourceCPU]; q.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("head cpu limit %s", q.String())
	}
	if q := hc.Resources.Requests[corev1.ResourceMemory]; q.Cmp(resource.MustParse("4Gi")) != 0 {
		t.Errorf("head memory request %s", q.String())
	}
	ports := map[string]int32{}
	for _, p := range hc.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if d := cmp.Diff(map[string]int32{"redis": 6379, "head": 10001, "dashboard": 8265, "metrics": 8080, "dashboard-agent": 52365, "serve": 8000}, ports); d != "" {
		t.Errorf("head ports (-want +got):\n%s", d)
	}
	wc := rc.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0]
	if wc.Name != "ray-worker" || wc.ImagePullPolicy != corev1.PullNever {
		t.Errorf("worker container %s %s", wc.Name, wc.ImagePullPolicy)
	}
	if q := wc.Resources.Limits["nvidia.com/gpu"]; q.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("worker gpu %s", q.String())
	}
	if q := wc.Resources.Limits[corev1.ResourceMemory]; q.Cmp(resource.MustParse("512Mi")) != 0 {
		t.Errorf("worker memory %s", q.String())
	}
	if tol := rc.Spec.WorkerGroupSpecs[0].Template.Spec.Tolerations; len(tol) != 1 || tol[0].Key != "gpu" {
		t.Errorf("worker tolerations %v", tol)
	}
	if *rc.Spec.WorkerGroupSpecs[0].MaxReplicas != 3 || rc.Spec.AutoscalerOptions == nil || *rc.Spec.AutoscalerOptions.IdleTimeoutSeconds != 30 {
		t.Errorf("worker/autoscaler spec: %+v %+v", rc.Spec.WorkerGroupSpecs[0], rc.Spec.AutoscalerOptions)
	}

	mustOK(t, e.do(t, "GET", base+"/demo", nil), &got)
	if got.ClusterSpec == nil || got.User != "alice" {
		t.Errorf("get: %+v", got)
	}
	// State comes from the RayCluster's status.
	rc.Status.State = rayv1.Ready
	rc.Status.Endpoints = map[string]string{"dashboard": "8265"}
	if err := e.k.Status().Update(context.Background(), &rc); err != nil {
		t.Fatal(err)
	}
	mustOK(t, e.do(t, "GET", base+"/demo", nil), &got)
	if got.ClusterState != "ready" || got.ServiceEndpoint["dashboard"] != "8265" {
		t.Errorf("state %q endpoints %v", got.ClusterState, got.ServiceEndpoint)
	}
	mustFail(t, e.do(t, "POST", base, c), 409, code.Code_ALREADY_EXISTS, "")

	var list apiserver.ListClustersResponse
	mustOK(t, e.do(t, "GET", base, nil), &list)
	if len(list.Clusters) != 1 || list.Clusters[0].Name != "demo" {
		t.Errorf("list: %+v", list)
	}
	mustOK(t, e.do(t, "GET", "/apis/v1/clusters", nil), &list)
	if len(list.Clusters) == 0 {
		t.Error("list across namespaces is empty")
	}
	// RayClusters not created through this API are not listed, got or deleted.
	foreign := rc.DeepCopy()
	foreign.ObjectMeta = rc.ObjectMeta
	foreign.ResourceVersion, foreign.UID, foreign.Name, foreign.Labels = "", "", "foreign", nil
	foreign.Status = rayv1.RayClusterStatus{}
	if err := e.k.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	mustOK(t, e.do(t, "GET", base, nil), &list)
	if len(list.Clusters) != 1 {
		t.Errorf("foreign cluster listed: %+v", list)
	}
	mustFail(t, e.do(t, "GET", base+"/foreign", nil), 404, code.Code_NOT_FOUND, "")
	mustFail(t, e.do(t, "DELETE", base+"/foreign", nil), 404, code.Code_NOT_FOUND, "")

	mustOK(t, e.do(t, "DELETE", base+"/demo", nil), nil)
	mustFail(t, e.do(t, "DELETE", base+"/demo", nil), 404, code.Code_NOT_FOUND, "")
	mustFail(t, e.do(t, "GET", base+"/nope", nil), 404, code.Code_NOT_FOUND, "")
}

func ptrBool(b bool) *bool { return &b }

// testClusterValidation checks every rule of the cluster spec, each naming its field.
func (e *testEnv) testClusterValidation(t *testing.T) {
	ns := e.Namespace(t)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", apiservertest.Template(ns, "small")), nil)
	base := "/apis/v1/namespaces/" + ns + "/clusters"
	for _, tc := range []struct {
		field  string
		mutate func(*apiserver.Cluster)
	}{
		{"name", func(c *apiserver.Cluster) { c.Name = "" }},
		{"name", func(c *apiserver.Cluster) { c.Name = "UPPER" }},
		{"name", func(c *apiserver.Cluster) { c.Name = strings.Repeat("a", 64) }},
		{"namespace", func(c *apiserver.Cluster) { c.Namespace = "" }},
		{"namespace", func(c *apiserver.Cluster) { c.Namespace = "elsewhere" }},
		{"user", func(c *apiserver.Cluster) { c.User = "" }},
		{"version", func(c *apiserver.Cluster) { c.Version = "2.52 beta" }},
		{"annotations.bad key!", func(c *apiserver.Cluster) { c.Annotations = map[string]string{"bad key!": "x"} }},
		{"envs.values.1BAD", func(c *apiserver.Cluster) {
			c.Envs = &apiserver.EnvironmentVariables{Values: map[string]string{"1BAD": "x"}}
		}},
		{"clusterSpec", func(c *apiserver.Cluster) { c.ClusterSpec = nil }},
		{"clusterSpec.headGroupSpec", func(c *apiserver.Cluster) { c.ClusterSpec.HeadGroupSpec = nil }},
		{"clusterSpec.headGroupSpec.computeTemplate", func(c *apiserver.Cluster) { c.ClusterSpec.HeadGroupSpec.ComputeTemplate = "" }},
		{"clusterSpec.headGroupSpec.computeTemplate", func(c *apiserver.Cluster) { c.ClusterSpec.HeadGroupSpec.ComputeTemplate = "../../etc/passwd" }},
		{"clusterSpec.headGroupSpec.rayStartParams", func(c *apiserver.Cluster) { c.ClusterSpec.HeadGroupSpec.RayStartParams = nil }},
		{"clusterSpec.headGroupSpec.rayStartParams.--port", func(c *apiserver.Cluster) { c.ClusterSpec.HeadGroupSpec.RayStartParams["--port"] = "1" }},
		{"clusterSpec.headGroupSpec.imagePullPolicy", func(c *apiserver.Cluster) { c.ClusterSpec.HeadGroupSpec.ImagePullPolicy = "Sometimes" }},
		{"clusterSpec.headGroupSpec.imagePullPolicy", func(c *apiserver.Cluster) { c.ClusterSpec.HeadGroupSpec.ImagePullPolicy = "always" }},
		{"clusterSpec.headGroupSpec.image", func(c *apiserver.Cluster) { c.ClusterSpec.HeadGroupSpec.Image = "ray project" }},
		{"clusterSpec.headGroupSpec.serviceType", func(c *apiserver.Cluster) { c.ClusterSpec.HeadGroupSpec.ServiceType = "Public" }},
		{"clusterSpec.headGroupSpec.serviceAccount", func(c *apiserver.Cluster) { c.ClusterSpec.HeadGroupSpec.ServiceAccount = "Bad_SA" }},
		{"clusterSpec.headGroupSpec.imagePullSecret", func(c *apiserver.Cluster) { c.ClusterSpec.HeadGroupSpec.ImagePullSecret = "bad secret" }},
		{"clusterSpec.headGroupSpec.labels.team", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Labels = map[string]string{"team": "has spaces"}
		}},
		{"clusterSpec.headGroupSpec.annotations.-x", func(c *apiserver.Cluster) { c.ClusterSpec.HeadGroupSpec.Annotations = map[string]string{"-x": "1"} }},
		{"clusterSpec.headGroupSpec.environment.valuesFrom.V.key", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Environment = &apiserver.EnvironmentVariables{ValuesFrom: map[string]apiserver.EnvValueFrom{"V": {Source: apiserver.EnvFromSecret, Name: "s"}}}
		}},
		{"clusterSpec.headGroupSpec.environment.valuesFrom.V.name", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Environment = &apiserver.EnvironmentVariables{ValuesFrom: map[string]apiserver.EnvValueFrom{"V": {Source: apiserver.EnvFromConfigMap, Key: "k"}}}
		}},
		{"clusterSpec.headGroupSpec.environment.valuesFrom.V.key", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Environment = &apiserver.EnvironmentVariables{ValuesFrom: map[string]apiserver.EnvValueFrom{"V": {Source: apiserver.EnvFromField}}}
		}},
		{"clusterSpec.headGroupSpec.environment.valuesFrom.V.name", func(c *apiserver.Cluster) {
			// KubeRay reads a FIELD source's path from key; a path in name would be lost.
			c.ClusterSpec.HeadGroupSpec.Environment = &apiserver.EnvironmentVariables{ValuesFrom: map[string]apiserver.EnvValueFrom{"V": {Source: apiserver.EnvFromField, Name: "status.podIP", Key: "status.podIP"}}}
		}},
		{"clusterSpec.headGroupSpec.environment.valuesFrom.V", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Environment = &apiserver.EnvironmentVariables{Values: map[string]string{"V": "1"}, ValuesFrom: map[string]apiserver.EnvValueFrom{"V": {Source: apiserver.EnvFromField, Key: "status.podIP"}}}
		}},
		{"clusterSpec.autoscalerOptions.envs.valuesFrom.V.source", func(c *apiserver.Cluster) {
			c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{Envs: &apiserver.EnvironmentVariables{ValuesFrom: map[string]apiserver.EnvValueFrom{"V": {Source: apiserver.EnvFromField, Name: "x"}}}}
		}},
		{"clusterSpec.autoscalerOptions.envs.valuesFrom.V.key", func(c *apiserver.Cluster) {
			c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{Envs: &apiserver.EnvironmentVariables{ValuesFrom: map[string]apiserver.EnvValueFrom{"V": {Source: apiserver.EnvFromSecret, Name: "s", Key: "k"}}}}
		}},
		{"clusterSpec.autoscalerOptions.envs.valuesFrom.V.name", func(c *apiserver.Cluster) {
			c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{Envs: &apiserver.EnvironmentVariables{ValuesFrom: map[string]apiserver.EnvValueFrom{"V": {Source: apiserver.EnvFromSecret}}}}
		}},
		{"clusterSpec.headGroupSpec.securityContext.capabilities.add[0]", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.SecurityContext = &apiserver.SecurityContext{Capabilities: &apiserver.Capabilities{Add: []string{" "}}}
		}},
		{"clusterSpec.headGroupSpec.volumes[0].name", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Volumes = []apiserver.Volume{{MountPath: "/d", Source: "c"}}
		}},
		{"clusterSpec.headGroupSpec.volumes[1].name", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Volumes = []apiserver.Volume{{Name: "a", MountPath: "/a", Source: "c"}, {Name: "a", MountPath: "/b", Source: "c"}}
		}},
		{"clusterSpec.headGroupSpec.volumes[1].mountPath", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Volumes = []apiserver.Volume{{Name: "a", MountPath: "/a", Source: "c"}, {Name: "b", MountPath: "/a", Source: "c"}}
		}},
		{"clusterSpec.headGroupSpec.volumes[0].mountPath", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Volumes = []apiserver.Volume{{Name: "a", Source: "c"}}
		}},
		{"clusterSpec.headGroupSpec.volumes[0].mountPath", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Volumes = []apiserver.Volume{{Name: "a", MountPath: "relative", Source: "c"}}
		}},
		{"clusterSpec.headGroupSpec.volumes[0].source", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Volumes = []apiserver.Volume{{Name: "a", MountPath: "/a"}}
		}},
		{"clusterSpec.headGroupSpec.volumes[0].source", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Volumes = []apiserver.Volume{{Name: "a", MountPath: "/a", VolumeType: apiserver.VolumeHostPath, Source: "rel"}}
		}},
		{"clusterSpec.headGroupSpec.volumes[0].source", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Volumes = []apiserver.Volume{{Name: "a", MountPath: "/a", VolumeType: apiserver.VolumeSecret}}
		}},
		{"clusterSpec.headGroupSpec.volumes[0].storage", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Volumes = []apiserver.Volume{{Name: "a", MountPath: "/a", VolumeType: apiserver.VolumeEphemeral}}
		}},
		{"clusterSpec.headGroupSpec.volumes[0].storage", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Volumes = []apiserver.Volume{{Name: "a", MountPath: "/a", VolumeType: apiserver.VolumeEmptyDir, Storage: "lots"}}
		}},
		{"clusterSpec.headGroupSpec.volumes[0].items", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Volumes = []apiserver.Volume{{Name: "a", MountPath: "/a", Source: "c", Items: map[string]string{"k": "p"}}}
		}},
		{"clusterSpec.headGroupSpec.volumes[0].items.k", func(c *apiserver.Cluster) {
			c.ClusterSpec.HeadGroupSpec.Volumes = []apiserver.Volume{{Name: "a", MountPath: "/a", VolumeType: apiserver.VolumeConfigMap, Source: "c", Items: map[string]string{"k": "../etc"}}}
		}},
		{"clusterSpec.workerGroupSpec[0].groupName", func(c *apiserver.Cluster) { c.ClusterSpec.WorkerGroupSpec[0].GroupName = "" }},
		{"clusterSpec.workerGroupSpec[1].groupName", func(c *apiserver.Cluster) {
			c.ClusterSpec.WorkerGroupSpec = append(c.ClusterSpec.WorkerGroupSpec, c.ClusterSpec.WorkerGroupSpec[0])
		}},
		{"clusterSpec.workerGroupSpec[0].computeTemplate", func(c *apiserver.Cluster) { c.ClusterSpec.WorkerGroupSpec[0].ComputeTemplate = "" }},
		{"clusterSpec.workerGroupSpec[0].computeTemplate", func(c *apiserver.Cluster) { c.ClusterSpec.WorkerGroupSpec[0].ComputeTemplate = "a/b" }},
		{"clusterSpec.workerGroupSpec[0].maxReplicas", func(c *apiserver.Cluster) { c.ClusterSpec.WorkerGroupSpec[0].MaxReplicas = 0 }},
		{"clusterSpec.workerGroupSpec[0].minReplicas", func(c *apiserver.Cluster) { c.ClusterSpec.WorkerGroupSpec[0].MinReplicas = 4 }},
		{"clusterSpec.workerGroupSpec[0].minReplicas", func(c *apiserver.Cluster) { c.ClusterSpec.WorkerGroupSpec[0].MinReplicas = -1 }},
		{"clusterSpec.workerGroupSpec[0].replicas", func(c *apiserver.Cluster) { c.ClusterSpec.WorkerGroupSpec[0].Replicas = 5 }},
		{"clusterSpec.workerGroupSpec[0].imagePullPolicy", func(c *apiserver.Cluster) { c.ClusterSpec.WorkerGroupSpec[0].ImagePullPolicy = "Sometimes" }},
		{"clusterSpec.workerGroupSpec[0].image", func(c *apiserver.Cluster) { c.ClusterSpec.WorkerGroupSpec[0].Image = "-bad" }},
		{"clusterSpec.workerGroupSpec[0].volumes[0].name", func(c *apiserver.Cluster) {
			c.ClusterSpec.WorkerGroupSpec[0].Volumes = []apiserver.Volume{{Name: "Bad_Name", MountPath: "/a", Source: "c"}}
		}},
		{"clusterSpec.workerGroupSpec[0].environment.values.A=B", func(c *apiserver.Cluster) {
			c.ClusterSpec.WorkerGroupSpec[0].Environment = &apiserver.EnvironmentVariables{Values: map[string]string{"A=B": "1"}}
		}},
		{"clusterSpec.workerGroupSpec[0].labels.a/b/c", func(c *apiserver.Cluster) { c.ClusterSpec.WorkerGroupSpec[0].Labels = map[string]string{"a/b/c": "x"} }},
		{"clusterSpec.workerGroupSpec[0].serviceAccount", func(c *apiserver.Cluster) { c.ClusterSpec.WorkerGroupSpec[0].ServiceAccount = "-sa" }},
		{"clusterSpec.autoscalerOptions.imagePullPolicy", func(c *apiserver.Cluster) {
			c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{ImagePullPolicy: "Daily"}
		}},
		{"clusterSpec.autoscalerOptions.upscalingMode", func(c *apiserver.Cluster) {
			c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{UpscalingMode: "Fast"}
		}},
		{"clusterSpec.autoscalerOptions.cpu", func(c *apiserver.Cluster) {
			c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{CPU: "half"}
		}},
		{"clusterSpec.autoscalerOptions.memory", func(c *apiserver.Cluster) {
			c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{Memory: "-1Gi"}
		}},
		{"clusterSpec.autoscalerOptions.idleTimeoutSeconds", func(c *apiserver.Cluster) {
			c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{IdleTimeoutSeconds: -1}
		}},
		{"clusterSpec.autoscalerOptions.image", func(c *apiserver.Cluster) {
			c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{Image: "a b"}
		}},
		{"clusterSpec.autoscalerOptions.envs.values.=", func(c *apiserver.Cluster) {
			c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{Envs: &apiserver.EnvironmentVariables{Values: map[string]string{"=": "1"}}}
		}},
		{"clusterSpec.autoscalerOptions.volumes[0].mountPath", func(c *apiserver.Cluster) {
			c.ClusterSpec.AutoscalerOptions = &apiserver.AutoscalerOptions{Volumes: []apiserver.Volume{{Name: "a"}}}
		}},
		{"clusterSpec.headServiceAnnotations.bad key", func(c *apiserver.Cluster) { c.ClusterSpec.HeadServiceAnnotations = map[string]string{"bad key": "1"} }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			c := apiservertest.Cluster(ns, "bad")
			tc.mutate(&c)
			mustFail(t, e.do(t, "POST", base, c), 400, code.Code_INVALID_ARGUMENT, tc.field)
		})
	}
	// JSON-level rules: enums by number or name, unknown fields (under Strict), types.
	for field, body := range map[string]string{
		"environment": `{"name":"x","namespace":"` + ns + `","user":"u","environment":"MARS"}`,
		"clusterSpec.headGroupSpec.volumes[0].volumeType": `{"name":"x","namespace":"` + ns + `","user":"u","clusterSpec":{"headGroupSpec":{"computeTemplate":"small","rayStartParams":{"a":"b"},"volumes":[{"name":"v","mountPath":"/v","volumeType":9}]}}}`,
		"clusterSpec.headGroupSpec.enableIngress":         `{"name":"x","namespace":"` + ns + `","user":"u","clusterSpec":{"headGroupSpec":{"computeTemplate":"small","rayStartParams":{"a":"b"},"enableIngress":"yes"}}}`,
		"clusterSpec.workerGroupSpec[0].replicas":         `{"name":"x","namespace":"` + ns + `","user":"u","clusterSpec":{"headGroupSpec":{"computeTemplate":"small","rayStartParams":{"a":"b"}},"workerGroupSpec":[{"groupName":"g","computeTemplate":"small","maxReplicas":2,"replicas":1.5}]}}`,
		"clusterSpec.workerGroupSpec[0].colour":           `{"name":"x","namespace":"` + ns + `","user":"u","clusterSpec":{"headGroupSpec":{"computeTemplate":"small","rayStartParams":{"a":"b"}},"workerGroupSpec":[{"groupName":"g","computeTemplate":"small","maxReplicas":2,"colour":"red"}]}}`,
		"clusterSpec.headGroupSpec.rayStartParams.a":      `{"name":"x","namespace":"` + ns + `","user":"u","clusterSpec":{"headGroupSpec":{"computeTemplate":"small","rayStartParams":{"a":1}}}}`,
		"createdAt": `{"name":"x","namespace":"` + ns + `","user":"u","createdAt":"yesterday"}`,
	} {
		t.Run("json/"+field, func(t *testing.T) {
			mustFail(t, e.do(t, "POST", base+"?fieldValidation=Strict", body), 400, code.Code_INVALID_ARGUMENT, field)
		})
	}
	// Enums are accepted by name as well as number.
	byName := `{"name":"named","namespace":"` + ns + `","user":"u","environment":"PRODUCTION","clusterSpec":{"headGroupSpec":{"computeTemplate":"small","rayStartParams":{"a":"b"},"volumes":[{"name":"v","mountPath":"/v","volumeType":"EMPTY_DIR"}]}}}`
	var got apiserver.Cluster
	mustOK(t, e.do(t, "POST", base, byName), &got)
	if got.Environment != 3 || got.ClusterSpec.HeadGroupSpec.Volumes[0].VolumeType != apiserver.VolumeEmptyDir {
		t.Errorf("enums by name: %+v", got)
	}
	if !strings.Contains(string(e.do(t, "GET", base+"/named", nil).body), `"environment":3`) {
		t.Error("enums are not answered as numbers")
	}
	// A compute template that does not exist is named (422), at every place it is used.
	c := apiservertest.Cluster(ns, "missing")
	c.ClusterSpec.HeadGroupSpec.ComputeTemplate = "nope"
	c.ClusterSpec.WorkerGroupSpec[0].ComputeTemplate = "nope"
	s := mustFail(t, e.do(t, "POST", base, c), 422, code.Code_FAILED_PRECONDITION, "clusterSpec.headGroupSpec.computeTemplate")
	if len(s.Violations()) != 2 || s.Violations()[1].Field != "clusterSpec.workerGroupSpec[0].computeTemplate" {
		t.Errorf("details: %+v", s.Violations())
	}
	// Many errors at once are all reported.
	c = apiservertest.Cluster(ns, "")
	c.User = ""
	c.ClusterSpec.HeadGroupSpec.ImagePullPolicy = "x"
	if s := mustFail(t, e.do(t, "POST", base, c), 400, code.Code_INVALID_ARGUMENT, "user"); len(s.Violations()) != 3 {
		t.Errorf("want 3 details, got %+v", s.Violations())
	}
}

func (e *testEnv) testPagination(t *testing.T) {
	ns := e.Namespace(t)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", apiservertest.Template(ns, "small")), nil)
	for _, n := range []string{"a", "b", "c"} {
		mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/clusters", apiservertest.Cluster(ns, n)), nil)
		mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", apiservertest.Template(ns, "t"+n)), nil)
	}
	var names []string
	cont := ""
	for range 5 {
		var page apiserver.ListClustersResponse
		mustOK(t, e.do(t, "GET", "/apis/v1/namespaces/"+ns+"/clusters?limit=2&continue="+cont, nil), &page)
		if len(page.Clusters) > 2 {
			t.Fatalf("page of %d", len(page.Clusters))
		}
		for _, c := range page.Clusters {
			names = append(names, c.Name)
		}
		if cont = page.Continue; cont == "" {
			break
		}
	}
	if d := cmp.Diff([]string{"a", "b", "c"}, names); d != "" {
		t.Errorf("paged names (-want +got):\n%s", d)
	}
	var tl apiserver.ListComputeTemplatesResponse
	mustOK(t, e.do(t, "GET", "/apis/v1/namespaces/"+ns+"/compute_templates?limit=3", nil), &tl)
	if len(tl.ComputeTemplates) != 3 || tl.Continue == "" {
		t.Errorf("template page: %d items, continue %q", len(tl.ComputeTemplates), tl.Continue)
	}
	mustFail(t, e.do(t, "GET", "/apis/v1/clusters?limit=-1", nil), 400, code.Code_INVALID_ARGUMENT, "limit")
	mustFail(t, e.do(t, "GET", "/apis/v1/services?pageSize=x", nil), 400, code.Code_INVALID_ARGUMENT, "pageSize")
	mustFail(t, e.do(t, "GET", "/apis/v1/namespaces/"+ns+"/clusters?limit=1&continue=garbage", nil), 400, code.Code_INVALID_ARGUMENT, "")
}

func (e *testEnv) testJobs(t *testing.T) {
	ns := e.Namespace(t)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", apiservertest.Template(ns, "small")), nil)
	base := "/apis/v1/namespaces/" + ns + "/jobs"
	j := apiservertest.Job(ns, "train")
	j.Metadata = map[string]string{"owner": "bob"}
	j.RuntimeEnv = "pip:\n  - requests\n"
	j.ShutdownAfterJobFinishes = true
	j.TTLSecondsAfterFinished = 60
	j.ActiveDeadlineSeconds = 3600
	j.EntrypointNumCpus = 1
	j.EntrypointResources = `{"custom": 1}`
	j.JobSubmitter = &apiserver.RayJobSubmitter{Image: "rayproject/ray:2.52.0", CPU: "500m"}
	var got apiserver.RayJob
	mustOK(t, e.do(t, "POST", base, j), &got)
	var rj rayv1.RayJob
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "train"}, &rj); err != nil {
		t.Fatal(err)
	}
	if rj.Spec.Entrypoint != j.Entrypoint || rj.Spec.RuntimeEnvYAML != j.RuntimeEnv || rj.Spec.RayClusterSpec == nil ||
		*rj.Spec.ActiveDeadlineSeconds != 3600 || rj.Spec.SubmitterPodTemplate.Spec.Containers[0].Image != "rayproject/ray:2.52.0" {
		t.Errorf("stored job: %+v", rj.Spec)
	}
	if got.JobSubmitter == nil || got.JobSubmitter.Memory != "1Gi" || got.JobSubmitter.CPU != "500m" {
		t.Errorf("submitter: %+v", got.JobSubmitter)
	}
	// Status, and the Ray job id the controller generated, come from the RayJob's status, as KubeRay reports them.
	if got.JobID != "" {
		t.Errorf("jobId before the controller set one: %q", got.JobID)
	}
	rj.Status.JobStatus, rj.Status.JobDeploymentStatus, rj.Status.RayClusterName = rayv1.JobStatusRunning, rayv1.JobDeploymentStatusRunning, "train-abcde"
	rj.Status.JobId, rj.Status.Message = "train-x7k2p", "Job is currently running"
	start := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	rj.Status.StartTime = &start
	if err := e.k.Status().Update(context.Background(), &rj); err != nil {
		t.Fatal(err)
	}
	mustOK(t, e.do(t, "GET", base+"/train", nil), &got)
	if got.JobStatus != "RUNNING" || got.JobDeploymentStatus != "Running" || got.RayClusterName != "train-abcde" ||
		got.JobID != "train-x7k2p" || got.Message != "Job is currently running" || got.StartTime == nil || !got.StartTime.Equal(start.Time) {
		t.Errorf("status: %+v", got)
	}
	var jl apiserver.ListRayJobsResponse
	mustOK(t, e.do(t, "GET", base, nil), &jl)
	if len(jl.Jobs) != 1 || jl.Jobs[0].JobID != "train-x7k2p" {
		t.Errorf("list does not report jobId from status: %+v", jl.Jobs)
	}
	// A job on an existing cluster needs no cluster spec or compute template.
	sel := apiserver.RayJob{Name: "onexisting", Namespace: ns, User: "bob", Entrypoint: "echo hi", ClusterSelector: map[string]string{"ray.io/cluster": "demo"}}
	mustOK(t, e.do(t, "POST", base, sel), &got)
	var list apiserver.ListRayJobsResponse
	mustOK(t, e.do(t, "GET", base, nil), &list)
	if len(list.Jobs) != 2 {
		t.Errorf("list: %d", len(list.Jobs))
	}
	mustOK(t, e.do(t, "GET", "/apis/v1/jobs?limit=1", nil), &list)
	if len(list.Jobs) != 1 || list.Continue == "" {
		t.Errorf("list all page: %d %q", len(list.Jobs), list.Continue)
	}
	mustFail(t, e.do(t, "POST", base, j), 409, code.Code_ALREADY_EXISTS, "")
	mustOK(t, e.do(t, "DELETE", base+"/train", nil), nil)
	mustFail(t, e.do(t, "GET", base+"/train", nil), 404, code.Code_NOT_FOUND, "")

	for _, tc := range []struct {
		field  string
		mutate func(*apiserver.RayJob)
	}{
		{"name", func(j *apiserver.RayJob) { j.Name = "" }},
		{"namespace", func(j *apiserver.RayJob) { j.Namespace = "x" }},
		{"user", func(j *apiserver.RayJob) { j.User = "" }},
		{"entrypoint", func(j *apiserver.RayJob) { j.Entrypoint = " " }},
		{"version", func(j *apiserver.RayJob) { j.Version = "a:b" }},
		{"clusterSpec", func(j *apiserver.RayJob) { j.ClusterSpec = nil }},
		{"clusterSpec", func(j *apiserver.RayJob) { j.ClusterSelector = map[string]string{"a": "b"} }},
		{"clusterSelector.a b", func(j *apiserver.RayJob) { j.ClusterSpec, j.ClusterSelector = nil, map[string]string{"a b": "c"} }},
		{"clusterSpec.headGroupSpec.imagePullPolicy", func(j *apiserver.RayJob) { j.ClusterSpec.HeadGroupSpec.ImagePullPolicy = "Nope" }},
		{"runtimeEnv", func(j *apiserver.RayJob) { j.RuntimeEnv = "- a list" }},
		{"entrypointResources", func(j *apiserver.RayJob) { j.EntrypointResources = "gpu=1" }},
		{"entrypointNumCpus", func(j *apiserver.RayJob) { j.EntrypointNumCpus = -1 }},
		{"entrypointNumGpus", func(j *apiserver.RayJob) { j.EntrypointNumGpus = -1 }},
		{"activeDeadlineSeconds", func(j *apiserver.RayJob) { j.ActiveDeadlineSeconds = -1 }},
		{"ttlSecondsAfterFinished", func(j *apiserver.RayJob) { j.TTLSecondsAfterFinished = -1 }},
		{"jobSubmitter.image", func(j *apiserver.RayJob) { j.JobSubmitter = &apiserver.RayJobSubmitter{} }},
		{"jobSubmitter.cpu", func(j *apiserver.RayJob) { j.JobSubmitter = &apiserver.RayJobSubmitter{Image: "i", CPU: "one"} }},
		{"jobSubmitter.memory", func(j *apiserver.RayJob) { j.JobSubmitter = &apiserver.RayJobSubmitter{Image: "i", Memory: "1 GB"} }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			j := apiservertest.Job(ns, "bad")
			tc.mutate(&j)
			mustFail(t, e.do(t, "POST", base, j), 400, code.Code_INVALID_ARGUMENT, tc.field)
		})
	}
	j = apiservertest.Job(ns, "missing")
	j.ClusterSpec.WorkerGroupSpec[0].ComputeTemplate = "nope"
	mustFail(t, e.do(t, "POST", base, j), 422, code.Code_FAILED_PRECONDITION, "clusterSpec.workerGroupSpec[0].computeTemplate")
}

func (e *testEnv) testServices(t *testing.T) {
	ns := e.Namespace(t)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", apiservertest.Template(ns, "small")), nil)
	base := "/apis/v1/namespaces/" + ns + "/services"
	s := apiservertest.Service(ns, "serve")
	s.ServiceUnhealthySecondThreshold = 90
	var got apiserver.RayService
	mustOK(t, e.do(t, "POST", base, s), &got)
	if got.ServeConfigV2 != s.ServeConfigV2 || got.ServiceUnhealthySecondThreshold != 90 || got.ClusterSpec == nil {
		t.Errorf("created: %+v", got)
	}
	var rs rayv1.RayService
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "serve"}, &rs); err != nil {
		t.Fatal(err)
	}
	rs.Status.ActiveServiceStatus = rayv1.RayServiceStatus{
		RayClusterName:   "serve-x1",
		RayClusterStatus: rayv1.RayClusterStatus{State: rayv1.Ready, Endpoints: map[string]string{"serve": "8000", "dashboard": "8265"}},
		Applications:     map[string]rayv1.AppStatus{"app": {Status: "RUNNING", Deployments: map[string]rayv1.ServeDeploymentStatus{"d": {Status: "HEALTHY"}}}},
	}
	if err := e.k.Status().Update(context.Background(), &rs); err != nil {
		t.Fatal(err)
	}
	// Events about the RayService are reported with its status, as KubeRay's server does.
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "serve.1", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "RayService", Name: "serve", Namespace: ns, APIVersion: "ray.io/v1"},
		Reason:         "Running", Message: "all applications are running", Type: corev1.EventTypeNormal, Count: 1,
	}
	if err := e.k.Create(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	mustOK(t, e.do(t, "GET", base+"/serve", nil), &got)
	if got.RayServiceStatus != nil && len(got.RayServiceStatus.RayServiceEvents) == 1 {
		got.RayServiceStatus.RayServiceEvents[0].CreatedAt, got.RayServiceStatus.RayServiceEvents[0].ID = nil, ""
	}
	want := &apiserver.RayServiceStatus{RayClusterName: "serve-x1", RayClusterState: "ready",
		ServiceEndpoint: map[string]string{"serve": "8000", "dashboard": "8265"},
		ServeApplicationStatus: []apiserver.ServeApplicationStatus{
			{Name: "app", Status: "RUNNING", ServeDeploymentStatus: []apiserver.ServeDeploymentStatus{{DeploymentName: "d", Status: "HEALTHY"}}}},
		RayServiceEvents: []apiserver.ClusterEvent{{Name: "serve.1", Reason: "Running", Message: "all applications are running", Type: "Normal", Count: 1}},
	}
	if d := cmp.Diff(want, got.RayServiceStatus); d != "" {
		t.Errorf("status (-want +got):\n%s", d)
	}
	// Update replaces the spec.
	s.ServeConfigV2 = "applications: []\n"
	s.ClusterSpec.WorkerGroupSpec[0].Replicas = 2
	mustOK(t, e.do(t, "PUT", base+"/serve", s), &got)
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "serve"}, &rs); err != nil {
		t.Fatal(err)
	}
	if rs.Spec.ServeConfigV2 != "applications: []\n" || *rs.Spec.RayClusterSpec.WorkerGroupSpecs[0].Replicas != 2 {
		t.Errorf("updated spec: %+v", rs.Spec)
	}
	mustFail(t, e.do(t, "PUT", base+"/other", apiservertest.Service(ns, "serve")), 400, code.Code_INVALID_ARGUMENT, "name")
	mustFail(t, e.do(t, "PUT", base+"/ghost", apiservertest.Service(ns, "ghost")), 404, code.Code_NOT_FOUND, "")

	var list apiserver.ListRayServicesResponse
	mustOK(t, e.do(t, "GET", base+"?pageSize=1", nil), &list)
	if len(list.Services) != 1 || list.TotalSize != 1 {
		t.Errorf("list: %+v", list)
	}
	mustOK(t, e.do(t, "GET", "/apis/v1/services", nil), &list)
	if len(list.Services) == 0 {
		t.Error("list all is empty")
	}
	mustFail(t, e.do(t, "POST", base, apiservertest.Service(ns, "serve")), 409, code.Code_ALREADY_EXISTS, "")
	mustOK(t, e.do(t, "DELETE", base+"/serve", nil), nil)
	mustFail(t, e.do(t, "GET", base+"/serve", nil), 404, code.Code_NOT_FOUND, "")

	for _, tc := range []struct {
		field  string
		mutate func(*apiserver.RayService)
	}{
		{"name", func(s *apiserver.RayService) { s.Name = "a.b" }},
		{"namespace", func(s *apiserver.RayService) { s.Namespace = "" }},
		{"user", func(s *apiserver.RayService) { s.User = "" }},
		{"version", func(s *apiserver.RayService) { s.Version = "x y" }},
		{"serveConfigV2", func(s *apiserver.RayService) { s.ServeConfigV2 = "" }},
		{"serveConfigV2", func(s *apiserver.RayService) { s.ServeConfigV2 = "[unclosed" }},
		{"serviceUnhealthySecondThreshold", func(s *apiserver.RayService) { s.ServiceUnhealthySecondThreshold = -5 }},
		{"deploymentUnhealthySecondThreshold", func(s *apiserver.RayService) { s.DeploymentUnhealthySecondThreshold = -5 }},
		{"clusterSpec", func(s *apiserver.RayService) { s.ClusterSpec = nil }},
		{"clusterSpec.workerGroupSpec[0].maxReplicas", func(s *apiserver.RayService) { s.ClusterSpec.WorkerGroupSpec[0].MaxReplicas = -1 }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			s := apiservertest.Service(ns, "bad")
			tc.mutate(&s)
			mustFail(t, e.do(t, "POST", base, s), 400, code.Code_INVALID_ARGUMENT, tc.field)
		})
	}
	s = apiservertest.Service(ns, "missing")
	s.ClusterSpec.HeadGroupSpec.ComputeTemplate = "nope"
	mustFail(t, e.do(t, "POST", base, s), 422, code.Code_FAILED_PRECONDITION, "clusterSpec.headGroupSpec.computeTemplate")
}

func (e *testEnv) testImagePullJobs(t *testing.T) {
	ns := e.Namespace(t)
	base := "/apis/v1/namespaces/" + ns + "/image_pull_jobs"
	j := apiserver.ImagePullJob{Name: "prepull", Namespace: ns, Image: "rayproject/ray:2.52.0", ImagePullPolicy: "Always",
		PullSecrets: []string{"regcred"}, NodeSelector: map[string]string{"pool": "gpu"},
		Parallelism: ptr.To[int32](2), TimeoutSeconds: 300, BackoffLimit: ptr.To[int32](1), CompletionPolicy: "Always", ActiveDeadlineSeconds: 600, TTLSecondsAfterFinished: 60,
		Tolerations: []apiserver.PodToleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}}}
	var got apiserver.ImagePullJob
	mustOK(t, e.do(t, "POST", base, j), &got)
	got.CreatedAt, got.Status = nil, nil
	if d := cmp.Diff(j, got); d != "" {
		t.Errorf("created (-want +got):\n%s", d)
	}
	var o mantav1alpha1.ImagePullJob
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "prepull"}, &o); err != nil {
		t.Fatal(err)
	}
	if o.Spec.Image != j.Image || o.Spec.Selector.MatchLabels["pool"] != "gpu" || *o.Spec.PullPolicy.TimeoutSeconds != 300 {
		t.Errorf("stored: %+v", o.Spec)
	}
	o.Status.Desired, o.Status.Succeeded = 3, 1
	o.Status.FailedNodes = []mantav1alpha1.FailedNode{{Name: "node-2", Reason: "ErrImagePull"}}
	if err := e.k.Status().Update(context.Background(), &o); err != nil {
		t.Fatal(err)
	}
	mustOK(t, e.do(t, "GET", base+"/prepull", nil), &got)
	if got.Status == nil || got.Status.Desired != 3 || got.Status.Succeeded != 1 || len(got.Status.FailedNodes) != 1 {
		t.Errorf("status: %+v", got.Status)
	}
	var list apiserver.ListImagePullJobsResponse
	mustOK(t, e.do(t, "GET", base, nil), &list)
	mustOK(t, e.do(t, "GET", "/apis/v1/image_pull_jobs", nil), &list)
	if len(list.ImagePullJobs) == 0 {
		t.Error("empty list")
	}
	mustFail(t, e.do(t, "POST", base, j), 409, code.Code_ALREADY_EXISTS, "")
	mustOK(t, e.do(t, "DELETE", base+"/prepull", nil), nil)

	// parallelism 0 pauses a job and backoffLimit 0 means no retry: both are kept, not replaced by the defaults.
	paused := apiserver.ImagePullJob{Name: "paused", Namespace: ns, Image: "busybox:1.36", Parallelism: ptr.To[int32](0), BackoffLimit: ptr.To[int32](0)}
	mustOK(t, e.do(t, "POST", base, paused), &got)
	if got.Parallelism == nil || *got.Parallelism != 0 || got.BackoffLimit == nil || *got.BackoffLimit != 0 {
		t.Errorf("paused job answered parallelism %v backoffLimit %v", got.Parallelism, got.BackoffLimit)
	}
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "paused"}, &o); err != nil {
		t.Fatal(err)
	}
	if *o.Spec.Parallelism != 0 || *o.Spec.PullPolicy.BackoffLimit != 0 {
		t.Errorf("paused job stored parallelism %d backoffLimit %d", *o.Spec.Parallelism, *o.Spec.PullPolicy.BackoffLimit)
	}
	// Omitted, they get the defaults.
	mustOK(t, e.do(t, "POST", base, apiserver.ImagePullJob{Name: "defaults", Namespace: ns, Image: "busybox:1.36"}), &got)
	if got.Parallelism == nil || *got.Parallelism != 1 || got.BackoffLimit == nil || *got.BackoffLimit != 3 || got.TimeoutSeconds != 600 {
		t.Errorf("defaults: parallelism %v backoffLimit %v timeoutSeconds %d", got.Parallelism, got.BackoffLimit, got.TimeoutSeconds)
	}
	mustFail(t, e.do(t, "GET", base+"/prepull", nil), 404, code.Code_NOT_FOUND, "")
	for _, tc := range []struct {
		field  string
		mutate func(*apiserver.ImagePullJob)
	}{
		{"name", func(j *apiserver.ImagePullJob) { j.Name = "" }},
		{"namespace", func(j *apiserver.ImagePullJob) { j.Namespace = "other" }},
		{"image", func(j *apiserver.ImagePullJob) { j.Image = "" }},
		{"image", func(j *apiserver.ImagePullJob) { j.Image = "has space" }},
		{"imagePullPolicy", func(j *apiserver.ImagePullJob) { j.ImagePullPolicy = "Never" }},
		{"pullSecrets[0]", func(j *apiserver.ImagePullJob) { j.PullSecrets = []string{""} }},
		{"nodeNames[0]", func(j *apiserver.ImagePullJob) { j.NodeNames = []string{"Bad Node"} }},
		{"nodeSelector.a b", func(j *apiserver.ImagePullJob) { j.NodeSelector = map[string]string{"a b": "c"} }},
		{"nodeSelector", func(j *apiserver.ImagePullJob) {
			j.NodeSelector, j.NodeNames = map[string]string{"a": "b"}, []string{"n"}
		}},
		{"parallelism", func(j *apiserver.ImagePullJob) { j.Parallelism = ptr.To[int32](-1) }},
		{"timeoutSeconds", func(j *apiserver.ImagePullJob) { j.TimeoutSeconds = -1 }},
		{"backoffLimit", func(j *apiserver.ImagePullJob) { j.BackoffLimit = ptr.To[int32](-1) }},
		{"backoffLimit", func(j *apiserver.ImagePullJob) { j.BackoffLimit = ptr.To[int32](101) }},
		// The CRD's image grammar: an upper-case repository is not an image reference.
		{"image", func(j *apiserver.ImagePullJob) { j.Image = "Upper/Case:v1" }},
		// The deadline must leave time for one attempt (default timeoutSeconds 600).
		{"activeDeadlineSeconds", func(j *apiserver.ImagePullJob) { j.ActiveDeadlineSeconds = 60 }},
		{"activeDeadlineSeconds", func(j *apiserver.ImagePullJob) { j.TimeoutSeconds, j.ActiveDeadlineSeconds = 100, 99 }},
		{"pullSecrets", func(j *apiserver.ImagePullJob) {
			for i := range 33 {
				j.PullSecrets = append(j.PullSecrets, fmt.Sprintf("s%d", i))
			}
		}},
		{"completionPolicy", func(j *apiserver.ImagePullJob) { j.CompletionPolicy = "Sometimes" }},
		{"completionPolicy", func(j *apiserver.ImagePullJob) { j.CompletionPolicy, j.TTLSecondsAfterFinished = "Never", 5 }},
		{"activeDeadlineSeconds", func(j *apiserver.ImagePullJob) { j.ActiveDeadlineSeconds = -1 }},
		{"ttlSecondsAfterFinished", func(j *apiserver.ImagePullJob) { j.TTLSecondsAfterFinished = -1 }},
		{"tolerations[0].effect", func(j *apiserver.ImagePullJob) { j.Tolerations = []apiserver.PodToleration{{Operator: "Exists"}} }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			j := apiserver.ImagePullJob{Name: "bad", Namespace: ns, Image: "busybox"}
			tc.mutate(&j)
			mustFail(t, e.do(t, "POST", base, j), 400, code.Code_INVALID_ARGUMENT, tc.field)
		})
	}
}

func (e *testEnv) testJobSubmissions(t *testing.T) {
	ns := e.Namespace(t)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", apiservertest.Template(ns, "small")), nil)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/clusters", apiservertest.Cluster(ns, "live")), nil)
	base := "/apis/v1/namespaces/" + ns + "/jobsubmissions/live"
	sub := apiserver.RayJobSubmission{Entrypoint: "python job.py", SubmissionID: "sub-1", Metadata: map[string]string{"a": "b"},
		RuntimeEnv: "env_vars:\n  X: \"1\"\n", EntrypointNumCpus: 1, EntrypointResources: map[string]string{"custom": "0.5"}}
	var reply apiserver.SubmitRayJobReply
	mustOK(t, e.do(t, "POST", base, sub), &reply)
	if reply.SubmissionID != "sub-1" {
		t.Errorf("reply %+v", reply)
	}
	mustFail(t, e.do(t, "POST", base, sub), 409, code.Code_ALREADY_EXISTS, "")
	var info apiserver.JobSubmissionInfo
	r := e.do(t, "GET", base+"/sub-1", nil)
	mustOK(t, r, &info)
	if info.Status != "RUNNING" || info.Entrypoint != "python job.py" || info.StartTime != 1700000000000 || info.RuntimeEnv["env_vars"] != `{"X":"1"}` {
		t.Errorf("info %+v", info)
	}
	if !strings.Contains(string(r.body), `"startTime":"1700000000000"`) {
		t.Errorf("uint64 times are not strings as in proto3 JSON: %s", r.body)
	}
	var logs apiserver.GetJobLogReply
	mustOK(t, e.do(t, "GET", base+"/log/sub-1", nil), &logs)
	if logs.Log != "hello from python job.py\n" {
		t.Errorf("log %q", logs.Log)
	}
	var list apiserver.ListJobSubmissionInfo
	mustOK(t, e.do(t, "GET", base, nil), &list)
	if len(list.Submissions) != 1 {
		t.Errorf("list %+v", list)
	}
	mustFail(t, e.do(t, "DELETE", base+"/sub-1", nil), 400, code.Code_FAILED_PRECONDITION, "") // still running
	mustOK(t, e.do(t, "POST", base+"/sub-1", nil), nil)                                        // stop
	mustOK(t, e.do(t, "DELETE", base+"/sub-1", nil), nil)
	mustFail(t, e.do(t, "GET", base+"/sub-1", nil), 404, code.Code_NOT_FOUND, "")
	mustFail(t, e.do(t, "GET", base+"/log/sub-1", nil), 404, code.Code_NOT_FOUND, "")
	mustFail(t, e.do(t, "POST", base+"/sub-1", nil), 404, code.Code_NOT_FOUND, "")
	mustFail(t, e.do(t, "GET", "/apis/v1/namespaces/"+ns+"/jobsubmissions/ghost", nil), 404, code.Code_NOT_FOUND, "")
	// Without a submission ID Ray picks one.
	mustOK(t, e.do(t, "POST", base, apiserver.RayJobSubmission{Entrypoint: "echo"}), &reply)
	if !strings.HasPrefix(reply.SubmissionID, "raysubmit_") {
		t.Errorf("generated id %q", reply.SubmissionID)
	}
	// An unreachable dashboard is a 503.
	var rc rayv1.RayCluster
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "live"}, &rc); err != nil {
		t.Fatal(err)
	}
	rc.Status.Head.ServiceName = "unreachable"
	if err := e.k.Status().Update(context.Background(), &rc); err != nil {
		t.Fatal(err)
	}
	mustFail(t, e.do(t, "GET", base, nil), 503, code.Code_UNAVAILABLE, "")

	for _, tc := range []struct {
		field  string
		mutate func(*apiserver.RayJobSubmission)
	}{
		{"entrypoint", func(s *apiserver.RayJobSubmission) { s.Entrypoint = "" }},
		{"submissionId", func(s *apiserver.RayJobSubmission) { s.SubmissionID = "has space" }},
		{"runtimeEnv", func(s *apiserver.RayJobSubmission) { s.RuntimeEnv = "just a string" }},
		{"entrypointNumCpus", func(s *apiserver.RayJobSubmission) { s.EntrypointNumCpus = -1 }},
		{"entrypointNumGpus", func(s *apiserver.RayJobSubmission) { s.EntrypointNumGpus = -1 }},
		{"entrypointResources.custom", func(s *apiserver.RayJobSubmission) { s.EntrypointResources = map[string]string{"custom": "lots"} }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			s := apiserver.RayJobSubmission{Entrypoint: "echo"}
			tc.mutate(&s)
			mustFail(t, e.do(t, "POST", base, s), 400, code.Code_INVALID_ARGUMENT, tc.field)
		})
	}
	mustFail(t, e.do(t, "GET", base+"/bad%20id", nil), 400, code.Code_INVALID_ARGUMENT, "submissionid")
}

// testRequests covers what every endpoint shares: paths, methods, bodies, health, metrics, the document.
func (e *testEnv) testRequests(t *testing.T) {
	ns := e.Namespace(t)
	base := "/apis/v1/namespaces/" + ns + "/clusters"
	mustFail(t, e.do(t, "GET", "/apis/v1/nothing", nil), 404, code.Code_NOT_FOUND, "")
	r := e.do(t, "PATCH", base, nil)
	mustFail(t, r, 405, code.Code_UNIMPLEMENTED, "")
	mustFail(t, e.do(t, "DELETE", base+"/x", `{"name":"x"}`), 400, code.Code_INVALID_ARGUMENT, "body")
	mustFail(t, e.do(t, "POST", base, ""), 400, code.Code_INVALID_ARGUMENT, "body")
	mustFail(t, e.do(t, "POST", base, "[1,2]"), 400, code.Code_INVALID_ARGUMENT, "body")
	mustFail(t, e.do(t, "POST", base, "{"), 400, code.Code_INVALID_ARGUMENT, "body")
	mustFail(t, e.do(t, "POST", base, `{"name":"`+strings.Repeat("a", 1<<20)+`"}`), 413, code.Code_INVALID_ARGUMENT, "") // past the 1 MiB body limit
	mustFail(t, e.do(t, "GET", "/apis/v1/namespaces/Bad_NS/clusters", nil), 400, code.Code_INVALID_ARGUMENT, "namespace")
	mustFail(t, e.do(t, "GET", base+"/Bad_Name", nil), 400, code.Code_INVALID_ARGUMENT, "name")
	req, _ := http.NewRequest("POST", e.open.URL+base, strings.NewReader("name=x"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 415 {
		t.Errorf("form body: %d", res.StatusCode)
	}
	if r := e.do(t, "GET", "/healthz", nil); r.code != 200 || string(r.body) != "ok\n" {
		t.Errorf("healthz %d %q", r.code, r.body)
	}
	if r := e.do(t, "GET", "/metrics", nil); r.code != 200 || !strings.Contains(string(r.body), `manta_apiserver_requests_total{code="404",operation="GetCluster"}`) {
		t.Errorf("metrics %d: missing request counter", r.code)
	}
	if r := e.do(t, "GET", "/openapi.json", nil); r.code != 200 || !strings.Contains(string(r.body), `"openapi":"3.0.3"`) {
		t.Errorf("openapi %d", r.code)
	}
}
