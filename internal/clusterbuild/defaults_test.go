package clusterbuild

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

func testDefaults() *PodDefaults {
	return &PodDefaults{
		HeadSidecars:   []corev1.Container{{Name: "head-agent", Image: "agent:1"}},
		WorkerSidecars: []corev1.Container{{Name: "log-shipper", Image: "shipper:2"}, {Name: "proxy", Image: "proxy:3"}},
		Env:            []corev1.EnvVar{{Name: "TEAM", Value: "default-team"}, {Name: "REGION", Value: "eu"}, {Name: "RAY_IP", Value: "from-defaults"}},
		Annotations:    map[string]string{"cost-center": "default", "scrape": "true"},
		Labels:         map[string]string{"team": "default", rayv1.LabelNodeType: "not-a-node-type", "env": "prod"},
	}
}

// The Configuration file's defaults reach head and worker pods as KubeRay v1.7.0 applies them: sidecars after the
// pod's own containers, env only where the Ray container has none of that name, labels and annotations only where
// the pod has none of that key (the user's template and the operator's own labels win).
func TestPodDefaults(t *testing.T) {
	c := cluster()
	c.Spec.HeadGroupSpec.Template.Labels = map[string]string{"team": "ml"}
	c.Spec.HeadGroupSpec.Template.Annotations = map[string]string{"cost-center": "ml-42"}
	c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TEAM", Value: "ml"}}
	d := testDefaults()
	o := PodOptions{Defaults: d}

	head := HeadPod(c, o)
	names := func(p *corev1.Pod) []string {
		var n []string
		for _, ct := range p.Spec.Containers {
			n = append(n, ct.Name)
		}
		return n
	}
	if diff := cmp.Diff([]string{"ray-head", "head-agent"}, names(head)); diff != "" {
		t.Errorf("head containers (-want +got):\n%s", diff)
	}
	env := envMap(head.Spec.Containers[RayContainerIndex])
	if env["TEAM"] != "ml" || env["REGION"] != "eu" {
		t.Errorf("head env TEAM=%q REGION=%q: the user's TEAM kept, the default REGION added", env["TEAM"], env["REGION"])
	}
	if head.Labels["team"] != "ml" || head.Labels["env"] != "prod" || head.Labels[rayv1.LabelNodeType] != rayv1.NodeTypeHead {
		t.Errorf("head labels %v", head.Labels)
	}
	if head.Annotations["cost-center"] != "ml-42" || head.Annotations["scrape"] != "true" {
		t.Errorf("head annotations %v", head.Annotations)
	}

	w := WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], o)
	if diff := cmp.Diff([]string{"ray-worker", "log-shipper", "proxy"}, names(w)); diff != "" {
		t.Errorf("worker containers (-want +got):\n%s", diff)
	}
	wenv := envMap(w.Spec.Containers[RayContainerIndex])
	// A default of a name the operator sets wins over the operator's value, as in KubeRay (its defaults go first).
	if wenv["TEAM"] != "default-team" || wenv["RAY_IP"] != "from-defaults" {
		t.Errorf("worker env TEAM=%q RAY_IP=%q", wenv["TEAM"], wenv["RAY_IP"])
	}
	if w.Labels["team"] != "default" || w.Labels[rayv1.LabelNodeType] != rayv1.NodeTypeWorker {
		t.Errorf("worker labels %v", w.Labels)
	}
	// The sidecars are copies: a pod changed later does not change the operator's defaults.
	w.Spec.Containers[1].Image = "changed"
	if d.WorkerSidecars[0].Image != "shipper:2" {
		t.Error("the pod shares its sidecar with the defaults")
	}
	// Only the defaults differ from a pod built without them; nil defaults change nothing.
	plain := WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})
	if len(plain.Spec.Containers) != 1 || plain.Labels["env"] != "" || envMap(plain.Spec.Containers[0])["REGION"] != "" {
		t.Errorf("a pod without defaults got some: %v %v", plain.Labels, plain.Spec.Containers)
	}
}

// The defaults are not in the pod template hash: an operator restarted with other defaults recreates no pod (pods
// are recreated only when their stamped hash differs from Hashes of the spec).
func TestPodDefaultsNotHashed(t *testing.T) {
	c := cluster()
	h := Hashes(&c.Spec)
	for _, d := range []*PodDefaults{nil, testDefaults(), {Labels: map[string]string{"other": "x"}}} {
		head := HeadPod(c, PodOptions{Defaults: d, TemplateHash: h.Head})
		if got, _ := h.For(head.Labels); got != head.Annotations[AnnotationPodTemplateHash] {
			t.Errorf("defaults %+v: pod stamped %q, the spec's hash is %q", d, head.Annotations[AnnotationPodTemplateHash], got)
		}
	}
	if !cmp.Equal(Hashes(&c.Spec), h) {
		t.Error("building pods changed the spec's hashes")
	}
}
