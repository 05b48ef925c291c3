package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DevUser is the ServiceAccount `manta dev` creates so people can call the API with a real token:
// `kubectl create token manta-dev-user`. The dev cluster's admin kubeconfig holds a static token, which is not a
// good thing to pass around; a ServiceAccount token is short-lived and goes through the same TokenReview and
// SubjectAccessReview path as production callers.
const (
	DevUser          = "manta-dev-user"
	DevUserNamespace = "default"
)

// EnsureDevUser creates the DevUser ServiceAccount bound to cluster-admin, if missing.
func EnsureDevUser(ctx context.Context, cfg *rest.Config) error {
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DevUser, Namespace: DevUserNamespace}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service account %s: %w", DevUser, err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: DevUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: DevUser, Namespace: DevUserNamespace}},
	}
	if err := c.Create(ctx, crb); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create cluster role binding %s: %w", DevUser, err)
	}
	return nil
}
