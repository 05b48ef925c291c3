package clusterbuild

import (
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/version"
)

func res(limits, requests map[string]string) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{}
	for k, v := range limits {
		if r.Limits == nil {
			r.Limits = corev1.ResourceList{}
		}
		r.Limits[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	for k, v := range requests {
		if r.Requests == nil {
			r.Requests = corev1.ResourceList{}
		}
		r.Requests[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return r
}

func cluster() *rayv1.RayCluster {
	return &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "rc", Namespace: "ns", UID: "uid-1"},
		Spec: rayv1.RayClusterSpec{
			RayVersion: "2.52.0",
			HeadGroupSpec: rayv1.HeadGroupSpec{
				RayStartParams: map[string]string{},
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "ray-head", Image: "rayproject/ray:2.52.0",
					Resources: res(map[string]string{"cpu": "1", "memory": "2Gi"}, nil),
				}}}},
			},
			WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{
				GroupName: "small", Replicas: ptr.To[int32](2), MinReplicas: ptr.To[int32](0), MaxReplicas: ptr.To[int32](5),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "ray-worker", Image: "rayproject/ray:2.52.0",
					Resources: res(map[string]string{"cpu": "2", "memory": "4Gi"}, nil),
				}}}},
			}},
		},
	}
}

func TestRayStartCommand(t *testing.T) {
	tests := []struct {
		name string
		p    StartParams
		want string
	}{{
		name: "head defaults",
		p:    StartParams{Head: true},
		want: "ray start --head --block --dashboard-agent-listen-port=52365 --dashboard-host=0.0.0.0 --metrics-export-port=8080",
	}, {
		name: "head with resources and autoscaler",
		p:    StartParams{Head: true, NoMonitor: true, Resources: res(map[string]string{"cpu": "1500m", "memory": "1Gi"}, nil)},
		want: "ray start --head --block --dashboard-agent-listen-port=52365 --dashboard-host=0.0.0.0 --memory=1073741824 --metrics-export-port=8080 --no-monitor --num-cpus=2",
	}, {
		name: "worker with gpu and tpu",
		p: StartParams{HeadAddress: "rc-head-svc.ns.svc.cluster.local:6379",
			Resources: res(map[string]string{"cpu": "8", "nvidia.com/gpu": "2", "google.com/tpu": "4"}, nil)},
		want: `ray start --address=rc-head-svc.ns.svc.cluster.local:6379 --block --dashboard-agent-listen-port=52365 --metrics-export-port=8080 --num-cpus=8 --num-gpus=2 --resources='{"TPU":4}'`,
	}, {
		name: "cpu from requests, memory only from limits",
		p:    StartParams{HeadAddress: "h:6379", Resources: res(nil, map[string]string{"cpu": "3", "memory": "1Gi"})},
		want: "ray start --address=h:6379 --block --dashboard-agent-listen-port=52365 --metrics-export-port=8080 --num-cpus=3",
	}, {
		name: "user params win, false dropped except Ray-default-on flags",
		p: StartParams{Head: true, Params: map[string]string{"num-cpus": "0", "dashboard-host": "127.0.0.1", "disable-usage-stats": "false", "include-dashboard": "false", "block": "false"},
			Resources: res(map[string]string{"cpu": "4"}, nil)},
		want: "ray start --head --block --dashboard-agent-listen-port=52365 --dashboard-host=127.0.0.1 --include-dashboard=false --metrics-export-port=8080 --num-cpus=0",
	}, {
		name: "group resources and labels",
		p: StartParams{HeadAddress: "h:1", Resources: res(map[string]string{"cpu": "4"}, nil),
			Overrides: map[string]string{"cpu": "2", "nvidia.com/gpu": "1", "Custom": "3"}, Labels: map[string]string{"zone": "b", "accel": "a100"}},
		want: `ray start --address=h:1 --block --dashboard-agent-listen-port=52365 --labels=accel=a100,zone=b --metrics-export-port=8080 --num-cpus=2 --num-gpus=1 --resources='{"Custom":3}'`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, RayStartCommand(tc.p)); diff != "" {
				t.Errorf("RayStartCommand (-want +got):\n%s", diff)
			}
		})
	}
}

