package clusterbuild

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/version"
)

// asRelease makes the builders and PlanRecreate run as Manta release v until the test ends. Tests of this package
// do not run in parallel, so the package variable may be swapped.
func asRelease(t *testing.T, v string) {
	t.Helper()
	old := version.Version
	version.Version = v
	t.Cleanup(func() { version.Version = old })
}

// builtPods are the pods a Manta release builds for c with o: the head and one pod per worker group, each with
// its group's hash.
func builtPods(c *rayv1.RayCluster, o PodOptions) []corev1.Pod {
	h := Hashes(&c.Spec)
	o.TemplateHash = h.Head
	pods := []corev1.Pod{*HeadPod(c, o)}
	for i := range c.Spec.WorkerGroupSpecs {
		g := &c.Spec.WorkerGroupSpecs[i]
		o.TemplateHash = h.Workers[g.GroupName]
		pods = append(pods, *WorkerPod(c, g, o))
	}
	return pods
}

func recreateCluster() *rayv1.RayCluster {
	c := cluster()
	c.Spec.UpgradeStrategy = &rayv1.RayClusterUpgradeStrategy{Type: ptr.To(rayv1.RayClusterRecreate)}
	return c
}

// applyStamps does what the controller does with a plan's Stamp.
func applyStamps(pods []corev1.Pod, h TemplateHashes, idx []int) {
	for _, i := range idx {
		hash, _ := h.For(pods[i].Labels)
		pods[i].Annotations = Stamp(pods[i].Annotations)
		pods[i].Annotations[AnnotationPodTemplateHash] = hash
	}
}

// A newer Manta builds other pods from the same spec (other defaults: env, probes, sidecars, an operator default
// template, another DNS domain): none of that is a reason to recreate. A change of the user's spec is.
func TestPlanRecreateIgnoresBuilderChanges(t *testing.T) {
	asRelease(t, "v1.0.0")
	c := recreateCluster()
	old := builtPods(c, PodOptions{})
	// What the next release's builder would do differently, applied to the pods this one built.
	for i := range old {
		ray := &old[i].Spec.Containers[RayContainerIndex]
		ray.Env = append(ray.Env, corev1.EnvVar{Name: "RAY_NEW_DEFAULT", Value: "1"})
		ray.ReadinessProbe = nil
		old[i].Spec.Containers = append(old[i].Spec.Containers, corev1.Container{Name: "new-sidecar", Image: "sidecar"})
	}
	newer := builtPods(c, PodOptions{ClusterDomain: "example.internal", DefaultTemplate: &corev1.PodTemplateSpec{
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head", Env: []corev1.EnvVar{{Name: "OPERATOR", Value: "default"}}}}},
	}})
	if newer[0].Spec.Containers[RayContainerIndex].Env[0].Name == old[0].Spec.Containers[RayContainerIndex].Env[0].Name &&
		len(newer[0].Spec.Containers) == len(old[0].Spec.Containers) {
		t.Fatal("the two builds are alike: the test would show nothing")
	}
	for name, pods := range map[string][]corev1.Pod{"old builder": old, "new builder": newer} {
		if p := PlanRecreate(pods, Hashes(&c.Spec), true); p.Recreate || len(p.Stamp) != 0 {
			t.Errorf("%s: plan = %+v for pods built from the current spec, want nothing to do", name, p)
		}
	}

	// The user's spec changes: that recreates.
	changed := recreateCluster()
	changed.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Image = "rayproject/ray:2.53.0"
	if p := PlanRecreate(old, Hashes(&changed.Spec), true); !p.Recreate {
		t.Errorf("the worker image changed and upgradeStrategy is Recreate: plan = %+v, want Recreate", p)
	}
	// Without Recreate, the same change leaves the pods alone.
	if p := PlanRecreate(old, Hashes(&changed.Spec), false); p.Recreate || len(p.Stamp) != 0 {
		t.Errorf("without Recreate: plan = %+v, want nothing to do", p)
	}
}

