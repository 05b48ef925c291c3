package envtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
)

// podTemplate is a pod template whose first container is the Ray container and whose others are sidecars, with these
// images.
func podTemplate(images ...string) corev1.PodTemplateSpec {
	var cs []corev1.Container
	for i, img := range images {
		cs = append(cs, corev1.Container{Name: []string{"ray-head", "side"}[min(i, 1)], Image: img})
	}
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: cs}}
}

func testPrepull(t *testing.T, e *env) {
	ctx := context.Background()
	ns := e.namespace(t)
	e.addNode(t, "pp-0", map[string]string{"pool": "pp", "zone": "a"})
	e.addNode(t, "pp-1", map[string]string{"pool": "pp", "zone": "b"})
	e.addNode(t, "gpu-0", map[string]string{"pool": "gpu"})
	gpu := &corev1.Node{}
	if err := e.cl.Get(ctx, client.ObjectKey{Name: "gpu-0"}, gpu); err != nil {
		t.Fatal(err)
	}
	gpu.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	if err := e.cl.Update(ctx, gpu); err != nil {
		t.Fatal(err)
	}

	head := podTemplate("rayproject/ray:2.9.0")
	head.Spec.NodeSelector = map[string]string{"pool": "pp", "zone": "a"}
	zoneB := podTemplate("rayproject/ray:2.9.0", "example/sidecar:v1")
	zoneB.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}}},
	}}}
	zoneB.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	gpuNoToleration := podTemplate("example/gpu:v1")
	gpuNoToleration.Spec.NodeSelector = map[string]string{"pool": "gpu"}
	gpuTolerated := podTemplate("example/gpu:v2")
	gpuTolerated.Spec.NodeSelector = map[string]string{"pool": "gpu"}
	gpuTolerated.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}

	cluster := &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "raycluster", Namespace: ns, Annotations: map[string]string{imagepulljob.AnnotationPrepullImages: "true"}},
		Spec: rayv1.RayClusterSpec{
			HeadGroupSpec: rayv1.HeadGroupSpec{Template: head, RayStartParams: map[string]string{}},
			WorkerGroupSpecs: []rayv1.WorkerGroupSpec{
				{GroupName: "zone-b", Replicas: ptr.To[int32](1), MinReplicas: ptr.To[int32](0), MaxReplicas: ptr.To[int32](4), Template: zoneB, RayStartParams: map[string]string{}},
				{GroupName: "gpu-untolerated", Replicas: ptr.To[int32](1), MinReplicas: ptr.To[int32](0), MaxReplicas: ptr.To[int32](4), Template: gpuNoToleration, RayStartParams: map[string]string{}},
				{GroupName: "gpu", Replicas: ptr.To[int32](1), MinReplicas: ptr.To[int32](0), MaxReplicas: ptr.To[int32](4), Template: gpuTolerated, RayStartParams: map[string]string{}},
			},
		},
	}
	if err := e.cl.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"rayproject/ray:2.9.0": {"pp-0", "pp-1"},
		"example/sidecar:v1":   {"pp-1"},
		"example/gpu:v2":       {"gpu-0"},
	}
	var jobs []mantav1alpha1.ImagePullJob
	matched := false
	defer func() {
		// The jobs never matched: log what the controller plans from the stored objects.
		if !matched {
			var stored rayv1.RayCluster
			_ = e.cl.Get(ctx, client.ObjectKeyFromObject(cluster), &stored)
			var nl corev1.NodeList
			_ = e.cl.List(ctx, &nl)
			for _, j := range imagepulljob.DesiredPrepullJobs(&stored, nl.Items, 1) {
				t.Logf("desired from stored objects: %s %v", j.Spec.Image, j.Spec.Selector.Names)
			}
			for _, n := range nl.Items {
				t.Logf("node %s labels %v taints %v conds %v fits head %v", n.Name, n.Labels, n.Spec.Taints, n.Status.Conditions, imagepulljob.PodFitsNode(&stored.Spec.HeadGroupSpec.Template.Spec, &n))
			}
		}
	}()
	e.Eventually(t, "the prepull jobs", func() (bool, string) {
		jobs = e.ownedJobs(t, ns, cluster.UID)
		got := map[string][]string{}
		for _, j := range jobs {
			got[j.Spec.Image] = j.Spec.Selector.Names
		}
		return cmp.Equal(want, got), fmt.Sprintf("prepull jobs (-want +got):\n%s", cmp.Diff(want, got))
	})
	matched = true
	for _, j := range jobs {
		if j.Spec.CompletionPolicy.Type != mantav1alpha1.CompleteNever || j.Name != imagepulljob.PrepullJobName(cluster.Name, j.Spec.Image) {
			t.Errorf("job %s: %+v", j.Name, j.Spec)
		}
		if j.Spec.Image == "example/sidecar:v1" && !cmp.Equal(j.Spec.PullSecrets, []string{"regcred"}) {
			t.Errorf("sidecar job pull secrets %v", j.Spec.PullSecrets)
		}
	}
	// The jobs run like any other: the ray image lands on both nodes.
	e.waitJob(t, client.ObjectKey{Namespace: ns, Name: imagepulljob.PrepullJobName(cluster.Name, "rayproject/ray:2.9.0")}, "prepull progress",
		func(j *mantav1alpha1.ImagePullJob) bool { return j.Status.Succeeded == 2 })

	// A node joining the zone-b pool is added to the jobs of the images that can land there.
	e.addNode(t, "pp-2", map[string]string{"pool": "pp", "zone": "b"})
	e.Eventually(t, "node pp-2 added to the jobs", func() (bool, string) {
		got := map[string][]string{}
		for _, j := range e.ownedJobs(t, ns, cluster.UID) {
			got[j.Spec.Image] = j.Spec.Selector.Names
		}
		return cmp.Equal(got["example/sidecar:v1"], []string{"pp-1", "pp-2"}) && len(got["rayproject/ray:2.9.0"]) == 3, fmt.Sprint("node pp-2 not added: ", got)
	})

	// Turning prepull off removes the jobs.
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
		t.Fatal(err)
	}
	delete(cluster.Annotations, imagepulljob.AnnotationPrepullImages)
	if err := e.cl.Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "prepull jobs deleted after the annotation was removed", func() (bool, string) {
		n := len(e.ownedJobs(t, ns, cluster.UID))
		return n == 0, fmt.Sprintf("%d left", n)
	})
}

func (e *env) ownedJobs(t *testing.T, ns string, owner types.UID) []mantav1alpha1.ImagePullJob {
	t.Helper()
	var list mantav1alpha1.ImagePullJobList
	if err := e.cl.List(context.Background(), &list, client.InNamespace(ns)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	var out []mantav1alpha1.ImagePullJob
	for _, j := range list.Items {
		if ref := metav1.GetControllerOf(&j); ref != nil && ref.UID == owner && j.DeletionTimestamp == nil {
			out = append(out, j)
		}
	}
	return out
}