func TestContainerCommand(t *testing.T) {
	tests := []struct {
		name     string
		ctr      corev1.Container
		wantArgs []string
	}{
		{"no user command", corev1.Container{}, []string{"ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; ray start --head"}},
		{"user command runs first", corev1.Container{Command: []string{"echo"}, Args: []string{"hi"}},
			[]string{"echo hi && ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; ray start --head"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd, args := ContainerCommand(&tc.ctr, "ray start --head")
			if diff := cmp.Diff([]string{"/bin/bash", "-c", "--"}, cmd); diff != "" {
				t.Error(diff)
			}
			if diff := cmp.Diff(tc.wantArgs, args); diff != "" {
				t.Error(diff)
			}
		})
	}
}

func envMap(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			m[e.Name] = "field:" + e.ValueFrom.FieldRef.FieldPath
		case e.ValueFrom != nil:
			m[e.Name] = "ref"
		default:
			m[e.Name] = e.Value
		}
	}
	return m
}

func TestHeadPodEnvPortsProbes(t *testing.T) {
	c := cluster()
	pod := HeadPod(c, PodOptions{TemplateHash: "h1"})
	ray := pod.Spec.Containers[0]
	wantEnv := map[string]string{
		"KUBERAY_GEN_RAY_START_CMD":           "ray start --head --block --dashboard-agent-listen-port=52365 --dashboard-host=0.0.0.0 --memory=2147483648 --metrics-export-port=8080 --num-cpus=1",
		"RAY_CLUSTER_NAME":                    "field:metadata.labels['ray.io/cluster']",
		"RAY_CLUSTER_NAMESPACE":               "field:metadata.namespace",
		"RAY_CLOUD_INSTANCE_ID":               "field:metadata.name",
		"RAY_NODE_TYPE_NAME":                  "field:metadata.labels['ray.io/group']",
		"RAY_USAGE_STATS_KUBERAY_IN_USE":      "1",
		"RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE": "1",
		"RAY_PORT":                            "6379",
		"RAY_ADDRESS":                         "127.0.0.1:6379",
		"RAY_USAGE_STATS_EXTRA_TAGS":          "kuberay_version=manta;kuberay_crd=RayCluster",
	}
	if diff := cmp.Diff(wantEnv, envMap(ray)); diff != "" {
		t.Errorf("head env (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.ContainerPort{{Name: "metrics", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}, ray.Ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	wantLabels := map[string]string{
		"ray.io/is-ray-node": "yes", "ray.io/cluster": "rc", "ray.io/node-type": "head", "ray.io/group": "headgroup",
		"ray.io/identifier": "rc-head", "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator",
	}
	if diff := cmp.Diff(wantLabels, pod.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	wantAnnotations := map[string]string{"ray.io/ft-enabled": "false", "ray.io/pod-template-hash": "h1",
		"manta.dev/version": version.Version, "manta.dev/commit": version.GitCommit()}
	if diff := cmp.Diff(wantAnnotations, pod.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	wantLiveness := &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"bash", "-c",
			"wget --tries 1 -T 2 -q -O- http://localhost:52365/api/local_raylet_healthz | grep success && wget --tries 1 -T 10 -q -O- http://localhost:8265/api/gcs_healthz | grep success"}}},
		InitialDelaySeconds: 30, TimeoutSeconds: 5, PeriodSeconds: 5, SuccessThreshold: 1, FailureThreshold: 120,
	}
	if diff := cmp.Diff(wantLiveness, ray.LivenessProbe); diff != "" {
		t.Errorf("liveness (-want +got):\n%s", diff)
	}
	if pod.GenerateName != "rc-head-" || pod.OwnerReferences[0].Kind != "RayCluster" || !*pod.OwnerReferences[0].Controller {
		t.Errorf("generateName %q owner %+v", pod.GenerateName, pod.OwnerReferences)
	}
	wantShm := corev1.Volume{Name: "shared-mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("2Gi"))}}}
	if diff := cmp.Diff([]corev1.Volume{wantShm}, pod.Spec.Volumes); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
}

