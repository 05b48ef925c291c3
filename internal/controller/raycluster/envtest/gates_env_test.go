package envtest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/features"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestFeatureGatesOff runs a controller with RayClusterStatusConditions and RayMultiHostIndexing off (its own gates,
// raycluster.Options.FeatureEnabled: the process's stay as they are) beside one with Manta's default gates (both on), on one
// control plane, and plays a cluster with a multi-host group through creation, readiness, a lost host, suspension
// and resumption:
//   - off: no KubeRay condition is ever written, the state still goes Ready then Suspended, spec.suspend deletes the
//     pods at once, the workers carry no replica label and a lost host is replaced alone, its replica kept;
//   - on: the same cluster gets its conditions and replica labels, and a lost host takes its replica with it.
func TestFeatureGatesOff(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	e := &env{Env: testutil.NewEnv(cl), cl: cl}
	for _, ns := range []string{"gates-off", "gates-on"} {
		e.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	off := features.Defaults()
	off[features.RayClusterStatusConditions], off[features.RayMultiHostIndexing] = false, false
	on := features.Defaults()
	startNamespaced(t, cfg, "gates-off", raycluster.Options{FeatureEnabled: func(f features.Gate) bool { return off[f] }})
	startNamespaced(t, cfg, "gates-on", raycluster.Options{FeatureEnabled: func(f features.Gate) bool { return on[f] }})
	replicaLabels := []string{rayv1.LabelReplicaIndex, rayv1.LabelReplicaName, rayv1.LabelHostIndex}
	kubeRay := map[string]bool{}
	for _, c := range []rayv1.RayClusterConditionType{rayv1.HeadPodReady, rayv1.RayClusterProvisioned, rayv1.RayClusterReplicaFailure,
		rayv1.RayClusterSuspending, rayv1.RayClusterSuspended} {
		kubeRay[string(c)] = true
	}

	for _, ns := range []string{"gates-off", "gates-on"} {
		t.Run(ns, func(t *testing.T) {
			gatesOn := ns == "gates-on"
			// checkConditions fails when the conditions are off and one of KubeRay's is present, or on and absent.
			checkConditions := func(c *rayv1.RayCluster, when string) {
				t.Helper()
				var found []string
				for _, cond := range c.Status.Conditions {
					if kubeRay[cond.Type] {
						found = append(found, cond.Type)
					}
				}
				if gatesOn != (len(found) > 0) {
					t.Errorf("%s: KubeRay's conditions %v with the gate on=%v", when, found, gatesOn)
				}
			}
			rc := testutil.MakeRayCluster(ns, "rc").Workers("tpu", 2).Obj()
			rc.Spec.WorkerGroupSpecs[0].NumOfHosts = 2
			e.Create(t, rc)

			pods := e.waitPods(t, rc, 5)
			for _, p := range pods {
				if p.Labels[rayv1.LabelNodeType] != rayv1.NodeTypeWorker {
					continue
				}
				for _, l := range replicaLabels {
					if _, has := p.Labels[l]; has != gatesOn {
						t.Errorf("worker %s: label %s present=%v with the gate on=%v (labels %v)", p.Name, l, has, gatesOn, p.Labels)
					}
				}
			}
			e.setReady(t, rc)
			checkConditions(e.waitState(t, rc, rayv1.Ready), "ready")

			// A lost host: with indexing its replica goes too (4 pods replaced by 2 new ones of a new replica); without,
			// it is replaced alone.
			var lost corev1.Pod
			for _, p := range pods {
				if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeWorker {
					lost = p
					break
				}
			}
			if err := cl.Delete(context.Background(), &lost); err != nil {
				t.Fatal(err)
			}
			after := e.waitPods(t, rc, 5)
			kept := 0
			for _, p := range after {
				for _, q := range pods {
					if p.UID == q.UID && p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeWorker {
						kept++
					}
				}
			}
			if want := map[bool]int{true: 2, false: 3}[gatesOn]; kept != want {
				t.Errorf("after a lost host, %d of the workers kept, want %d", kept, want)
			}

			testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.Suspend = ptr.To(true) })
			e.waitPods(t, rc, 0)
			checkConditions(e.waitState(t, rc, rayv1.Suspended), "suspended")
			testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.Suspend = ptr.To(false) })
			e.waitPods(t, rc, 5)
			e.setReady(t, rc)
			checkConditions(e.waitState(t, rc, rayv1.Ready), "resumed")
		})
	}
}
