package envtest

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/code"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/apiserver/apiservertest"
	"github.com/manta-dev/manta/internal/testutil"
)

// serviceAccountToken creates a ServiceAccount and returns a real token for it (TokenRequest).
func (e *testEnv) serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if err := e.k.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func (e *testEnv) grant(t *testing.T, ns, sa string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}, Rules: rules}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}
	if err := e.k.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := e.k.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
	e.waitRBAC(t, ns, sa, ns, rules...)
}

// waitRBAC waits until the authorizer applies a binding just created for ServiceAccount saNS/sa (it reads them
// from an informer), so the next request is not refused on a loaded machine.
func (e *testEnv) waitRBAC(t *testing.T, saNS, sa, ns string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitRBAC(t, context.Background(), cs, "system:serviceaccount:"+saNS+":"+sa, ns, rules...)
}

func (e *testEnv) testAuth(t *testing.T) {
	ns := e.Namespace(t)
	alice := e.serviceAccountToken(t, ns, "alice")
	bob := e.serviceAccountToken(t, ns, "bob")
	e.grant(t, ns, "alice",
		rbacv1.PolicyRule{APIGroups: []string{"ray.io"}, Resources: []string{"rayclusters"}, Verbs: []string{"get", "list", "create"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services/proxy"}, Verbs: []string{"get"}},
	)
	g := e.guarded.URL
	base := "/apis/v1/namespaces/" + ns

	// No token, a malformed header, a token Kubernetes does not know: 401 with a challenge.
	r := call(t, g, "GET", base+"/clusters", nil, "")
	mustFail(t, r, 401, code.Code_UNAUTHENTICATED, "")
	for _, tok := range []string{"not-a-token", alice[:len(alice)-4] + "AAAA"} {
		mustFail(t, call(t, g, "GET", base+"/clusters", nil, tok), 401, code.Code_UNAUTHENTICATED, "")
	}
	req, _ := http.NewRequest("GET", g+base+"/clusters", nil)
	req.Header.Set("Authorization", "Basic "+alice)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("basic auth: %d %q", res.StatusCode, res.Header.Get("WWW-Authenticate"))
	}

	// Allowed by RBAC.
	mustOK(t, call(t, g, "GET", base+"/clusters", nil, alice), nil)
	mustOK(t, call(t, g, "POST", base+"/compute_templates", apiservertest.Template(ns, "small"), alice), nil)
	mustOK(t, call(t, g, "GET", base+"/compute_templates/small", nil, alice), nil)
	mustOK(t, call(t, g, "POST", base+"/clusters", apiservertest.Cluster(ns, "mine"), alice), nil)
	mustOK(t, call(t, g, "GET", base+"/clusters/mine", nil, alice), nil)

	// Forbidden by RBAC: a verb the role lacks, another namespace, all namespaces, another resource.
	s := mustFail(t, call(t, g, "DELETE", base+"/clusters/mine", nil, alice), 403, code.Code_PERMISSION_DENIED, "")
	if !strings.Contains(s.Message, "delete rayclusters.ray.io") || !strings.Contains(s.Message, "system:serviceaccount:"+ns+":alice") {
		t.Errorf("403 message does not say what was denied: %s", s.Message)
	}
	mustFail(t, call(t, g, "GET", "/apis/v1/namespaces/default/clusters", nil, alice), 403, code.Code_PERMISSION_DENIED, "")
	mustFail(t, call(t, g, "GET", "/apis/v1/clusters", nil, alice), 403, code.Code_PERMISSION_DENIED, "")
	mustFail(t, call(t, g, "GET", base+"/jobs", nil, alice), 403, code.Code_PERMISSION_DENIED, "")
	mustFail(t, call(t, g, "POST", base+"/jobsubmissions/mine", apiserver.RayJobSubmission{Entrypoint: "echo"}, alice), 403, code.Code_PERMISSION_DENIED, "")
	mustFail(t, call(t, g, "GET", base+"/image_pull_jobs", nil, alice), 403, code.Code_PERMISSION_DENIED, "")
	// bob has no role at all.
	mustFail(t, call(t, g, "GET", base+"/clusters", nil, bob), 403, code.Code_PERMISSION_DENIED, "")
	mustFail(t, call(t, g, "POST", base+"/compute_templates", apiservertest.Template(ns, "other"), bob), 403, code.Code_PERMISSION_DENIED, "")
	// Authorisation happens before the body is read: a forbidden caller learns nothing from validation.
	mustFail(t, call(t, g, "POST", base+"/clusters", "{not json", bob), 403, code.Code_PERMISSION_DENIED, "")

	// Public endpoints need no token (/metrics does: TestSecurityREST/Metrics).
	for _, p := range []string{"/healthz", "/openapi.json"} {
		if r := call(t, g, "GET", p, nil, ""); r.code != 200 {
			t.Errorf("%s without token: %d", p, r.code)
		}
	}
	// Tokens never reach the logs.
	logs := e.logText()
	if !strings.Contains(logs, "system:serviceaccount:"+ns+":alice") {
		t.Errorf("request log lacks the caller:\n%s", logs)
	}
	for _, tok := range []string{alice, bob, alice[len(alice)-20:]} {
		if strings.Contains(logs, tok) {
			t.Fatal("a token appears in the request log")
		}
	}
}