func TestProbesByRayVersion(t *testing.T) {
	c := cluster()
	c.Spec.RayVersion = "2.53.0"
	pod := WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})
	want := &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/api/healthz", Port: intstr.FromInt32(52365)}},
		InitialDelaySeconds: 10, TimeoutSeconds: 2, PeriodSeconds: 5, SuccessThreshold: 1, FailureThreshold: 10,
	}
	if diff := cmp.Diff(want, pod.Spec.Containers[0].ReadinessProbe); diff != "" {
		t.Errorf("readiness (-want +got):\n%s", diff)
	}
	// A RayService's worker also asks its Serve proxy, with KubeRay's exact command (the oracle compares it).
	svc := cluster()
	svc.Labels = map[string]string{rayv1.LabelOriginCRD: KindRayService}
	p := WorkerPod(svc, &svc.Spec.WorkerGroupSpecs[0], PodOptions{}).Spec.Containers[0].ReadinessProbe
	if want := "wget --tries 1 -T 2 -q -O- http://localhost:52365/api/local_raylet_healthz | grep success && " +
		"wget --tries 1 -T 10 -q -O- http://localhost:8000/-/healthz | grep success"; p.Exec == nil || p.Exec.Command[2] != want || p.FailureThreshold != 1 {
		t.Errorf("serve worker readiness %+v, want command %q", p, want)
	}
	// A probe the user set is kept.
	c.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 42}
	pod = WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})
	if got := pod.Spec.Containers[0].ReadinessProbe.PeriodSeconds; got != 42 {
		t.Errorf("user probe replaced: period %d", got)
	}
}

func TestWorkerPod(t *testing.T) {
	c := cluster()
	pod := WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{ClusterDomain: "example.org"})
	ray := pod.Spec.Containers[0]
	env := envMap(ray)
	for k, want := range map[string]string{
		"FQ_RAY_IP":                 "rc-head-svc.ns.svc.example.org",
		"RAY_IP":                    "rc-head-svc",
		"RAY_ADDRESS":               "rc-head-svc.ns.svc.example.org:6379",
		"KUBERAY_GEN_RAY_START_CMD": "ray start --address=rc-head-svc.ns.svc.example.org:6379 --block --dashboard-agent-listen-port=52365 --memory=4294967296 --metrics-export-port=8080 --num-cpus=2",
	} {
		if env[k] != want {
			t.Errorf("env %s = %q, want %q", k, env[k], want)
		}
	}
	if pod.GenerateName != "rc-small-worker-" || pod.Labels[rayv1.LabelGroup] != "small" || pod.Labels[rayv1.LabelNodeType] != "worker" {
		t.Errorf("meta: %q %v", pod.GenerateName, pod.Labels)
	}
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Name != WaitGCSInitContainerName ||
		pod.Spec.InitContainers[0].Image != ray.Image || !strings.Contains(pod.Spec.InitContainers[0].Args[0], "ray health-check --address rc-head-svc.ns.svc.example.org:6379") {
		t.Errorf("init containers: %+v", pod.Spec.InitContainers)
	}
}

// A template with everything users put in one comes out whole: the operator only adds.
func TestTemplatePreserved(t *testing.T) {
	c := cluster()
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "a", rayv1.LabelNodeType: "hijack"}, Annotations: map[string]string{"note": "x"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "setup", Image: "busybox"}},
			Containers: []corev1.Container{
				{Name: "ray-worker", Image: "img", ImagePullPolicy: corev1.PullAlways,
					Env:             []corev1.EnvVar{{Name: "RAY_PORT", Value: "user"}, {Name: "A", Value: "b"}},
					EnvFrom:         []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
					VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000)},
				},
				{Name: "sidecar", Image: "fluent-bit"},
			},
			Volumes:            []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			SecurityContext:    &corev1.PodSecurityContext{FSGroup: ptr.To[int64](100)},
			Affinity:           &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}},
			Tolerations:        []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}},
			NodeSelector:       map[string]string{"pool": "gpu"},
			PriorityClassName:  "high",
			SchedulerName:      "custom",
			ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "reg"}},
			ServiceAccountName: "sa",
		},
	}
	c.Spec.WorkerGroupSpecs[0].Template = tmpl
	pod := WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})
	got := pod.Spec.DeepCopy()
	// Undo what the operator adds; what is left must be the template exactly.
	got.InitContainers = got.InitContainers[:1]
	if diff := cmp.Diff([]corev1.EnvVar{{Name: "FQ_RAY_IP", Value: "rc-head-svc.ns.svc.cluster.local"}, {Name: "RAY_IP", Value: "rc-head-svc"}}, got.InitContainers[0].Env); diff != "" {
		t.Errorf("user init container env (-want +got):\n%s", diff)
	}
	got.InitContainers[0].Env = nil
	ray := &got.Containers[0]
	ray.Command, ray.Args, ray.LivenessProbe, ray.ReadinessProbe = nil, nil, nil, nil
	ray.Ports = nil
	ray.Env = ray.Env[:2]
	ray.VolumeMounts = ray.VolumeMounts[:1]
	got.Volumes = got.Volumes[:1]
	if diff := cmp.Diff(tmpl.Spec, *got); diff != "" {
		t.Errorf("template not preserved (-want +got):\n%s", diff)
	}
	if envMap(pod.Spec.Containers[0])["RAY_PORT"] != "user" {
		t.Error("user env overridden")
	}
	if pod.Labels["team"] != "a" || pod.Labels[rayv1.LabelNodeType] != "worker" || pod.Annotations["note"] != "x" {
		t.Errorf("labels %v annotations %v", pod.Labels, pod.Annotations)
	}
}

