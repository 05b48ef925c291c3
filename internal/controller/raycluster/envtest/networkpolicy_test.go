package envtest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

func (e *env) networkPolicies(t *testing.T, rc *rayv1.RayCluster) map[string]*networkingv1.NetworkPolicy {
	t.Helper()
	list := &networkingv1.NetworkPolicyList{}
	if err := e.cl.List(context.Background(), list, client.InNamespace(rc.Namespace)); err != nil {
		t.Fatal(err)
	}
	out := map[string]*networkingv1.NetworkPolicy{}
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out[list.Items[i].Name] = &list.Items[i]
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// The controller creates the policies KubeRay builds, owned by the cluster; follows the spec (mode, rules, a
// removed group); puts back a policy someone edited; leaves someone else's under its name alone and says so; and
// deletes its own when spec.networkPolicy goes.
func testNetworkPolicies(t *testing.T, e *env) {
	ns := e.Namespace(t)
	ctx := context.Background()
	rc := testutil.MakeRayCluster(ns, "rc").Workers("a", 1).Workers("b", 1).Obj()
	rc.Spec.NetworkPolicy = &rayv1.NetworkPolicyConfig{}
	e.Create(t, rc)
	got := testutil.Get(t, e.Env, rc)
	if got.Spec.NetworkPolicy.Mode != rayv1.NetworkPolicyDenyAll {
		t.Fatalf("mode %q, want the CRD's default DenyAll", got.Spec.NetworkPolicy.Mode)
	}
	// What the controller writes is what the builder makes, field by field, as the API server stores it.
	check := func(what string, want ...string) {
		t.Helper()
		e.Eventually(t, what, func() (bool, string) {
			c := testutil.Get(t, e.Env, rc)
			nps := e.networkPolicies(t, rc)
			if !slices.Equal(sortedKeys(nps), want) {
				return false, fmt.Sprintf("policies %v", sortedKeys(nps))
			}
			for _, d := range clusterbuild.NetworkPolicies(c) {
				p := nps[d.Name]
				if !metav1.IsControlledBy(p, c) {
					return false, d.Name + " is not controlled by the cluster"
				}
				if clusterbuild.NetworkPolicyChanged(p, d) {
					return false, fmt.Sprintf("%s differs: %s", d.Name, cmp.Diff(d.Spec, p.Spec))
				}
			}
			return true, ""
		})
	}
	check("policies created", "rc-head", "rc-workers-a", "rc-workers-b")
	waitEvent(t, e, ns, raycluster.EventCreatedNetworkPolicy)
	if p := e.networkPolicies(t, rc)["rc-head"]; !slices.Equal(p.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) ||
		p.Labels[rayv1.LabelGroup] != rayv1.HeadGroupName || p.Spec.PodSelector.MatchLabels[rayv1.LabelNodeType] != rayv1.NodeTypeHead {
		t.Errorf("head policy: labels %v selector %v types %v", p.Labels, p.Spec.PodSelector.MatchLabels, p.Spec.PolicyTypes)
	}

	// Settled: a reconcile of an unrelated change writes no policy.
	rv := e.networkPolicies(t, rc)["rc-head"].ResourceVersion
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].MaxReplicas = ptr.To[int32](9) })
	e.waitObserved(t, rc)
	if now := e.networkPolicies(t, rc)["rc-head"].ResourceVersion; now != rv {
		t.Errorf("settled head policy rewritten: %s -> %s", rv, now)
	}

	// The spec changes: mode, a user rule (the protocol left for the API server to fill), group b removed.
	dns := networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(53))}}}
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) {
		c.Spec.NetworkPolicy.Mode = rayv1.NetworkPolicyDenyAllEgress
		c.Spec.NetworkPolicy.Worker = &rayv1.NetworkPolicyRules{EgressRules: []networkingv1.NetworkPolicyEgressRule{dns}}
		c.Spec.WorkerGroupSpecs = c.Spec.WorkerGroupSpecs[:1]
	})
	check("policies follow the spec", "rc-head", "rc-workers-a")
	if p := e.networkPolicies(t, rc)["rc-workers-a"]; len(p.Spec.Ingress) != 0 || len(p.Spec.Egress) != 2 {
		t.Errorf("worker policy after DenyAllEgress: ingress %v egress %v", p.Spec.Ingress, p.Spec.Egress)
	}
	waitEvent(t, e, ns, raycluster.EventUpdatedNetworkPolicy)
	waitEvent(t, e, ns, raycluster.EventDeletedNetworkPolicy)

	// Someone loosens the head's policy: it is put back.
	head := e.networkPolicies(t, rc)["rc-head"]
	head.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	head.Spec.Egress = nil
	if err := e.cl.Update(ctx, head); err != nil {
		t.Fatal(err)
	}
	check("edited policy restored", "rc-head", "rc-workers-a")

	// A policy of someone else's under the name a new group's would take: left alone, reported.
	theirs := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rc-workers-c"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	e.Create(t, theirs)
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) {
		c.Spec.WorkerGroupSpecs = append(c.Spec.WorkerGroupSpecs, *c.Spec.WorkerGroupSpecs[0].DeepCopy())
		c.Spec.WorkerGroupSpecs[1].GroupName = "c"
	})
	waitEvent(t, e, ns, raycluster.EventNetworkPolicyNameCollision)
	if p := e.networkPolicies(t, rc)["rc-workers-c"]; p.ResourceVersion != theirs.ResourceVersion || len(p.OwnerReferences) != 0 {
		t.Errorf("someone else's policy was written: %+v", p.ObjectMeta)
	}

	// networkPolicy removed: the cluster's own policies go, the other one stays.
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.NetworkPolicy = nil })
	e.Eventually(t, "the cluster's policies deleted", func() (bool, string) {
		nps := e.networkPolicies(t, rc)
		return slices.Equal(sortedKeys(nps), []string{"rc-workers-c"}), fmt.Sprintf("policies %v", sortedKeys(nps))
	})
}
