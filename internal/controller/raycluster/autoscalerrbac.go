package raycluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// autoscalerRBACRetry is when a cluster whose autoscaler RBAC was refused is looked at again: only its user can
// clear the refusal (by deleting or renaming the object), and nothing watches Roles.
const autoscalerRBACRetry = 30 * time.Second

// rbacChild is one of the objects the autoscaler's identity is made of: how it is written, and its events.
type rbacChild struct {
	write                                func(ctx context.Context, w reconcile.Writer, report reconcile.Report[client.Object]) (reconcile.Op, error)
	kind, name                           string
	created, failCreate, updated, failUp string
}

// rbacKind makes the write of the rbacChild desired. An existing object must be controlled by the cluster unless
// anyOwner (a ServiceAccount the user named, which is theirs to bring); a create that finds the name taken is a
// failed create, as KubeRay reports it, and the next reconcile reads whose it is. A child deleted because a field
// cannot change in place (a RoleBinding's roleRef) is created again at once.
func rbacKind[T client.Object](kind string, desired T, newObj func() T, anyOwner bool, sync func(existing, desired T) (T, bool, bool)) func(context.Context, reconcile.Writer, reconcile.Report[client.Object]) (reconcile.Op, error) {
	k := &reconcile.Owned[T]{
		Kind: kind, New: newObj, Sync: sync,
		RecreateNow: true, OnExists: reconcile.ExistsFail, AnyController: anyOwner,
	}
	return func(ctx context.Context, w reconcile.Writer, report reconcile.Report[client.Object]) (reconcile.Op, error) {
		_, op, err := reconcile.EnsureOwned(ctx, w, k, desired, func(op reconcile.Op, o T, err error) { report(op, o, err) })
		return op, err
	}
}

// errNotOwned is an object under a name the autoscaler needs that is not this cluster's.
type errNotOwned struct{ kind, namespace, name string }

func (e *errNotOwned) Error() string {
	return fmt.Sprintf("the autoscaler's %s %s/%s exists and is not controlled by this RayCluster: nothing is bound to it and the head pod waits; delete it or rename the cluster", e.kind, e.namespace, e.name)
}

