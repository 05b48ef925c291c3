package testutil

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A pod created in a namespace whose default ServiceAccount kube-controller-manager has not made yet is looked up
// by kube-apiserver's ServiceAccount admission from etcd up to ten times before it is refused ("serviceaccount
// default not found"); on a loaded machine those lookups alone can outlast the create's 34 s deadline, and the
// create fails with a server timeout. A test creates its namespace with CreateNamespace (or waits with
// WaitForDefaultServiceAccount) before it creates anything that makes pods, as a user applies to a namespace that
// has been there for a while.

// CreateNamespace creates the namespace name and waits until its default ServiceAccount exists.
func CreateNamespace(ctx context.Context, cl client.Client, name string) error {
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		return err
	}
	return WaitForDefaultServiceAccount(ctx, func(ctx context.Context) error {
		return cl.Get(ctx, client.ObjectKey{Namespace: name, Name: "default"}, &corev1.ServiceAccount{})
	})
}

// CreateNamespaceWith is CreateNamespace through a clientset.
func CreateNamespaceWith(ctx context.Context, kc kubernetes.Interface, name string) error {
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	return WaitForDefaultServiceAccount(ctx, func(ctx context.Context) error {
		_, err := kc.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// WaitForDefaultServiceAccount calls get (a read of a namespace's default ServiceAccount) until it finds it, or
// ctx ends; an error other than NotFound ends the wait.
func WaitForDefaultServiceAccount(ctx context.Context, get func(context.Context) error) error {
	for {
		err := get(ctx)
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("waiting for the namespace's default ServiceAccount: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the namespace's default ServiceAccount: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