func TestUserCommandKept(t *testing.T) {
	c := cluster()
	c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Command = []string{"bash", "-c", "ray start --head --block"}
	pod := HeadPod(c, PodOptions{})
	if diff := cmp.Diff([]string{"bash", "-c", "ray start --head --block"}, pod.Spec.Containers[0].Command); diff != "" {
		t.Error(diff)
	}
	c = cluster()
	c.Annotations = map[string]string{AnnotationOverwriteContainerCmd: "true"}
	c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Command = []string{"my-entry"}
	pod = HeadPod(c, PodOptions{})
	if diff := cmp.Diff([]string{"my-entry"}, pod.Spec.Containers[0].Command); diff != "" {
		t.Error(diff)
	}
}

func TestAutoscaler(t *testing.T) {
	c := cluster()
	c.Spec.EnableInTreeAutoscaling = ptr.To(true)
	c.Spec.AutoscalerOptions = &rayv1.AutoscalerOptions{
		Version: ptr.To(rayv1.AutoscalerVersionV2),
		Env:     []corev1.EnvVar{{Name: "X", Value: "1"}},
	}
	pod := HeadPod(c, PodOptions{})
	if len(pod.Spec.Containers) != 2 || pod.Spec.Containers[1].Name != "autoscaler" {
		t.Fatalf("containers: %+v", pod.Spec.Containers)
	}
	as := pod.Spec.Containers[1]
	wantEnv := map[string]string{
		"RAY_CLUSTER_NAME": "field:metadata.labels['ray.io/cluster']", "RAY_CLUSTER_NAMESPACE": "field:metadata.namespace",
		"RAY_HEAD_POD_NAME": "field:metadata.name", "KUBERAY_CRD_VER": "v1", "X": "1",
		"KUBERAY_GEN_AUTOSCALER_START_CMD": "ray kuberay-autoscaler --cluster-name $(RAY_CLUSTER_NAME) --cluster-namespace $(RAY_CLUSTER_NAMESPACE)",
	}
	if diff := cmp.Diff(wantEnv, envMap(as)); diff != "" {
		t.Errorf("autoscaler env (-want +got):\n%s", diff)
	}
	if as.Image != "rayproject/ray:2.52.0" || as.Resources.Limits.Cpu().String() != "500m" {
		t.Errorf("autoscaler image %q resources %v", as.Image, as.Resources)
	}
	if pod.Spec.ServiceAccountName != "rc" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("sa %q restart %q", pod.Spec.ServiceAccountName, pod.Spec.RestartPolicy)
	}
	ray := pod.Spec.Containers[0]
	if envMap(ray)["RAY_enable_autoscaler_v2"] != "true" || !strings.Contains(envMap(ray)["KUBERAY_GEN_RAY_START_CMD"], "--no-monitor") {
		t.Errorf("ray env %v", envMap(ray))
	}
	if !hasMount(ray, RayLogsMountPath) || !hasMount(as, RayLogsMountPath) {
		t.Error("ray-logs not shared")
	}
	role := AutoscalerRole(c)
	if role.Name != "rc-autoscaler" || len(role.Rules) != 3 {
		t.Errorf("role %+v", role)
	}
	rb := AutoscalerRoleBinding(c)
	if rb.Name != "rc-autoscaler" || rb.Subjects[0].Name != "rc" || rb.RoleRef.Name != "rc-autoscaler" {
		t.Errorf("rolebinding %+v", rb)
	}
	w := WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})
	if w.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("worker restartPolicy %q", w.Spec.RestartPolicy)
	}
}

