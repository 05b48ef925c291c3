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
)

// autoscalerRBACRetry is when a cluster whose autoscaler RBAC was refused is looked at again: only its user can
// clear the refusal (by deleting or renaming the object), and nothing watches Roles.
const autoscalerRBACRetry = 30 * time.Second

// rbacChild is one of the objects the autoscaler's identity is made of, with how to bring an existing one of
// Manta's back to what Manta writes.
type rbacChild struct {
	desired, existing client.Object
	kind              string
	// mustOwn says an existing object must be controlled by the cluster: false only for a ServiceAccount the user
	// named, which is theirs to bring.
	mustOwn bool
	// sync copies onto existing what Manta writes there and says whether anything changed; replace says the
	// change cannot be made in place (a RoleBinding's roleRef is immutable).
	sync                                 func(existing client.Object) (changed, replace bool)
	created, failCreate, updated, failUp string
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
	role, rb := clusterbuild.AutoscalerRole(c), clusterbuild.AutoscalerRoleBinding(c)
	children := []rbacChild{
		{
			desired: clusterbuild.AutoscalerServiceAccount(c), existing: &corev1.ServiceAccount{}, kind: "ServiceAccount",
			mustOwn: clusterbuild.AutoscalerServiceAccountManaged(c),
			// Manta writes no field of a ServiceAccount beyond its metadata.
			sync:    func(client.Object) (bool, bool) { return false, false },
			created: EventCreatedServiceAccount, failCreate: EventFailedToCreateServiceAccount,
		},
		{
			desired: role, existing: &rbacv1.Role{}, kind: "Role", mustOwn: true,
			sync: func(o client.Object) (bool, bool) {
				got := o.(*rbacv1.Role)
				if equality.Semantic.DeepEqual(got.Rules, role.Rules) {
					return false, false
				}
				got.Rules = role.Rules
				return true, false
			},
			created: EventCreatedRole, failCreate: EventFailedToCreateRole, updated: EventUpdatedRole, failUp: EventFailedToUpdateRole,
		},
		{
			desired: rb, existing: &rbacv1.RoleBinding{}, kind: "RoleBinding", mustOwn: true,
			sync: func(o client.Object) (bool, bool) {
				got := o.(*rbacv1.RoleBinding)
				if got.RoleRef != rb.RoleRef {
					return true, true
				}
				if equality.Semantic.DeepEqual(got.Subjects, rb.Subjects) {
					return false, false
				}
				got.Subjects = rb.Subjects
				return true, false
			},
			created: EventCreatedRoleBinding, failCreate: EventFailedToCreateRoleBinding, updated: EventUpdatedRoleBinding, failUp: EventFailedToUpdateRoleBinding,
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
	c, name := run.c, x.desired.GetName()
	err := r.reader.Get(ctx, client.ObjectKeyFromObject(x.desired), x.existing)
	if apierrors.IsNotFound(err) {
		return r.createRBACChild(ctx, run, x)
	}
	if err != nil {
		return fmt.Errorf("read %s %s: %w", x.kind, name, err)
	}
	if !x.mustOwn {
		return nil
	}
	if !metav1.IsControlledBy(x.existing, c) {
		return &errNotOwned{x.kind, c.Namespace, name}
	}
	changed, replace := x.sync(x.existing)
	switch {
	case !changed:
		return nil
	case replace:
		uid := x.existing.GetUID()
		if err := r.client.Delete(ctx, x.existing, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			run.Eventf(corev1.EventTypeWarning, x.failUp, "Delete", "failed to delete the autoscaler's %s %s to recreate it: %v", x.kind, name, err)
			return fmt.Errorf("delete %s %s: %w", x.kind, name, err)
		}
		return r.createRBACChild(ctx, run, x)
	}
	if err := r.client.Update(ctx, x.existing); err != nil {
		run.Eventf(corev1.EventTypeWarning, x.failUp, "Update", "failed to restore the autoscaler's %s %s: %v", x.kind, name, err)
		return fmt.Errorf("update %s %s: %w", x.kind, name, err)
	}
	run.Eventf(corev1.EventTypeNormal, x.updated, "Update", "restored the autoscaler's %s %s: it had been changed", x.kind, name)
	return nil
}

// eventKind names a kind in an event's message as KubeRay's do.
var eventKind = map[string]string{"ServiceAccount": "service account", "Role": "role", "RoleBinding": "role binding"}

func (r *Reconciler) createRBACChild(ctx context.Context, run *run, x rbacChild) error {
	name := x.desired.GetName()
	if err := r.client.Create(ctx, x.desired); err != nil {
		// AlreadyExists too: someone made it since the read, and the next reconcile checks whose it is.
		run.Eventf(corev1.EventTypeWarning, x.failCreate, "Create", "Failed creating %s %s/%s, %v", eventKind[x.kind], x.desired.GetNamespace(), name, err)
		return fmt.Errorf("create %s %s: %w", x.kind, name, err)
	}
	run.Eventf(corev1.EventTypeNormal, x.created, "Create", "Created %s %s/%s", eventKind[x.kind], x.desired.GetNamespace(), name)
	log.FromContext(ctx).V(1).Info("created autoscaler RBAC object", "kind", x.kind, "name", name)
	return nil
}

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
