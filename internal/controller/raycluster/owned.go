package raycluster

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// ownedKind describes one kind of object the cluster owns whole (NetworkPolicies, the head Ingress): how it is
// written (reconcile.Owned), and the event reasons of each write.
type ownedKind[T client.Object] struct {
	reconcile.Owned[T]
	// collisionErr says a name taken by someone else's object fails the reconcile (KubeRay's NetworkPolicies: the
	// isolation asked for is not in force) rather than only being reported (its Ingress).
	collisionErr bool

	created, failCreate, updated, failUpdate, deleted, failDelete, collision string
}

// ownedPlan is what to write so that the objects of one kind the cluster owns are the desired ones.
type ownedPlan[T client.Object] struct {
	// ensure is each desired object's step; foreign names (held by objects the cluster does not control) are left
	// alone and reported.
	ensure []reconcile.Step[T]
	delete []T
}

// planOwned compares the desired objects with the existing ones (those of the kind labelled with the cluster). It
// is pure. Objects the cluster controls that are no longer desired are deleted; objects it does not control are
// never written.
func planOwned[T client.Object](c *rayv1.RayCluster, k ownedKind[T], desired, existing []T) ownedPlan[T] {
	var p ownedPlan[T]
	byName := make(map[string]T, len(existing))
	for _, o := range existing {
		byName[o.GetName()] = o
	}
	wanted := make(map[string]bool, len(desired))
	for _, d := range desired {
		wanted[d.GetName()] = true
		if s := reconcile.PlanOwned(c, &k.Owned, d, byName[d.GetName()]); s.Op != reconcile.Unchanged {
			p.ensure = append(p.ensure, s)
		}
	}
	for _, o := range existing {
		if !wanted[o.GetName()] && metav1.IsControlledBy(o, c) && o.GetDeletionTimestamp() == nil {
			p.delete = append(p.delete, o)
		}
	}
	return p
}

// errForeign is a name the cluster needs held by an object it does not control.
type errForeign struct{ kind, namespace, name string }

func (e *errForeign) Error() string {
	return fmt.Sprintf("%s %s/%s exists and is not controlled by this RayCluster: it is left as it is; rename it or the cluster", e.kind, e.namespace, e.name)
}

// reconcileOwned lists the objects of the kind labelled with the cluster into list (items reads them out), then
// plans and writes them towards desired.
func reconcileOwned[T client.Object](ctx context.Context, r *Reconciler, run *run, k ownedKind[T], list client.ObjectList, items func() []T, desired []T) error {
	c := run.c
	if err := r.client.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabels{rayv1.LabelCluster: c.Name}); err != nil {
		return fmt.Errorf("list %ss: %w", k.Kind, err)
	}
	return writeOwned(ctx, r, run, k, planOwned(c, k, desired, items()))
}

// writeOwned carries out p, every write reported in an event; it goes through the whole plan and joins the errors.
func writeOwned[T client.Object](ctx context.Context, r *Reconciler, run *run, k ownedKind[T], p ownedPlan[T]) error {
	c := run.c
	var errs []error
	report := func(op reconcile.Op, o T, err error) {
		switch {
		case op == reconcile.Foreign || op == reconcile.Taken:
			e := &errForeign{k.Kind, c.Namespace, o.GetName()}
			run.Eventf(corev1.EventTypeWarning, k.collision, "Create", "%s", e.Error())
			if k.collisionErr {
				errs = append(errs, e)
			}
		case op == reconcile.Created && err != nil:
			run.Eventf(corev1.EventTypeWarning, k.failCreate, "Create", "failed to create %s %s: %v", k.Kind, o.GetName(), err)
		case op == reconcile.Created:
			run.Eventf(corev1.EventTypeNormal, k.created, "Create", "created %s %s", k.Kind, o.GetName())
		case op == reconcile.Updated && err != nil:
			run.Eventf(corev1.EventTypeWarning, k.failUpdate, "Update", "failed to update %s %s: %v", k.Kind, o.GetName(), err)
		case op == reconcile.Updated:
			run.Eventf(corev1.EventTypeNormal, k.updated, "Update", "updated %s %s to match the spec", k.Kind, o.GetName())
		}
	}
	// The existing objects came from the list; a create that finds the name taken asks the API server, since the
	// cache's label selector leaves out someone else's object of that name.
	w := reconcile.Writer{Client: r.client, Live: r.reader, Owner: c}
	for _, s := range p.ensure {
		if _, _, err := reconcile.WriteOwned(ctx, w, &k.Owned, s, report); err != nil {
			errs = append(errs, err)
		}
	}
	for _, o := range p.delete {
		uid := o.GetUID()
		if err := r.client.Delete(ctx, o, client.Preconditions{UID: &uid}); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			run.Eventf(corev1.EventTypeWarning, k.failDelete, "Delete", "failed to delete %s %s: %v", k.Kind, o.GetName(), err)
			errs = append(errs, fmt.Errorf("delete %s %s: %w", k.Kind, o.GetName(), err))
			continue
		}
		run.Eventf(corev1.EventTypeNormal, k.deleted, "Delete", "deleted %s %s: the cluster no longer asks for it", k.Kind, o.GetName())
	}
	return errors.Join(errs...)
}