func hasMount(c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return true
		}
	}
	return false
}

func TestHeadService(t *testing.T) {
	c := cluster()
	svc := HeadService(c)
	names := []string{}
	for _, p := range svc.Spec.Ports {
		names = append(names, p.Name)
	}
	if diff := cmp.Diff([]string{"client", "dashboard", "gcs-server", "metrics", "serve"}, names); diff != "" {
		t.Errorf("default ports (-want +got):\n%s", diff)
	}
	if svc.Name != "rc-head-svc" || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("svc %+v", svc)
	}
	c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "gcs", ContainerPort: 6380}, {ContainerPort: 9999}}
	c.Spec.HeadGroupSpec.ServiceType = corev1.ServiceTypeNodePort
	c.Spec.HeadServiceAnnotations = map[string]string{"a": "b"}
	svc = HeadService(c)
	want := []corev1.ServicePort{
		{Name: "9999-port", Port: 9999, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("tcp")},
		{Name: "gcs", Port: 6380, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("tcp")},
		{Name: "metrics", Port: 8080, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("tcp")},
	}
	if diff := cmp.Diff(want, svc.Spec.Ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.ClusterIP != "" || svc.Annotations["a"] != "b" {
		t.Errorf("svc %+v", svc)
	}
	c.Spec.HeadGroupSpec.HeadService = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "custom"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	svc = HeadService(c)
	if svc.Name != "custom" || svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.Selector[rayv1.LabelNodeType] != "head" {
		t.Errorf("custom svc %+v", svc)
	}
}

func TestServeService(t *testing.T) {
	c := cluster()
	c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "serve", ContainerPort: 8001}, {Name: "serve-grpc", ContainerPort: 9000}, {Name: "dashboard", ContainerPort: 8265}}
	svc := ServeService(c)
	if svc.Name != "rc-serve-svc" || len(svc.Spec.Ports) != 2 || svc.Spec.Selector[rayv1.LabelCluster] != "rc" {
		t.Errorf("serve svc %+v", svc)
	}
}

func TestNames(t *testing.T) {
	long := strings.Repeat("a", 53)
	c := cluster()
	c.Name = long
	tests := []struct {
		name, got string
		max       int
	}{
		{"head svc", HeadServiceName(c), 63},
		{"serve svc", ServeServiceName(c), 63},
		{"head generateName", HeadPodGenerateName(c), 58},
		{"worker generateName", WorkerPodGenerateName(c, strings.Repeat("G_", 30)), 58},
	}
	for _, tc := range tests {
		if len(tc.got) > tc.max {
			t.Errorf("%s %q is %d chars, want <= %d", tc.name, tc.got, len(tc.got), tc.max)
		}
		if strings.ToLower(tc.got) != tc.got || strings.Contains(tc.got, "_") {
			t.Errorf("%s %q is not a DNS name", tc.name, tc.got)
		}
	}
	if a, b := WorkerPodGenerateName(c, strings.Repeat("x", 40)+"1"), WorkerPodGenerateName(c, strings.Repeat("x", 40)+"2"); a == b {
		t.Errorf("long names collide: %q", a)
	}
}

