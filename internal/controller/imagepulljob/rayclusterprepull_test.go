package imagepulljob

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

func TestDesiredPrepullJobs(t *testing.T) {
	all := nodes(
		makeNode("a-0").label("pool", "pp").label("zone", "a"),
		makeNode("b-0").label("pool", "pp").label("zone", "b").label("rank", "7"),
		makeNode("b-1").label("pool", "pp").label("zone", "b").label("rank", "2").notReady(),
		makeNode("gpu-0").label("pool", "gpu").taint("nvidia.com/gpu", corev1.TaintEffectNoSchedule),
	)
	head := podTemplate("rayproject/ray:2.9.0")
	head.Spec.NodeSelector = map[string]string{"zone": "a"}
	head.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1.36"}}
	zoneB := podTemplate("rayproject/ray:2.9.0", "example/sidecar:v1")
	zoneB.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}, {Key: "rank", Operator: corev1.NodeSelectorOpGt, Values: []string{"5"}}}},
			{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"b-1"}}}},
		},
	}}}
	zoneB.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	gpuUntolerated := podTemplate("example/gpu:v1")
	gpuUntolerated.Spec.NodeSelector = map[string]string{"pool": "gpu"}
	gpu := podTemplate("example/gpu:v2", "NOT A VALID IMAGE")
	gpu.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	gpu.Spec.NodeSelector = map[string]string{"pool": "gpu"}
	c := &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "rc", Namespace: "ns", UID: "rc-uid"},
		Spec: rayv1.RayClusterSpec{
			EnableInTreeAutoscaling: ptr.To(true),
			AutoscalerOptions:       &rayv1.AutoscalerOptions{Image: ptr.To("example/autoscaler:v1")},
			HeadGroupSpec:           rayv1.HeadGroupSpec{Template: head},
			WorkerGroupSpecs: []rayv1.WorkerGroupSpec{
				{GroupName: "b", Template: zoneB},
				{GroupName: "gpu-untolerated", Template: gpuUntolerated},
				{GroupName: "gpu", Template: gpu},
			},
		},
	}
	got := map[string][]string{}
	for _, j := range DesiredPrepullJobs(c, all, 5) {
		got[j.Spec.Image] = j.Spec.Selector.Names
		if j.Name != PrepullJobName("rc", j.Spec.Image) || *j.Spec.Parallelism != 5 || metav1.GetControllerOf(j).UID != "rc-uid" {
			t.Errorf("job %s: %+v", j.Name, j)
		}
		if j.Spec.Image == "example/sidecar:v1" && !cmp.Equal(j.Spec.PullSecrets, []string{"regcred"}) {
			t.Errorf("sidecar pull secrets: %v", j.Spec.PullSecrets)
		}
	}
	want := map[string][]string{
		"rayproject/ray:2.9.0":  {"a-0", "b-0"},
		"busybox:1.36":          {"a-0"},
		"example/autoscaler:v1": {"a-0"},
		"example/sidecar:v1":    {"b-0"},
		"example/gpu:v2":        {"gpu-0"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("prepull jobs (-want +got):\n%s", diff)
	}
}

// podTemplate is a pod template whose first container is the Ray container and whose others are sidecars, with these
// images.
func podTemplate(images ...string) corev1.PodTemplateSpec {
	var cs []corev1.Container
	for i, img := range images {
		cs = append(cs, corev1.Container{Name: []string{"ray-head", "side"}[min(i, 1)], Image: img})
	}
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: cs}}
}
