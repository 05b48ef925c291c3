package clusterbuild

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

func collectorCluster() *rayv1.RayCluster {
	c := cluster()
	c.Spec.HistoryServerOptions = &rayv1.HistoryServerOptions{CollectorOptions: &rayv1.CollectorOptions{
		Image: "quay.io/kuberay/collector:v1.7.0",
		Env:   []corev1.EnvVar{{Name: "STORAGE_BACKEND", Value: "S3"}, {Name: "S3_REGION", Value: "eu-west-1"}},
	}}
	return c
}

// The collector sidecar KubeRay v1.7 adds to the head and to every worker: its defaults, the env it is told the
// cluster by (the head's also the dashboard), the user's env after it, and /tmp/ray shared with the Ray container,
// whose Ray exports its events to the collector.
func TestHistoryCollectorAsKubeRay17(t *testing.T) {
	c := collectorCluster()
	q := resource.MustParse
	logs := corev1.VolumeMount{Name: "ray-logs", MountPath: "/tmp/ray"}
	want := func(role string, extra ...corev1.EnvVar) corev1.Container {
		env := []corev1.EnvVar{
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "RAY_CLUSTER_NAME", Value: "rc"},
			{Name: "RAY_CLUSTER_NAMESPACE", Value: "ns"},
			{Name: "RAY_ROLE", Value: role},
			{Name: "EVENTS_PORT", Value: "8084"},
			{Name: "FQ_RAY_IP", Value: "rc-head-svc.ns.svc.cluster.local"},
		}
		env = append(env, extra...)
		env = append(env, corev1.EnvVar{Name: "STORAGE_BACKEND", Value: "S3"}, corev1.EnvVar{Name: "S3_REGION", Value: "eu-west-1"})
		return corev1.Container{
			Name: "ray-history-collector", Image: "quay.io/kuberay/collector:v1.7.0", ImagePullPolicy: corev1.PullIfNotPresent,
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: q("200m"), corev1.ResourceMemory: q("256Mi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("64Mi")},
			},
			Env:          env,
			VolumeMounts: []corev1.VolumeMount{logs},
		}
	}
	rayEvents := map[string]string{
		"RAY_enable_ray_event":                                                         "true",
		"RAY_enable_core_worker_ray_event_to_aggregator":                               "true",
		"RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR":                            "http://localhost:8084/v1/events",
		"RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES":                         CollectorEventTypes,
		"RAY_DASHBOARD_AGGREGATOR_AGENT_PUBLISHER_HTTP_ENDPOINT_EXPOSABLE_EVENT_TYPES": CollectorEventTypes,
	}
	check := func(t *testing.T, pod *corev1.Pod, want corev1.Container) {
		t.Helper()
		got := containerNamed(pod.Spec.Containers, CollectorContainerName)
		if got == nil {
			t.Fatalf("no collector among %d containers", len(pod.Spec.Containers))
		}
		if diff := cmp.Diff(want, *got); diff != "" {
			t.Errorf("collector (-KubeRay v1.7 +Manta):\n%s", diff)
		}
		ray := pod.Spec.Containers[RayContainerIndex]
		if !slices.ContainsFunc(ray.VolumeMounts, func(m corev1.VolumeMount) bool { return cmp.Equal(m, logs) }) {
			t.Errorf("Ray container mounts %+v: no shared /tmp/ray", ray.VolumeMounts)
		}
		if diff := cmp.Diff([]corev1.Volume{{Name: "ray-logs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			filterVolumes(pod.Spec.Volumes, "ray-logs")); diff != "" {
			t.Errorf("log volume (-KubeRay v1.7 +Manta):\n%s", diff)
		}
		env := envMap(ray)
		for k, v := range rayEvents {
			if env[k] != v {
				t.Errorf("Ray container %s = %q, want %q", k, env[k], v)
			}
		}
	}
	t.Run("head", func(t *testing.T) {
		check(t, HeadPod(c, PodOptions{}), want("Head", corev1.EnvVar{Name: "RAY_DASHBOARD_ADDRESS", Value: "http://localhost:8265"}))
	})
	t.Run("worker", func(t *testing.T) {
		check(t, WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{}), want("Worker"))
	})

	// Under a RayJob, with the autoscaler (which shares /tmp/ray too), token auth, the user's resources, pull policy
	// and dashboard address, and a Ray event setting of the user's own.
	c = collectorCluster()
	c.Labels = map[string]string{rayv1.LabelOriginCRD: "RayJob", rayv1.LabelOriginCRName: "job"}
	c.Spec.EnableInTreeAutoscaling = ptr.To(true)
	c.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}
	co := c.Spec.HistoryServerOptions.CollectorOptions
	co.ImagePullPolicy = corev1.PullAlways
	co.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: q("1Gi")}}
	co.Env = append(co.Env, corev1.EnvVar{Name: "RAY_DASHBOARD_ADDRESS", Value: "http://elsewhere:8265"})
	c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "RAY_enable_ray_event", Value: "false"}}
	head := HeadPod(c, PodOptions{ClusterDomain: "example.org"})
	got := containerNamed(head.Spec.Containers, CollectorContainerName)
	if got == nil {
		t.Fatal("no collector on the head")
	}
	if got.ImagePullPolicy != corev1.PullAlways || !cmp.Equal(got.Resources, *co.Resources) {
		t.Errorf("collector pull policy %q resources %+v", got.ImagePullPolicy, got.Resources)
	}
	genv := envMap(*got)
	for k, v := range map[string]string{
		"OWNER_KIND": "RayJob", "OWNER_NAME": "job", "RAY_DASHBOARD_ADDRESS": "http://elsewhere:8265", "RAY_AUTH_MODE": "token",
		"RAY_AUTH_TOKEN": "ref", "FQ_RAY_IP": "rc-head-svc.ns.svc.example.org",
	} {
		if genv[k] != v {
			t.Errorf("collector %s = %q, want %q", k, genv[k], v)
		}
	}
	if n := len(slices.DeleteFunc(slices.Clone(got.Env), func(e corev1.EnvVar) bool { return e.Name != "RAY_DASHBOARD_ADDRESS" })); n != 1 {
		t.Errorf("RAY_DASHBOARD_ADDRESS set %d times", n)
	}
	if env := envMap(head.Spec.Containers[RayContainerIndex]); env["RAY_enable_ray_event"] != "false" {
		t.Errorf("the user's RAY_enable_ray_event replaced: %q", env["RAY_enable_ray_event"])
	}
	if len(filterVolumes(head.Spec.Volumes, "ray-logs")) != 1 || containerNamed(head.Spec.Containers, AutoscalerContainerName) == nil {
		t.Errorf("volumes %+v", head.Spec.Volumes)
	}

	// No options, no sidecar.
	if pod := HeadPod(cluster(), PodOptions{}); containerNamed(pod.Spec.Containers, CollectorContainerName) != nil || len(filterVolumes(pod.Spec.Volumes, "ray-logs")) != 0 {
		t.Error("a collector without historyServerOptions")
	}
}