func TestTemplateHashes(t *testing.T) {
	base := Hashes(&cluster().Spec)
	if !reflect.DeepEqual(base, Hashes(&cluster().Spec)) {
		t.Fatal("hashes not stable")
	}
	if len(base.Workers) != len(cluster().Spec.WorkerGroupSpecs) || base.Head == "" {
		t.Fatalf("want a head hash and one per worker group, got %+v", base)
	}
	// Changes that must recreate nothing: no group's hash moves.
	same := map[string]func(*rayv1.RayCluster){
		"replicas": func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](9) },
		"min/max": func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs[0].MinReplicas, c.Spec.WorkerGroupSpecs[0].MaxReplicas = ptr.To[int32](1), ptr.To[int32](7)
		},
		"workersToDelete": func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].ScaleStrategy.WorkersToDelete = []string{"p"} },
		"tolerations": func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs[0].Template.Spec.Tolerations = []corev1.Toleration{{Key: "k"}}
			c.Spec.HeadGroupSpec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "k"}}
		},
		"schedulingGates": func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs[0].Template.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue"}}
		},
		"upgradeStrategy": func(c *rayv1.RayCluster) {
			c.Spec.UpgradeStrategy = &rayv1.RayClusterUpgradeStrategy{Type: ptr.To(rayv1.RayClusterRecreate)}
		},
		"suspend":                  func(c *rayv1.RayCluster) { c.Spec.Suspend = ptr.To(true) },
		"head service annotations": func(c *rayv1.RayCluster) { c.Spec.HeadServiceAnnotations = map[string]string{"a": "b"} },
		"head service type":        func(c *rayv1.RayCluster) { c.Spec.HeadGroupSpec.ServiceType = corev1.ServiceTypeNodePort },
	}
	for name, mutate := range same {
		c := cluster()
		mutate(c)
		if got := Hashes(&c.Spec); !reflect.DeepEqual(got, base) {
			t.Errorf("%s changed the hashes: %+v, was %+v", name, got, base)
		}
	}

	// Adding a group gives it a hash and leaves the others alone.
	c := cluster()
	extra := *c.Spec.WorkerGroupSpecs[0].DeepCopy()
	extra.GroupName = "added"
	c.Spec.WorkerGroupSpecs = append(c.Spec.WorkerGroupSpecs, extra)
	got := Hashes(&c.Spec)
	if got.Head != base.Head || got.Workers["added"] == "" {
		t.Errorf("adding a group: head hash moved or no hash for the new group: %+v", got)
	}
	for g, h := range base.Workers {
		if got.Workers[g] != h {
			t.Errorf("adding a group moved the hash of group %s", g)
		}
	}

	// Changes that must be seen, on the group they concern.
	group := cluster().Spec.WorkerGroupSpecs[0].GroupName
	differ := map[string]struct {
		mutate      func(*rayv1.RayCluster)
		head, group bool
	}{
		"head image":   {func(c *rayv1.RayCluster) { c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Image = "new" }, true, false},
		"head params":  {func(c *rayv1.RayCluster) { c.Spec.HeadGroupSpec.RayStartParams["num-cpus"] = "0" }, true, false},
		"autoscaling":  {func(c *rayv1.RayCluster) { c.Spec.EnableInTreeAutoscaling = ptr.To(true) }, true, false},
		"worker image": {func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Image = "new" }, false, true},
		"worker env": {func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Env = append(c.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Env, corev1.EnvVar{Name: "X", Value: "1"})
		}, false, true},
		"worker params": {func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs[0].RayStartParams = map[string]string{"num-gpus": "1"}
		}, false, true},
		"worker template label": {func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs[0].Template.Labels = map[string]string{"team": "b"}
		}, false, true},
	}
	for name, d := range differ {
		c := cluster()
		d.mutate(c)
		got := Hashes(&c.Spec)
		if (got.Head != base.Head) != d.head {
			t.Errorf("%s: head hash changed = %v, want %v", name, got.Head != base.Head, d.head)
		}
		if (got.Workers[group] != base.Workers[group]) != d.group {
			t.Errorf("%s: group hash changed = %v, want %v", name, got.Workers[group] != base.Workers[group], d.group)
		}
	}

	// For picks the pod's own group; a worker of a removed group has none.
	if h, ok := base.For(map[string]string{rayv1.LabelNodeType: rayv1.NodeTypeHead}); !ok || h != base.Head {
		t.Errorf("For(head) = %q, %v", h, ok)
	}
	if h, ok := base.For(map[string]string{rayv1.LabelNodeType: rayv1.NodeTypeWorker, rayv1.LabelGroup: group}); !ok || h != base.Workers[group] {
		t.Errorf("For(worker) = %q, %v", h, ok)
	}
	if _, ok := base.For(map[string]string{rayv1.LabelNodeType: rayv1.NodeTypeWorker, rayv1.LabelGroup: "gone"}); ok {
		t.Error("For(worker of a removed group) reported a hash")
	}
}