// A release that hashes the same spec differently (a new API field, a new CRD default) takes the pods an older
// release stamped over as current, whatever their hash says, and then follows the user's changes again.
func TestPlanRecreateAcrossReleases(t *testing.T) {
	c := recreateCluster()
	asRelease(t, "v1.0.0")
	pods := builtPods(c, PodOptions{})
	for i := range pods {
		pods[i].Annotations[AnnotationPodTemplateHash] = "hashed-by-v1.0.0-" + pods[i].Annotations[AnnotationPodTemplateHash]
	}

	version.Version = "v1.1.0"
	h := Hashes(&c.Spec)
	p := PlanRecreate(pods, h, true)
	if p.Recreate || len(p.Stamp) != len(pods) {
		t.Fatalf("first reconcile of v1.1.0: plan = %+v, want every pod stamped and none recreated", p)
	}
	applyStamps(pods, h, p.Stamp)
	for i := range pods {
		if pods[i].Annotations[AnnotationVersion] != "v1.1.0" {
			t.Errorf("pod %d stamped by %q, want v1.1.0", i, pods[i].Annotations[AnnotationVersion])
		}
	}
	if p := PlanRecreate(pods, h, true); p.Recreate || len(p.Stamp) != 0 {
		t.Errorf("after stamping: plan = %+v, want nothing to do", p)
	}
	c.Spec.HeadGroupSpec.RayStartParams["num-cpus"] = "0"
	if p := PlanRecreate(pods, Hashes(&c.Spec), true); !p.Recreate {
		t.Errorf("the head's rayStartParams changed after the upgrade: plan = %+v, want Recreate", p)
	}
}

// Pods built by another operator or by a Manta before the stamp existed: stamped, never recreated.
func TestPlanRecreateTakeover(t *testing.T) {
	asRelease(t, "v1.0.0")
	c := recreateCluster()
	h := Hashes(&c.Spec)
	strip := func(keys ...string) []corev1.Pod {
		pods := builtPods(c, PodOptions{})
		for i := range pods {
			for _, k := range keys {
				delete(pods[i].Annotations, k)
			}
		}
		return pods
	}
	kuberay := strip(AnnotationPodTemplateHash, AnnotationVersion, AnnotationCommit)
	kuberay17 := strip(AnnotationPodTemplateHash, AnnotationVersion, AnnotationCommit)
	for i := range kuberay17 {
		// KubeRay v1.7 stamps Recreate pods with its own hash of the whole spec and its version.
		kuberay17[i].Annotations["ray.io/upgrade-strategy-recreate-hash"] = "KUBERAYHASH"
		kuberay17[i].Annotations[AnnotationKubeRayVersion] = "v1.7.0"
	}
	unstamped := strip(AnnotationVersion, AnnotationCommit)
	for i := range unstamped {
		// Manta before the stamp: its hash is of this scheme, but nothing says so.
		unstamped[i].Annotations[AnnotationPodTemplateHash] = "other"
	}
	for _, tc := range []struct {
		name      string
		pods      []corev1.Pod
		recreate  bool
		wantStamp int
	}{
		{"KubeRay v1.5.0, Recreate", kuberay, true, 2},
		{"KubeRay v1.5.0, no upgradeStrategy", kuberay, false, 2},
		{"KubeRay v1.7.0, Recreate", kuberay17, true, 2},
		{"Manta without the stamp, Recreate", unstamped, true, 2},
		// Without Recreate the hash is never read, so another release's is left as it is.
		{"Manta without the stamp, no upgradeStrategy", unstamped, false, 0},
	} {
		if len(tc.pods) != 2 {
			t.Fatalf("%s: %d pods, want a head and a worker", tc.name, len(tc.pods))
		}
		p := PlanRecreate(tc.pods, h, tc.recreate)
		if p.Recreate || len(p.Stamp) != tc.wantStamp {
			t.Errorf("%s: plan = %+v, want %d pods stamped and none recreated", tc.name, p, tc.wantStamp)
		}
	}

	// A worker of a group removed from the spec is not the plan's: the controller deletes it.
	gone := builtPods(c, PodOptions{})
	gone[1].Labels[rayv1.LabelGroup] = "removed"
	gone[1].Annotations[AnnotationPodTemplateHash] = "stale"
	if p := PlanRecreate(gone, h, true); p.Recreate || len(p.Stamp) != 0 {
		t.Errorf("worker of a removed group: plan = %+v, want nothing to do", p)
	}
}
