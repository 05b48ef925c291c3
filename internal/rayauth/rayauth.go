// Package rayauth reads a RayCluster's Ray auth token (spec.authOptions) for the callers of its dashboard: the
// operator's controllers and the REST API server's job-submission proxy.
package rayauth

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/ray"
)

// Token is the token c's dashboard wants in x-ray-authorization, read from the cluster's Secret
// (clusterbuild.AuthSecretName), or "" when the cluster does not use token authentication. With enableK8sTokenAuth
// Ray checks Kubernetes ServiceAccount tokens and there is no shared one: "" too (only standalone RayClusters may
// use it, and the operator calls no dashboard for those). r should read past the cache: nothing else makes the
// operator watch Secrets, and one read by name needs only "get".
func Token(ctx context.Context, r client.Reader, c *rayv1.RayCluster) (string, error) {
	if !clusterbuild.AuthEnabled(&c.Spec) || clusterbuild.K8sTokenAuth(&c.Spec) {
		return "", nil
	}
	name := clusterbuild.AuthSecretName(c)
	var sec corev1.Secret
	if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, &sec); err != nil {
		return "", fmt.Errorf("ray auth token secret %q (spec.authOptions): %w", name, err)
	}
	tok := sec.Data[clusterbuild.AuthTokenSecretKey]
	if len(tok) == 0 {
		return "", fmt.Errorf("ray auth token secret %q (spec.authOptions) has no %q key", name, clusterbuild.AuthTokenSecretKey)
	}
	return string(tok), nil
}

// Dashboard is f's client of c's dashboard at t, carrying c's token (Token) when it uses one.
func Dashboard(ctx context.Context, r client.Reader, f ray.ClientFactory, c *rayv1.RayCluster, t ray.Target) (ray.Dashboard, error) {
	var err error
	if t.AuthToken, err = Token(ctx, r, c); err != nil {
		return nil, err
	}
	return f.DashboardFor(t)
}
