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
)

// ownedKind describes one kind of object the cluster owns whole (NetworkPolicies, the head Ingress): how an
// existing one is brought back to the desired one, and the event reasons of each write.
type ownedKind[T client.Object] struct {
	kind string
	// newObj makes an empty object of the kind, for the uncached read after a create found the name taken.
	newObj func() T
	// sync returns a copy of existing carrying what Manta writes from desired, and whether anything differed.
	sync func(existing, desired T) (T, bool)
	// collisionErr says a name taken by someone else's object fails the reconcile (KubeRay's NetworkPolicies: the
	// isolation asked for is not in force) rather than only being reported (its Ingress).
	collisionErr bool

	created, failCreate, updated, failUpdate, deleted, failDelete, collision string
}

// ownedPlan is what to write so that the objects of one kind the cluster owns are the desired ones.
type ownedPlan[T client.Object] struct {
	create, update, delete []T
	// foreign are desired names held by objects the cluster does not control: left alone and reported.
	foreign []string
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
		o, ok := byName[d.GetName()]
		switch {
		case !ok:
			p.create = append(p.create, d)
		case !metav1.IsControlledBy(o, c):
			p.foreign = append(p.foreign, d.GetName())
		case o.GetDeletionTimestamp() != nil:
			// Going away: created again once it is gone.
		default:
			if u, changed := k.sync(o, d); changed {
				p.update = append(p.update, u)
			}
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
		return fmt.Errorf("list %ss: %w", k.kind, err)
	}
	return writeOwned(ctx, r, run, k, planOwned(c, k, desired, items()))
}

// writeOwned carries out p, every write reported in an event; it goes through the whole plan and joins the errors.
func writeOwned[T client.Object](ctx context.Context, r *Reconciler, run *run, k ownedKind[T], p ownedPlan[T]) error {
	c := run.c
	var errs []error
	foreign := func(name string) {
		e := &errForeign{k.kind, c.Namespace, name}
		run.Eventf(corev1.EventTypeWarning, k.collision, "Create", "%s", e.Error())
		if k.collisionErr {
			errs = append(errs, e)
		}
	}
	for _, name := range p.foreign {
		foreign(name)
	}
	for _, o := range p.create {
		err := r.client.Create(ctx, o)
		if apierrors.IsAlreadyExists(err) {
			// Not in the cache: ours and not seen yet, or someone else's that the cache's label selector leaves out.
			got := k.newObj()
			if err := r.reader.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
				errs = append(errs, fmt.Errorf("read %s %s: %w", k.kind, o.GetName(), err))
			} else if !metav1.IsControlledBy(got, c) {
				foreign(o.GetName())
			}
			continue
		}
		if err != nil {
			run.Eventf(corev1.EventTypeWarning, k.failCreate, "Create", "failed to create %s %s: %v", k.kind, o.GetName(), err)
			errs = append(errs, fmt.Errorf("create %s %s: %w", k.kind, o.GetName(), err))
			continue
		}
		run.Eventf(corev1.EventTypeNormal, k.created, "Create", "created %s %s", k.kind, o.GetName())
	}
	for _, o := range p.update {
		if err := r.client.Update(ctx, o); err != nil {
			run.Eventf(corev1.EventTypeWarning, k.failUpdate, "Update", "failed to update %s %s: %v", k.kind, o.GetName(), err)
			errs = append(errs, fmt.Errorf("update %s %s: %w", k.kind, o.GetName(), err))
			continue
		}
		run.Eventf(corev1.EventTypeNormal, k.updated, "Update", "updated %s %s to match the spec", k.kind, o.GetName())
	}
	for _, o := range p.delete {
		uid := o.GetUID()
		if err := r.client.Delete(ctx, o, client.Preconditions{UID: &uid}); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			run.Eventf(corev1.EventTypeWarning, k.failDelete, "Delete", "failed to delete %s %s: %v", k.kind, o.GetName(), err)
			errs = append(errs, fmt.Errorf("delete %s %s: %w", k.kind, o.GetName(), err))
			continue
		}
		run.Eventf(corev1.EventTypeNormal, k.deleted, "Delete", "deleted %s %s: the cluster no longer asks for it", k.kind, o.GetName())
	}
	return errors.Join(errs...)
}
