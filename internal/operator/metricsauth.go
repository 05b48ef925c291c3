package operator

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The metrics endpoint's check is controller-runtime's filters.WithAuthenticationAndAuthorization, done with
// client-go: that filter brings k8s.io/apiserver (and with it cel-go, gRPC and OpenTelemetry) into the binary for
// two API calls. Like it, a scrape is allowed when Kubernetes authenticates its bearer token (TokenReview) and
// authorises that user for the request's verb on the non-resource URL it asks for (SubjectAccessReview): the
// ClusterRole manta-metrics-reader grants get on /metrics.

// metricsAuthTTL bounds how long a decision is reused. Prometheus scrapes every 30 s with the same token, so a
// minute saves the API server two calls a scrape; a revoked token or binding stops working within it.
const metricsAuthTTL = time.Minute

// metricsAuthMax bounds the decisions kept (each distinct token and path adds one); a full cache starts over.
const metricsAuthMax = 256

// metricsAuthTimeout bounds each TokenReview and SubjectAccessReview.
const metricsAuthTimeout = 10 * time.Second

// metricsAuthFilter is a metricsserver.Options.FilterProvider.
func metricsAuthFilter(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	kc, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication client: %w", err)
	}
	a := &metricsAuth{kc: kc, cache: map[metricsAuthKey]metricsDecision{}, now: time.Now}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			code, msg := a.check(r)
			if code != http.StatusOK {
				log.V(4).Info("metrics request refused", "code", code, "reason", msg)
				http.Error(w, msg, code)
				return
			}
			next.ServeHTTP(w, r)
		}), nil
	}, nil
}

type metricsAuthKey struct{ token, verb, path string }

type metricsDecision struct {
	code int
	msg  string
	exp  time.Time
}

type metricsAuth struct {
	kc    kubernetes.Interface
	now   func() time.Time
	mu    sync.Mutex
	cache map[metricsAuthKey]metricsDecision
}

// check returns 200, or the status and message to refuse the request with: 401 without a token Kubernetes
// accepts, 403 when its user may not read the path, 500 when Kubernetes could not be asked (not cached).
func (a *metricsAuth) check(r *http.Request) (int, string) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		return http.StatusUnauthorized, "Unauthorized: a bearer token is required"
	}
	k := metricsAuthKey{token: token, verb: strings.ToLower(r.Method), path: r.URL.Path}
	a.mu.Lock()
	d, hit := a.cache[k]
	a.mu.Unlock()
	if hit && a.now().Before(d.exp) {
		return d.code, d.msg
	}
	ctx, cancel := context.WithTimeout(r.Context(), metricsAuthTimeout)
	defer cancel()
	code, msg, err := a.review(ctx, k)
	if err != nil {
		return http.StatusInternalServerError, "could not check the request with Kubernetes: " + err.Error()
	}
	a.mu.Lock()
	if len(a.cache) >= metricsAuthMax {
		clear(a.cache)
	}
	a.cache[k] = metricsDecision{code: code, msg: msg, exp: a.now().Add(metricsAuthTTL)}
	a.mu.Unlock()
	return code, msg
}

func (a *metricsAuth) review(ctx context.Context, k metricsAuthKey) (int, string, error) {
	tr, err := a.kc.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: k.token}}, metav1.CreateOptions{})
	if err != nil {
		return 0, "", fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized, "Unauthorized", nil
	}
	u := tr.Status.User
	extra := make(map[string]authorizationv1.ExtraValue, len(u.Extra))
	for key, v := range u.Extra {
		extra[key] = authorizationv1.ExtraValue(v)
	}
	sar, err := a.kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: k.path, Verb: k.verb},
		}}, metav1.CreateOptions{})
	if err != nil {
		return 0, "", fmt.Errorf("subject access review: %w", err)
	}
	if !sar.Status.Allowed {
		return http.StatusForbidden, fmt.Sprintf("Forbidden: user %s may not %s %s", u.Username, k.verb, k.path), nil
	}
	return http.StatusOK, "", nil
}
