package testutil

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// WaitRBAC waits until the API server's authorizer allows user everything the rules grant (in namespace ns; ""
// for a ClusterRoleBinding). The RBAC authorizer reads Roles and bindings from an informer, so a binding just
// created may not apply yet to the next request: a test that binds a role and then acts as the subject must wait
// here first, or it sees a 403 now and then on a loaded machine.
func WaitRBAC(t testing.TB, ctx context.Context, kc kubernetes.Interface, user, ns string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for _, r := range rules {
		attrs := ruleAttributes(r, ns)
		for _, a := range attrs {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user}}
			sar.Spec.ResourceAttributes, sar.Spec.NonResourceAttributes = a.res, a.nonRes
			for {
				got, err := kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
				if err == nil && got.Status.Allowed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("RBAC: %s still not allowed %s after 2m: %v %+v", user, a, err, got)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
}

type sarAttrs struct {
	res    *authorizationv1.ResourceAttributes
	nonRes *authorizationv1.NonResourceAttributes
}

func (a sarAttrs) String() string {
	if a.nonRes != nil {
		return fmt.Sprintf("%s %s", a.nonRes.Verb, a.nonRes.Path)
	}
	return fmt.Sprintf("%s %s/%s %s.%s", a.res.Verb, a.res.Resource, a.res.Subresource, a.res.Name, a.res.Group)
}

// ruleAttributes returns one request per verb of the rule, on its first group, resource and name.
func ruleAttributes(r rbacv1.PolicyRule, ns string) []sarAttrs {
	var out []sarAttrs
	for _, verb := range r.Verbs {
		if len(r.NonResourceURLs) > 0 {
			out = append(out, sarAttrs{nonRes: &authorizationv1.NonResourceAttributes{Verb: verb, Path: strings.TrimSuffix(r.NonResourceURLs[0], "*")}})
			continue
		}
		if len(r.APIGroups) == 0 || len(r.Resources) == 0 {
			continue
		}
		res, sub, _ := strings.Cut(r.Resources[0], "/")
		a := &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: r.APIGroups[0], Resource: res, Subresource: sub}
		if len(r.ResourceNames) > 0 {
			a.Name = r.ResourceNames[0]
		}
		out = append(out, sarAttrs{res: a})
	}
	return out
}