func TestMergePodTemplate(t *testing.T) {
	def := &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"org": "x", "team": "default"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "default", Env: []corev1.EnvVar{{Name: "HTTP_PROXY", Value: "p"}, {Name: "A", Value: "default"}},
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)}},
				{Name: "primary", Image: "default-ray", VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}}},
				{Name: "log-shipper", Image: "fluent"},
			},
			Volumes:           []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Tolerations:       []corev1.Toleration{{Key: "dedicated", Value: "ray"}},
			PriorityClassName: "default-prio",
			NodeSelector:      map[string]string{"pool": "default", "arch": "amd64"},
		},
	}
	user := &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "a"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "ray", Image: "user-ray", Env: []corev1.EnvVar{{Name: "A", Value: "user"}}},
				{Name: "side", Image: "s"},
			},
			Tolerations:  []corev1.Toleration{{Key: "gpu"}},
			NodeSelector: map[string]string{"pool": "gpu"},
		},
	}
	got, err := MergePodTemplate(def, user)
	if err != nil {
		t.Fatal(err)
	}
	noEsc := &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)}
	want := &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"org": "x", "team": "a"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "ray", Image: "user-ray", Env: []corev1.EnvVar{{Name: "HTTP_PROXY", Value: "p"}, {Name: "A", Value: "user"}},
					SecurityContext: noEsc, VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}}},
				{Name: "side", Image: "s", Env: []corev1.EnvVar{{Name: "HTTP_PROXY", Value: "p"}, {Name: "A", Value: "default"}}, SecurityContext: noEsc},
				{Name: "log-shipper", Image: "fluent"},
			},
			Volumes:           []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Tolerations:       []corev1.Toleration{{Key: "gpu"}}, // a list without a merge key: the user's replaces the default's
			PriorityClassName: "default-prio",
			NodeSelector:      map[string]string{"pool": "gpu", "arch": "amd64"},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MergePodTemplate (-want +got):\n%s", diff)
	}
	// Through the pod builder: the merged template is the base of the head pod.
	c := cluster()
	head := HeadPod(c, PodOptions{DefaultTemplate: def})
	if head.Spec.PriorityClassName != "default-prio" || head.Spec.Containers[0].Image != "rayproject/ray:2.52.0" || head.Labels["org"] != "x" {
		t.Errorf("head pod did not get the default template: %+v", head.Spec)
	}
}

func TestValidateDefaultPodTemplate(t *testing.T) {
	bad := &corev1.PodTemplate{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}, {Name: "a"}}}}}
	if err := ValidateDefaultPodTemplate(bad); err == nil {
		t.Error("duplicate containers accepted")
	}
	ok := &corev1.PodTemplate{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "default"}}}}}
	if err := ValidateDefaultPodTemplate(ok); err != nil {
		t.Error(err)
	}
}

