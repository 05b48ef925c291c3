package raycluster

import (
	"context"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// Event reasons of the head Ingress: KubeRay's, and for its deletion (KubeRay never deletes it) Manta's.
const (
	EventCreatedIngress        = "CreatedIngress"
	EventFailedToCreateIngress = "FailedToCreateIngress"
	EventUpdatedIngress        = "UpdatedIngress"
	EventFailedToUpdateIngress = "FailedToUpdateIngress"
	EventDeletedIngress        = "DeletedIngress"
	EventFailedToDeleteIngress = "FailedToDeleteIngress"
)

var ingressKind = ownedKind[*networkingv1.Ingress]{
	Owned: reconcile.Owned[*networkingv1.Ingress]{
		Kind: "Ingress", New: func() *networkingv1.Ingress { return &networkingv1.Ingress{} }, OnExists: reconcile.ExistsCheck,
		Sync: func(existing, desired *networkingv1.Ingress) (*networkingv1.Ingress, bool, bool) {
			u, changed := clusterbuild.SyncHeadIngress(existing, desired)
			return u, changed, false
		},
	},
	created: EventCreatedIngress, failCreate: EventFailedToCreateIngress,
	updated: EventUpdatedIngress, failUpdate: EventFailedToUpdateIngress,
	deleted: EventDeletedIngress, failDelete: EventFailedToDeleteIngress,
	// As KubeRay: someone else's Ingress under the name is reported, and the cluster goes on without one.
	collision: EventFailedToCreateIngress,
}

// reconcileHeadIngress keeps the head's dashboard Ingress while headGroupSpec.enableIngress is true, in line with
// the spec, and deletes it once it is not: unlike KubeRay, which leaves it, so that turning the option off stops
// exposing the dashboard.
func (r *Reconciler) reconcileHeadIngress(ctx context.Context, run *run) error {
	var desired []*networkingv1.Ingress
	if clusterbuild.WantsHeadIngress(run.c) {
		desired = append(desired, clusterbuild.HeadIngress(run.c))
	}
	list := &networkingv1.IngressList{}
	return reconcileOwned(ctx, r, run, ingressKind, list, func() []*networkingv1.Ingress {
		out := make([]*networkingv1.Ingress, len(list.Items))
		for i := range list.Items {
			out[i] = &list.Items[i]
		}
		return out
	}, desired)
}
