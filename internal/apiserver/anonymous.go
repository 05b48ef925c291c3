package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// --anonymous-as gives requests that carry no Authorization header (KubeRay's dashboard sends none, and a browser
// following a link to a Ray dashboard cannot add one) the identity of one named ServiceAccount. The server asks
// Kubernetes for a short-lived token of that ServiceAccount (TokenRequest) and then treats the request exactly as
// if the caller had sent that token: TokenReview names the caller, SubjectAccessReview and Kubernetes itself apply
// the ServiceAccount's RBAC, v2 requests reach Kubernetes with that token. Nobody gets more than the
// ServiceAccount may do; the server needs only `create serviceaccounts/token` on that one ServiceAccount. A request
// with a token that does not authenticate is still refused (401), never downgraded to the anonymous identity.

// anonymousTokenSeconds is the lifetime asked for the ServiceAccount's token; it is renewed at 4/5 of its life,
// so a revoked binding or a deleted ServiceAccount takes effect within that time at most (RBAC changes at once).
const anonymousTokenSeconds = 3600

// ParseAnonymousAs reads --anonymous-as: "<namespace>:<serviceaccount>", as kubectl's --serviceaccount.
func ParseAnonymousAs(v string) (namespace, name string, err error) {
	ns, sa, ok := strings.Cut(v, ":")
	if !ok || strings.Contains(sa, ":") {
		return "", "", fmt.Errorf("--anonymous-as %q: want <namespace>:<serviceaccount>, e.g. ray-ui:kuberay-dashboard", v)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", "", fmt.Errorf("--anonymous-as %q: namespace %q: %s", v, ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(sa); len(errs) > 0 {
		return "", "", fmt.Errorf("--anonymous-as %q: service account %q: %s", v, sa, strings.Join(errs, "; "))
	}
	return ns, sa, nil
}

// anonymousIdentity holds the ServiceAccount's current token.
type anonymousIdentity struct {
	c               client.Client
	namespace, name string

	mu      sync.Mutex
	tok     string
	renewAt time.Time
}

func (a *anonymousIdentity) String() string { return a.namespace + ":" + a.name }

// token returns a token of the ServiceAccount, asking Kubernetes for a new one when the current one is near its end.
func (a *anonymousIdentity) token(ctx context.Context) (string, *apiError) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tok != "" && time.Now().Before(a.renewAt) {
		return a.tok, nil
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: a.namespace, Name: a.name}}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](anonymousTokenSeconds)}}
	if err := a.c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", internalError(http.StatusServiceUnavailable, codeUnavailable, err,
			"requests without a token act as ServiceAccount %s (--anonymous-as), but no token could be had for it; see the server's log", a)
	}
	issued := time.Now()
	life := anonymousTokenSeconds * time.Second
	if exp := tr.Status.ExpirationTimestamp.Time; !exp.IsZero() && exp.Sub(issued) < life {
		life = exp.Sub(issued)
	}
	a.tok, a.renewAt = tr.Status.Token, issued.Add(life*4/5)
	return a.tok, nil
}