func TestUnsupportedFields(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*rayv1.RayCluster)
		want   []string
	}{
		{"plain", func(*rayv1.RayCluster) {}, nil},
		{"gcs ft + auth + tls: both built", func(c *rayv1.RayCluster) {
			c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{RedisAddress: "r:6379"}
			c.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, EnableK8sTokenAuth: ptr.To(true), SecretName: ptr.To("s")}
			c.Spec.TLSOptions = &rayv1.TLSOptions{Enabled: ptr.To(true)}
		}, nil},
		{"embedded rocksdb gcs ft and history collector: both built", func(c *rayv1.RayCluster) {
			c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{Backend: rayv1.GcsFaultToleranceBackendRocksDB}
			c.Spec.HistoryServerOptions = &rayv1.HistoryServerOptions{CollectorOptions: &rayv1.CollectorOptions{Image: "collector"}}
		}, nil},
		{"auth disabled and tls off are fine", func(c *rayv1.RayCluster) {
			c.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeDisabled}
			c.Spec.TLSOptions = &rayv1.TLSOptions{Enabled: ptr.To(false)}
		}, nil},
		{"ingress and network policy built, legacy ft, scheduler labels (IgnoredSchedulerFields)", func(c *rayv1.RayCluster) {
			c.Spec.HeadGroupSpec.EnableIngress = ptr.To(true)
			c.Spec.NetworkPolicy = &rayv1.NetworkPolicyConfig{}
			c.Annotations = map[string]string{AnnotationFTEnabled: "true"}
			c.Labels = map[string]string{rayv1.LabelSchedulerName: "volcano", LabelVolcanoQueue: "q"}
		}, nil},
		{"autoscaler options without autoscaling", func(c *rayv1.RayCluster) {
			c.Spec.AutoscalerOptions = &rayv1.AutoscalerOptions{IdleTimeoutSeconds: ptr.To[int32](30)}
		}, []string{"spec.autoscalerOptions (enableInTreeAutoscaling is not true)"}},
		{"autoscaler options with autoscaling are used", func(c *rayv1.RayCluster) {
			c.Spec.EnableInTreeAutoscaling = ptr.To(true)
			c.Spec.AutoscalerOptions = &rayv1.AutoscalerOptions{IdleTimeoutSeconds: ptr.To[int32](30)}
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster()
			tc.mutate(c)
			if diff := cmp.Diff(tc.want, UnsupportedFields(c)); diff != "" {
				t.Errorf("UnsupportedFields (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWorkerPodForReplica(t *testing.T) {
	c := cluster()
	g := &c.Spec.WorkerGroupSpecs[0]
	single := WorkerPodForReplica(c, g, PodOptions{}, Replica{Index: 3})
	if diff := cmp.Diff("3", single.Labels[rayv1.LabelReplicaIndex]); diff != "" || single.Labels[rayv1.LabelReplicaName] != "" {
		t.Errorf("single-host labels %v", single.Labels)
	}
	g.NumOfHosts = 4
	multi := WorkerPodForReplica(c, g, PodOptions{}, Replica{Index: 1, Name: ReplicaName("Small_Group", "abcde"), HostIndex: 2})
	want := map[string]string{rayv1.LabelReplicaIndex: "1", rayv1.LabelReplicaName: "small-group-abcde", rayv1.LabelHostIndex: "2"}
	for k, v := range want {
		if multi.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, multi.Labels[k], v)
		}
	}
	// RayMultiHostIndexing off: the same pod, without any of the three labels.
	off := WorkerPodForReplica(c, g, PodOptions{NoReplicaLabels: true}, Replica{Index: 1, Name: ReplicaName("Small_Group", "abcde"), HostIndex: 2})
	for k := range want {
		if v, ok := off.Labels[k]; ok {
			t.Errorf("indexing off: label %s = %q", k, v)
		}
	}
	delete(multi.Labels, rayv1.LabelReplicaIndex)
	delete(multi.Labels, rayv1.LabelReplicaName)
	delete(multi.Labels, rayv1.LabelHostIndex)
	if diff := cmp.Diff(multi, off); diff != "" {
		t.Errorf("indexing off changed more than the replica labels (-on +off):\n%s", diff)
	}
	if n := ReplicaName(strings.Repeat("g", 80), "abcde"); len(n) > 63 {
		t.Errorf("replica name %q too long", n)
	}
}

// TestReplicaPodIsWorkerPodForReplica: the pods made from one base are those WorkerPodForReplica builds one by one,
// and each has metadata of its own.
func TestReplicaPodIsWorkerPodForReplica(t *testing.T) {
	for _, hosts := range []int32{1, 4} {
		for _, o := range []PodOptions{{TemplateHash: "h"}, {NoReplicaLabels: true}} {
			c := cluster()
			g := &c.Spec.WorkerGroupSpecs[0]
			g.NumOfHosts = hosts
			base := WorkerPod(c, g, o)
			reps := []Replica{{Index: 0, Name: "g-aaaaa"}, {Index: 1, Name: "g-bbbbb", HostIndex: 1}}
			var pods []*corev1.Pod
			for _, r := range reps {
				pods = append(pods, ReplicaPod(base, g, o, r))
			}
			for i, r := range reps {
				if diff := cmp.Diff(WorkerPodForReplica(c, g, o, r), pods[i]); diff != "" {
					t.Errorf("hosts %d, options %+v, replica %d (-WorkerPodForReplica +ReplicaPod):\n%s", hosts, o, i, diff)
				}
			}
			pods[0].Labels["x"], pods[0].Annotations["x"] = "y", "y"
			if _, ok := pods[1].Labels["x"]; ok {
				t.Error("replica pods share their labels")
			}
			if _, ok := base.Annotations["x"]; ok {
				t.Error("a replica pod shares its annotations with the base")
			}
		}
	}
	if ReplicaPod(nil, &rayv1.WorkerGroupSpec{}, PodOptions{}, Replica{}) != nil {
		t.Error("ReplicaPod of no base pod is not nil")
	}
}
