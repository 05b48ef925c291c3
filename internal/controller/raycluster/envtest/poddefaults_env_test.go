package envtest

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestPodDefaultsAcrossRestart: the operator's pod defaults (KubeRay's Configuration file: sidecars, env, labels,
// annotations) reach the pods it creates, and an operator restarted with other defaults recreates none of the pods
// the first one built, even under upgradeStrategy Recreate; only the pods created afterwards get the new defaults,
// as in KubeRay.
func TestPodDefaultsAcrossRestart(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	ctx := context.Background()
	const ns = "pod-defaults"
	e := testutil.NewEnv(cl)
	e.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	defaults := func(gen string) *clusterbuild.PodDefaults {
		return &clusterbuild.PodDefaults{
			HeadSidecars:   []corev1.Container{{Name: "agent", Image: "agent:" + gen}},
			WorkerSidecars: []corev1.Container{{Name: "shipper", Image: "shipper:" + gen}},
			Env:            []corev1.EnvVar{{Name: "DEFAULTS_GEN", Value: gen}},
			Labels:         map[string]string{"defaults-gen": gen},
			Annotations:    map[string]string{"defaults-gen": gen},
		}
	}
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Recreate().Obj()
	key := client.ObjectKeyFromObject(rc)
	pods := func() map[types.UID]corev1.Pod {
		var l corev1.PodList
		if err := cl.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelCluster: rc.Name}); err != nil {
			t.Fatal(err)
		}
		m := map[types.UID]corev1.Pod{}
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				m[p.UID] = p
			}
		}
		return m
	}
	waitPods := func(n int) {
		t.Helper()
		e.Eventually(t, fmt.Sprintf("%d pods", n), func() (bool, string) {
			got := pods()
			return len(got) == n, fmt.Sprintf("%d pods", len(got))
		})
	}
	checkDefaults := func(p corev1.Pod, gen string) {
		t.Helper()
		sidecar := "shipper:" + gen
		if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead {
			sidecar = "agent:" + gen
		}
		last := p.Spec.Containers[len(p.Spec.Containers)-1]
		env := map[string]string{}
		for _, v := range p.Spec.Containers[clusterbuild.RayContainerIndex].Env {
			env[v.Name] = v.Value
		}
		if last.Image != sidecar || env["DEFAULTS_GEN"] != gen || p.Labels["defaults-gen"] != gen || p.Annotations["defaults-gen"] != gen {
			t.Errorf("pod %s: last container %s, env %q, label %q, annotation %q; want generation %s", p.Name, last.Image,
				env["DEFAULTS_GEN"], p.Labels["defaults-gen"], p.Annotations["defaults-gen"], gen)
		}
	}

	first := map[types.UID]corev1.Pod{}
	t.Run("first operator", func(t *testing.T) {
		startNamespaced(t, cfg, ns, raycluster.Options{PodDefaults: defaults("1")})
		e.Create(t, rc)
		waitPods(2)
		first = pods()
		for _, p := range first {
			checkDefaults(p, "1")
		}
	}) // the first operator stops here
	if t.Failed() {
		return
	}

	startNamespaced(t, cfg, ns, raycluster.Options{PodDefaults: defaults("2")})
	// A scale-up: the second operator reconciles the cluster and creates a worker, which must get its defaults.
	var cur rayv1.RayCluster
	if err := cl.Get(ctx, key, &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](2)
	if err := cl.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	waitPods(3)
	now := pods()
	for uid, p := range first {
		if _, ok := now[uid]; !ok {
			t.Errorf("pod %s of the first operator was deleted by the second", p.Name)
		}
	}
	for uid, p := range now {
		if _, old := first[uid]; old {
			checkDefaults(p, "1")
		} else {
			checkDefaults(p, "2")
		}
	}
}
