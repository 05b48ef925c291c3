package clusterbuild

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The group `resources` map holds Kubernetes quantities; Ray takes whole CPUs and GPUs and memory in bytes, so a
// map written as for a container must still start Ray (issue 11: `--memory=8Gi` made Ray refuse to start).
func TestResourceQuantitiesForRayStart(t *testing.T) {
	tests := []struct {
		name      string
		params    map[string]string
		res       corev1.ResourceRequirements
		overrides map[string]string
		want      []string // flags that must appear
		absent    []string // flags that must not
	}{{
		name:      "quantities converted",
		overrides: map[string]string{"cpu": "500m", "memory": "8Gi", "nvidia.com/gpu": "1", "custom": "1500m"},
		want:      []string{"--num-cpus=1 ", "--memory=8589934592 ", "--num-gpus=1 ", `--resources='{"custom":1.5}'`},
	}, {
		name:      "map wins over container limits",
		res:       res(map[string]string{"cpu": "4", "memory": "1Gi"}, nil),
		overrides: map[string]string{"CPU": "2"},
		want:      []string{"--num-cpus=2 ", "--memory=1073741824 "},
	}, {
		name: "memory request alone is not Ray memory",
		res:  res(nil, map[string]string{"cpu": "1500m", "memory": "1Gi"}),
		want: []string{"--num-cpus=2 "}, absent: []string{"--memory"},
	}, {
		name:   "TPU limit joins rayStartParams resources",
		params: map[string]string{"resources": `'{"custom":2}'`},
		res:    res(map[string]string{"google.com/tpu": "4"}, nil),
		want:   []string{`--resources='{"TPU":4,"custom":2}'`},
	}, {
		name:   "an accelerator already named is kept",
		params: map[string]string{"resources": `'{"TPU":1}'`},
		res:    res(map[string]string{"google.com/tpu": "4"}, nil),
		want:   []string{`--resources='{"TPU":1}'`},
	}, {
		name: "first accelerator in name order",
		res:  res(map[string]string{"google.com/tpu": "4", "aws.amazon.com/neuroncore": "2"}, nil),
		want: []string{`--resources='{"neuron_cores":2}'`},
	}, {
		name:      "TPU limit joins the group map's resources",
		res:       res(map[string]string{"google.com/tpu": "4"}, nil),
		overrides: map[string]string{"slice": "1"},
		want:      []string{`--resources='{"TPU":4,"slice":1}'`},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := RayStartCommand(StartParams{Params: tc.params, Resources: tc.res, Overrides: tc.overrides, HeadAddress: "h:6379"}) + " "
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(got, a) {
					t.Errorf("%q has %q", got, a)
				}
			}
		})
	}
}

// A head template labelled app.kubernetes.io/name keeps that label on the head pod; the head Service must select it
// or workers never find the head (issue 11).
func TestHeadServiceFollowsAppNameLabel(t *testing.T) {
	c := cluster()
	c.Spec.HeadGroupSpec.Template.Labels = map[string]string{rayv1.LabelAppName: "my-app"}
	pod := HeadPod(c, PodOptions{})
	svc := HeadService(c)
	for k, v := range svc.Spec.Selector {
		if pod.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the head pod's %q", k, v, pod.Labels[k])
		}
	}
	if svc.Labels[rayv1.LabelAppName] != "my-app" {
		t.Errorf("service labels %v", svc.Labels)
	}
}

// User headService ports are added to the defaults, not put in their place; a user port wins over a default of the
// same name or number; the user's Service is not made headless.
func TestHeadServiceUserPortsAdded(t *testing.T) {
	c := cluster()
	c.Spec.HeadGroupSpec.HeadService = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "custom", Annotations: map[string]string{"a": "user"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "extra", Port: 9999},
			{Name: "dashboard", Port: 18265},
		}},
	}
	c.Spec.HeadServiceAnnotations = map[string]string{"a": "cluster"}
	svc := HeadService(c)
	var got []string
	for _, p := range svc.Spec.Ports {
		got = append(got, p.Name)
	}
	want := []string{"extra", "dashboard", "client", "gcs-server", "metrics", "serve"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	if svc.Spec.ClusterIP != "" || svc.Name != "custom" || svc.Annotations["a"] != "cluster" {
		t.Errorf("clusterIP %q name %q annotations %v", svc.Spec.ClusterIP, svc.Name, svc.Annotations)
	}
}

func TestServeServiceType(t *testing.T) {
	c := cluster()
	c.Spec.HeadGroupSpec.ServiceType = corev1.ServiceTypeNodePort
	if got := ServeService(c).Spec.Type; got != corev1.ServiceTypeNodePort {
		t.Errorf("serve service type %q, want the head's NodePort", got)
	}
}

