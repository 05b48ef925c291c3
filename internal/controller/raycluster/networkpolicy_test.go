package raycluster

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/testutil"
)

func npNames(ps []*networkingv1.NetworkPolicy) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func stepObjects(p ownedPlan[*networkingv1.NetworkPolicy], op reconcile.Op) []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	for _, s := range p.ensure {
		if s.Op == op {
			out = append(out, s.Object)
		}
	}
	return out
}

func stepNames(p ownedPlan[*networkingv1.NetworkPolicy], op reconcile.Op) []string {
	return npNames(stepObjects(p, op))
}

func TestPlanNetworkPolicies(t *testing.T) {
	c := testutil.MakeRayCluster("ns", "rc").Workers("a", 1).Workers("b", 1).Obj()
	c.UID = "uid-rc"
	c.Spec.NetworkPolicy = &rayv1.NetworkPolicyConfig{Mode: rayv1.NetworkPolicyDenyAll}
	desired := clusterbuild.NetworkPolicies(c)
	stored := func(name string, mutate ...func(*networkingv1.NetworkPolicy)) *networkingv1.NetworkPolicy {
		// A name the spec does not ask for is one of a removed group.
		p := desired[1].DeepCopy()
		p.Name = name
		if i := slices.IndexFunc(desired, func(d *networkingv1.NetworkPolicy) bool { return d.Name == name }); i >= 0 {
			p = desired[i].DeepCopy()
		}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	foreign := func(p *networkingv1.NetworkPolicy) { p.OwnerReferences = nil }
	drifted := func(p *networkingv1.NetworkPolicy) { p.Spec.Ingress = nil }
	deleting := func(p *networkingv1.NetworkPolicy) { p.DeletionTimestamp = ptr.To(metav1.Now()) }

	type names struct{ Create, Update, Delete, Foreign []string }
	tests := []struct {
		name     string
		existing []*networkingv1.NetworkPolicy
		want     names
	}{
		{"new cluster: all created", nil, names{Create: []string{"rc-head", "rc-workers-a", "rc-workers-b"}}},
		{"settled: nothing", []*networkingv1.NetworkPolicy{stored("rc-head"), stored("rc-workers-a"), stored("rc-workers-b")}, names{}},
		{"drifted one updated, removed group's deleted", []*networkingv1.NetworkPolicy{
			stored("rc-head", drifted), stored("rc-workers-a"), stored("rc-workers-b"), stored("rc-workers-gone"),
		}, names{Update: []string{"rc-head"}, Delete: []string{"rc-workers-gone"}}},
		{"someone else's under our name: reported, never written", []*networkingv1.NetworkPolicy{
			stored("rc-head", foreign, drifted), stored("rc-workers-a"), stored("rc-workers-b"), stored("rc-workers-theirs", foreign),
		}, names{Foreign: []string{"rc-head"}}},
		{"one going away: waited for", []*networkingv1.NetworkPolicy{
			stored("rc-head", deleting, drifted), stored("rc-workers-a"), stored("rc-workers-b"), stored("rc-workers-gone", deleting),
		}, names{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := planOwned(c, networkPolicyKind, desired, tc.existing)
			got := names{stepNames(p, reconcile.Created), stepNames(p, reconcile.Updated), npNames(p.delete), stepNames(p, reconcile.Foreign)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			for _, u := range stepObjects(p, reconcile.Updated) {
				if clusterbuild.NetworkPolicyChanged(u, desired[slices.IndexFunc(desired, func(d *networkingv1.NetworkPolicy) bool { return d.Name == u.Name })]) {
					t.Errorf("update of %s does not carry the desired policy", u.Name)
				}
			}
		})
	}
	// Without spec.networkPolicy every policy the cluster controls goes, and no other.
	c.Spec.NetworkPolicy = nil
	p := planOwned(c, networkPolicyKind, clusterbuild.NetworkPolicies(c), []*networkingv1.NetworkPolicy{stored("rc-head"), stored("rc-workers-a", foreign)})
	if got := npNames(p.delete); !slices.Equal(got, []string{"rc-head"}) || len(p.ensure) != 0 {
		t.Errorf("networkPolicy removed: delete %v, plan %+v", got, p)
	}
}
