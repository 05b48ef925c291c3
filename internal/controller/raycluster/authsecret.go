package raycluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// EventFailedToCreateAuthSecret reports that the cluster's Ray auth token Secret could not be created.
const EventFailedToCreateAuthSecret = "FailedToCreateAuthSecret"

// ensureAuthSecret creates the Secret holding the cluster's Ray auth token when authOptions asks for one and it
// does not exist, before any pod refers to it. An existing Secret of that name is used as it is, as KubeRay does:
// the namespace's users can read and write Secrets there anyway, and replacing a token would lock out the Ray
// processes started with it. Read past the cache, so the operator needs no list or watch on Secrets.
func (r *Reconciler) ensureAuthSecret(ctx context.Context, run *run) error {
	c := run.c
	if !clusterbuild.AuthSecretWanted(c) {
		return nil
	}
	name := clusterbuild.AuthSecretName(c)
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, &corev1.Secret{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("read ray auth token secret %s: %w", name, err)
	}
	sec, err := clusterbuild.AuthSecret(c)
	if err != nil {
		return fmt.Errorf("generate ray auth token: %w", err)
	}
	// Planned against the read above, so that a token is generated only for a Secret to create.
	w := reconcile.Writer{Client: r.client, Owner: c}
	_, _, err = reconcile.WriteOwned(ctx, w, &authSecretKind, reconcile.PlanOwned(c, &authSecretKind, sec, nil), func(op reconcile.Op, _ *corev1.Secret, err error) {
		switch {
		case op == reconcile.Created && err != nil:
			run.Eventf(corev1.EventTypeWarning, EventFailedToCreateAuthSecret, "Create", "failed to create the Ray auth token Secret %s: %v", name, err)
		case op == reconcile.Created:
			log.FromContext(ctx).V(1).Info("created ray auth token secret", "name", name)
		}
	})
	return err
}

// authSecretKind writes the auth token Secret: created once, never changed; a create that finds it made meanwhile
// is as good.
var authSecretKind = reconcile.Owned[*corev1.Secret]{
	Kind: "ray auth token secret", New: func() *corev1.Secret { return &corev1.Secret{} }, AnyController: true,
}