// A group's Ray labels are also the pod's labels (so users and schedulers can select on them), but never override
// the labels the operator selects on.
func TestGroupLabelsOnPods(t *testing.T) {
	c := cluster()
	g := &c.Spec.WorkerGroupSpecs[0]
	g.Template.Labels = map[string]string{"zone": "template", "team": "a"}
	g.Labels = map[string]string{"zone": "group", rayv1.LabelGroup: "hijack"}
	pod := WorkerPod(c, g, PodOptions{})
	if pod.Labels["zone"] != "group" || pod.Labels["team"] != "a" || pod.Labels[rayv1.LabelGroup] != "small" {
		t.Errorf("labels %v", pod.Labels)
	}
	if !strings.Contains(envMap(pod.Spec.Containers[0])["KUBERAY_GEN_RAY_START_CMD"], "--labels=ray.io/group=hijack,zone=group") {
		t.Errorf("ray start lacks the labels: %s", envMap(pod.Spec.Containers[0])["KUBERAY_GEN_RAY_START_CMD"])
	}
}

// Probes ask the ports rayStartParams moved the dashboard agent and the dashboard to.
func TestProbesFollowRayStartParams(t *testing.T) {
	c := cluster()
	c.Spec.HeadGroupSpec.RayStartParams = map[string]string{"dashboard-agent-listen-port": "52400", "dashboard-port": "8300"}
	pod := HeadPod(c, PodOptions{})
	cmd := strings.Join(pod.Spec.Containers[0].LivenessProbe.Exec.Command, " ")
	if !strings.Contains(cmd, "localhost:52400/api/local_raylet_healthz") || !strings.Contains(cmd, "localhost:8300/api/gcs_healthz") {
		t.Errorf("liveness probe %q", cmd)
	}
	c.Spec.RayVersion = "2.53.0"
	pod = HeadPod(c, PodOptions{})
	if p := pod.Spec.Containers[0].ReadinessProbe.HTTPGet; p == nil || p.Port.IntVal != 52400 {
		t.Errorf("readiness probe %+v", pod.Spec.Containers[0].ReadinessProbe)
	}
}

// Generated scripts run in a plain bash: a login shell's profile can reset the PATH of a custom image. The wait for
// the GCS stops hiding the health check's error after two minutes.
func TestGeneratedCommandsNoLoginShell(t *testing.T) {
	c := cluster()
	tr := true
	c.Spec.EnableInTreeAutoscaling = &tr
	head := HeadPod(c, PodOptions{})
	worker := WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})
	for _, ctr := range []corev1.Container{head.Spec.Containers[0], head.Spec.Containers[1], worker.Spec.Containers[0], worker.Spec.InitContainers[0]} {
		if diff := cmp.Diff([]string{"/bin/bash", "-c", "--"}, ctr.Command); diff != "" {
			t.Errorf("%s command (-want +got):\n%s", ctr.Name, diff)
		}
	}
	wait := worker.Spec.InitContainers[0].Args[0]
	if !strings.Contains(wait, "if ray health-check --address rc-head-svc.ns.svc.cluster.local:6379; then") {
		t.Errorf("the wait loop never shows the health check's error:\n%s", wait)
	}
}

// GCS fault tolerance on Redis: the head gets the storage namespace, the Redis address and credentials (as env vars
// that rayStartParams refer to); workers outlive a GCS restart.
func TestGCSFaultTolerance(t *testing.T) {
	c := cluster()
	c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{
		RedisAddress:  "redis:6379",
		RedisPassword: &rayv1.RedisCredential{ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "password"}}},
		RedisUsername: &rayv1.RedisCredential{Value: "ray"},
	}
	head := HeadPod(c, PodOptions{})
	env := envMap(head.Spec.Containers[0])
	if head.Annotations[AnnotationFTEnabled] != "true" || head.Annotations[AnnotationExternalStorageNamespace] != "uid-1" {
		t.Errorf("head annotations %v", head.Annotations)
	}
	if env[EnvExternalStorageNS] != "uid-1" || env[EnvRedisAddress] != "redis:6379" || env[EnvRedisUsername] != "ray" {
		t.Errorf("head env %v", env)
	}
	if cmd := env["KUBERAY_GEN_RAY_START_CMD"]; !strings.Contains(cmd, "--redis-password=$REDIS_PASSWORD") || !strings.Contains(cmd, "--redis-username=$REDIS_USERNAME") {
		t.Errorf("ray start %q", cmd)
	}
	if c.Spec.HeadGroupSpec.RayStartParams["redis-password"] != "" {
		t.Error("the cluster's rayStartParams were changed")
	}
	worker := WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})
	if envMap(worker.Spec.Containers[0])[EnvGCSReconnectTimeout] != "600" {
		t.Errorf("worker env %v", envMap(worker.Spec.Containers[0]))
	}

	// The annotation alone, with a storage namespace of the user's.
	c = cluster()
	c.Annotations = map[string]string{AnnotationFTEnabled: "true", AnnotationExternalStorageNamespace: "mine"}
	c.Spec.HeadGroupSpec.RayStartParams = map[string]string{"redis-password": "pw"}
	head = HeadPod(c, PodOptions{})
	if env := envMap(head.Spec.Containers[0]); env[EnvExternalStorageNS] != "mine" || env[EnvRedisPassword] != "pw" {
		t.Errorf("head env %v", env)
	}
	if off := HeadPod(cluster(), PodOptions{}); off.Annotations[AnnotationFTEnabled] != "false" {
		t.Errorf("ft-enabled without FT: %v", off.Annotations)
	}
}
