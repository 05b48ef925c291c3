package raycluster

import (
	"context"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// Event reasons of the NetworkPolicies, KubeRay's.
const (
	EventCreatedNetworkPolicy        = "CreatedNetworkPolicy"
	EventFailedToCreateNetworkPolicy = "FailedToCreateNetworkPolicy"
	EventUpdatedNetworkPolicy        = "UpdatedNetworkPolicy"
	EventFailedToUpdateNetworkPolicy = "FailedToUpdateNetworkPolicy"
	EventDeletedNetworkPolicy        = "DeletedNetworkPolicy"
	EventFailedToDeleteNetworkPolicy = "FailedToDeleteNetworkPolicy"
	EventNetworkPolicyNameCollision  = "NetworkPolicyNameCollision"
)

var networkPolicyKind = ownedKind[*networkingv1.NetworkPolicy]{
	Owned: reconcile.Owned[*networkingv1.NetworkPolicy]{
		Kind: "NetworkPolicy", New: func() *networkingv1.NetworkPolicy { return &networkingv1.NetworkPolicy{} }, OnExists: reconcile.ExistsCheck,
		Sync: func(existing, desired *networkingv1.NetworkPolicy) (*networkingv1.NetworkPolicy, bool, bool) {
			if !clusterbuild.NetworkPolicyChanged(existing, desired) {
				return nil, false, false
			}
			u := existing.DeepCopy()
			u.Labels, u.Spec = desired.Labels, *desired.Spec.DeepCopy()
			return u, true, false
		},
	},
	collisionErr: true,
	created:      EventCreatedNetworkPolicy, failCreate: EventFailedToCreateNetworkPolicy,
	updated: EventUpdatedNetworkPolicy, failUpdate: EventFailedToUpdateNetworkPolicy,
	deleted: EventDeletedNetworkPolicy, failDelete: EventFailedToDeleteNetworkPolicy,
	collision: EventNetworkPolicyNameCollision,
}

// reconcileNetworkPolicies makes the cluster's NetworkPolicies those of spec.networkPolicy: created, brought back
// when they differ, and deleted when the spec (or a worker group) no longer asks for them.
func (r *Reconciler) reconcileNetworkPolicies(ctx context.Context, run *run) error {
	list := &networkingv1.NetworkPolicyList{}
	return reconcileOwned(ctx, r, run, networkPolicyKind, list, func() []*networkingv1.NetworkPolicy {
		out := make([]*networkingv1.NetworkPolicy, len(list.Items))
		for i := range list.Items {
			out[i] = &list.Items[i]
		}
		return out
	}, clusterbuild.NetworkPolicies(run.c))
}