// ensureAutoscalerRBAC makes the head's ServiceAccount, Role and RoleBinding what Manta writes. An existing object
// under one of those names is used only when it is this cluster's (its controller reference has the cluster's
// UID), and is brought back to Manta's rules, subjects and roleRef; anyone else's is refused, so that neither a
// Role a tenant prepared nor a ServiceAccount that happens to share the cluster's name is bound to the autoscaler.
// It runs only before a head pod is created, so a settled cluster costs no reads: the objects are read from the API
// server, not from a cache of every Role of the cluster.
func (r *Reconciler) ensureAutoscalerRBAC(ctx context.Context, run *run) error {
	c := run.c
	sa, role, rb := clusterbuild.AutoscalerServiceAccount(c), clusterbuild.AutoscalerRole(c), clusterbuild.AutoscalerRoleBinding(c)
	children := []rbacChild{
		{
			// Manta writes no field of a ServiceAccount beyond its metadata.
			write: rbacKind("ServiceAccount", sa, func() *corev1.ServiceAccount { return &corev1.ServiceAccount{} },
				!clusterbuild.AutoscalerServiceAccountManaged(c), nil),
			kind: "ServiceAccount", name: sa.Name, created: EventCreatedServiceAccount, failCreate: EventFailedToCreateServiceAccount,
		},
		{
			write: rbacKind("Role", role, func() *rbacv1.Role { return &rbacv1.Role{} }, false, func(got, want *rbacv1.Role) (*rbacv1.Role, bool, bool) {
				if equality.Semantic.DeepEqual(got.Rules, want.Rules) {
					return got, false, false
				}
				u := got.DeepCopy()
				u.Rules = want.Rules
				return u, true, false
			}),
			kind: "Role", name: role.Name, created: EventCreatedRole, failCreate: EventFailedToCreateRole, updated: EventUpdatedRole, failUp: EventFailedToUpdateRole,
		},
		{
			write: rbacKind("RoleBinding", rb, func() *rbacv1.RoleBinding { return &rbacv1.RoleBinding{} }, false, func(got, want *rbacv1.RoleBinding) (*rbacv1.RoleBinding, bool, bool) {
				if got.RoleRef != want.RoleRef {
					return got, true, true
				}
				if equality.Semantic.DeepEqual(got.Subjects, want.Subjects) {
					return got, false, false
				}
				u := got.DeepCopy()
				u.Subjects = want.Subjects
				return u, true, false
			}),
			kind: "RoleBinding", name: rb.Name, created: EventCreatedRoleBinding, failCreate: EventFailedToCreateRoleBinding, updated: EventUpdatedRoleBinding, failUp: EventFailedToUpdateRoleBinding,
		},
	}
	for _, x := range children {
		err := r.ensureRBACChild(ctx, run, x)
		if refused := (*errNotOwned)(nil); errors.As(err, &refused) {
			return r.refuseAutoscalerRBAC(ctx, run, refused)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *Reconciler) ensureRBACChild(ctx context.Context, run *run, x rbacChild) error {
	c := run.c
	// Read from the API server: the cache holds no Roles.
	w := reconcile.Writer{Client: r.client, Reader: r.reader, Owner: c}
	op, err := x.write(ctx, w, func(op reconcile.Op, o client.Object, err error) {
		switch {
		case op == reconcile.Created && err != nil:
			run.Eventf(corev1.EventTypeWarning, x.failCreate, "Create", "Failed creating %s %s/%s, %v", eventKind[x.kind], o.GetNamespace(), o.GetName(), err)
		case op == reconcile.Created:
			run.Eventf(corev1.EventTypeNormal, x.created, "Create", "Created %s %s/%s", eventKind[x.kind], o.GetNamespace(), o.GetName())
			log.FromContext(ctx).V(1).Info("created autoscaler RBAC object", "kind", x.kind, "name", o.GetName())
		case op == reconcile.Deleted && err != nil:
			run.Eventf(corev1.EventTypeWarning, x.failUp, "Delete", "failed to delete the autoscaler's %s %s to recreate it: %v", x.kind, o.GetName(), err)
		case op == reconcile.Updated && err != nil:
			run.Eventf(corev1.EventTypeWarning, x.failUp, "Update", "failed to restore the autoscaler's %s %s: %v", x.kind, o.GetName(), err)
		case op == reconcile.Updated:
			run.Eventf(corev1.EventTypeNormal, x.updated, "Update", "restored the autoscaler's %s %s: it had been changed", x.kind, o.GetName())
		}
	})
	if op == reconcile.Foreign {
		return &errNotOwned{x.kind, c.Namespace, x.name}
	}
	return err
}

// eventKind names a kind in an event's message as KubeRay's do.
var eventKind = map[string]string{"ServiceAccount": "service account", "Role": "role", "RoleBinding": "role binding"}

// refuseAutoscalerRBAC reports an object that is not the cluster's and takes back the cluster's own RoleBinding,
// which would otherwise bind the foreign Role, or the autoscaler's Role to a foreign ServiceAccount. The head pod
// waits (the caller records the failure), retried at autoscalerRBACRetry rather than the work queue's pace.
func (r *Reconciler) refuseAutoscalerRBAC(ctx context.Context, run *run, refused *errNotOwned) error {
	c := run.c
	if !conditionMessageIs(c, string(rayv1.RayClusterReplicaFailure), refused.Error()) {
		run.Eventf(corev1.EventTypeWarning, EventAutoscalerRBACNotOwned, "Create", "%s", refused.Error())
	}
	name, rb := clusterbuild.AutoscalerRoleName(c), &rbacv1.RoleBinding{}
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, rb)
	if err == nil && metav1.IsControlledBy(rb, c) {
		if err := r.client.Delete(ctx, rb, client.Preconditions{UID: &rb.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete RoleBinding %s: %w", name, err)
		}
		run.Eventf(corev1.EventTypeNormal, EventDeletedRoleBinding, "Delete", "deleted the autoscaler's RoleBinding %s: %s %s is not this cluster's", name, refused.kind, refused.name)
	} else if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read RoleBinding %s: %w", name, err)
	}
	run.Requeue(autoscalerRBACRetry)
	return &backedOff{refused}
}
