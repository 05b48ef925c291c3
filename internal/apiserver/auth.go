package apiserver

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AuthMode chooses how callers are authenticated and authorised.
type AuthMode string

const (
	// AuthKubernetes authenticates bearer tokens with TokenReview and authorises with SubjectAccessReview.
	AuthKubernetes AuthMode = "kubernetes"
	// AuthNone lets every caller do everything the server's own identity may do. Only for loopback development.
	AuthNone AuthMode = "none"
)

// userInfo is an authenticated caller.
type userInfo struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string]authzv1.ExtraValue
}

// access is one Kubernetes permission an operation needs: on a resource, or with Path set on a non-resource URL.
type access struct {
	Group, Resource, Subresource, Verb, Namespace, Name string
	Path                                                string
}

func (a access) String() string {
	if a.Path != "" {
		return fmt.Sprintf("%s %s", a.Verb, a.Path)
	}
	r := a.Resource
	if a.Group != "" {
		r += "." + a.Group
	}
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	where := "in all namespaces"
	if a.Namespace != "" {
		where = fmt.Sprintf("in namespace %q", a.Namespace)
	}
	if a.Name != "" {
		return fmt.Sprintf("%s %s %q %s", a.Verb, r, a.Name, where)
	}
	return fmt.Sprintf("%s %s %s", a.Verb, r, where)
}

// cacheTTL bounds how long a token review or access decision is reused; short, so revoked tokens and RBAC
// changes take effect quickly, long enough that a burst of requests costs one review.
const cacheTTL = 10 * time.Second

const cacheMax = 4096

type ttlCache[V any] struct {
	mu sync.Mutex
	m  map[string]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v   V
	exp time.Time
}

func (c *ttlCache[V]) get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || time.Now().After(e.exp) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *ttlCache[V]) put(k string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= cacheMax {
		c.m = map[string]ttlEntry[V]{}
	}
	c.m[k] = ttlEntry[V]{v: v, exp: time.Now().Add(cacheTTL)}
}

// kubeAuth authenticates and authorises through the Kubernetes API server.
type kubeAuth struct {
	c client.Client
	// anonymous, when set, is who requests without an Authorization header are (--anonymous-as).
	anonymous *anonymousIdentity
	tokens    ttlCache[*userInfo]
	allows    ttlCache[bool]
}

// bearerToken reads the caller's token from "Authorization: Bearer <token>" or, as KubeRay's clients send it,
// "Authorization: <token>". Any other scheme (Basic, ...) is not a token.
func bearerToken(r *http.Request) (string, bool) {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok {
		return h, h != ""
	}
	if !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// authenticate returns the caller and the token that names them (to forward to Kubernetes), or a 401. Outside this
// function and the request it serves, the token is only ever held as its hash.
func (k *kubeAuth) authenticate(ctx context.Context, r *http.Request) (*userInfo, string, *apiError) {
	tok, ok := bearerToken(r)
	if !ok && r.Header.Get("Authorization") == "" {
		tok, ok = consoleCookieToken(r)
	}
	if !ok && k.anonymous != nil && r.Header.Get("Authorization") == "" {
		var e *apiError
		if tok, e = k.anonymous.token(ctx); e != nil {
			return nil, "", e
		}
		ok = true
	}
	if !ok {
		return nil, "", newError(http.StatusUnauthorized, codeUnauthenticated, "a Kubernetes bearer token is required: send \"Authorization: Bearer <token>\" (or \"Authorization: <token>\")")
	}
	sum := sha256.Sum256([]byte(tok))
	key := string(sum[:])
	if u, ok := k.tokens.get(key); ok {
		if u == nil {
			return nil, "", newError(http.StatusUnauthorized, codeUnauthenticated, "the bearer token is not valid")
		}
		return u, tok, nil
	}
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: tok}}
	if err := k.c.Create(ctx, tr); err != nil {
		return nil, "", internalError(http.StatusServiceUnavailable, codeUnavailable, err, "could not review the token with Kubernetes, retry later")
	}
	if !tr.Status.Authenticated {
		k.tokens.put(key, nil)
		return nil, "", newError(http.StatusUnauthorized, codeUnauthenticated, "the bearer token is not valid")
	}
	u := &userInfo{Name: tr.Status.User.Username, UID: tr.Status.User.UID, Groups: tr.Status.User.Groups}
	if len(tr.Status.User.Extra) > 0 {
		u.Extra = map[string]authzv1.ExtraValue{}
		for k, v := range tr.Status.User.Extra {
			u.Extra[k] = authzv1.ExtraValue(v)
		}
	}
	k.tokens.put(key, u)
	return u, tok, nil
}

// authorize checks every access with a SubjectAccessReview and answers 403 naming the first one denied.
func (k *kubeAuth) authorize(ctx context.Context, u *userInfo, need []access) *apiError {
	for _, a := range need {
		key := fmt.Sprintf("%s\x00%s\x00%v\x00%v\x00%+v", u.Name, u.UID, u.Groups, u.Extra, a)
		allowed, ok := k.allows.get(key)
		if !ok {
			sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
				User: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra,
			}}
			if a.Path != "" {
				sar.Spec.NonResourceAttributes = &authzv1.NonResourceAttributes{Path: a.Path, Verb: a.Verb}
			} else {
				sar.Spec.ResourceAttributes = &authzv1.ResourceAttributes{
					Namespace: a.Namespace, Verb: a.Verb, Group: a.Group, Resource: a.Resource,
					Subresource: a.Subresource, Name: a.Name,
				}
			}
			if err := k.c.Create(ctx, sar); err != nil {
				return internalError(http.StatusServiceUnavailable, codeUnavailable, err, "could not check access with Kubernetes, retry later")
			}
			allowed = sar.Status.Allowed && !sar.Status.Denied
			k.allows.put(key, allowed)
		}
		if !allowed {
			return newError(http.StatusForbidden, codePermissionDenied, "user %q may not %s", u.Name, a)
		}
	}
	return nil
}
