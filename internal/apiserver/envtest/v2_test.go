package envtest

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/code"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// testV2 drives the v2 resource API as ServiceAccounts: one that RBAC allows to manage RayClusters in its
// namespace and one that it does not. Kubernetes itself authorises and admits every request, with the caller's
// own token, so what RBAC and the CRD's CEL rules say is what the caller gets.
func (e *testEnv) testV2(t *testing.T) {
	ns := e.Namespace(t)
	rule := rbacv1.PolicyRule{APIGroups: []string{"ray.io"}, Resources: []string{"rayclusters"}, Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}
	events := rbacv1.PolicyRule{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"list"}}
	allowed := e.serviceAccountToken(t, ns, "v2-allowed")
	denied := e.serviceAccountToken(t, ns, "v2-denied")
	e.grant(t, ns, "v2-allowed", rule, events)
	g := e.guarded.URL
	coll := "/apis/ray.io/v1/namespaces/" + ns + "/rayclusters"

	rc := testutil.MakeRayCluster(ns, "v2").Obj()
	rc.APIVersion, rc.Kind = "ray.io/v1", "RayCluster"
	// KubeRay's clients send the raw token; Bearer works too.
	raw := func(tok string) http.Header { return http.Header{"Authorization": {tok}} }

	r := callWith(t, g, "POST", coll, rc, raw(allowed))
	if r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	var created rayv1.RayCluster
	r.decode(t, &created)
	if created.UID == "" || created.Spec.HeadGroupSpec.Template.Spec.Containers[0].Name != "ray-head" {
		t.Errorf("created: %+v", created.ObjectMeta)
	}
	// The object is Kubernetes' own: the same through the REST API as through the Kubernetes client.
	var stored rayv1.RayCluster
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "v2"}, &stored); err != nil {
		t.Fatal(err)
	}
	if stored.UID != created.UID {
		t.Errorf("uid %s, stored %s", created.UID, stored.UID)
	}
	r = call(t, g, "GET", coll+"/v2", nil, allowed)
	mustOK(t, r, nil)
	var list rayv1.RayClusterList
	mustOK(t, call(t, g, "GET", coll+"?limit=10", nil, allowed), &list)
	if len(list.Items) != 1 || list.Items[0].Name != "v2" {
		t.Errorf("list: %+v", list.Items)
	}
	patch := `{"metadata":{"labels":{"team":"ml"}}}`
	r = callWith(t, g, "PATCH", coll+"/v2", patch, http.Header{"Authorization": {"Bearer " + allowed}, "Content-Type": {"application/merge-patch+json"}})
	var patched rayv1.RayCluster
	mustOK(t, r, &patched)
	if patched.Labels["team"] != "ml" {
		t.Errorf("patched labels: %v", patched.Labels)
	}
	// Unknown fields get Kubernetes' own field validation, passed on.
	r = callWith(t, g, "PATCH", coll+"/v2?fieldValidation=Warn", `{"spec":{"colour":"red"}}`, http.Header{"Authorization": {allowed}, "Content-Type": {"application/merge-patch+json"}})
	mustOK(t, r, nil)
	if w := strings.Join(r.header.Values("Warning"), ";"); !strings.Contains(w, `unknown field \"spec.colour\"`) {
		t.Errorf("Kubernetes' warning not passed on: %q", w)
	}

	// A CEL rule of the CRD refuses the object: Kubernetes' 422 naming the field comes back.
	bad := testutil.MakeRayCluster(ns, "v2-bad").Obj()
	bad.APIVersion, bad.Kind = "ray.io/v1", "RayCluster"
	bad.Spec.ManagedBy = ptr.To("someone-else")
	r = callWith(t, g, "POST", coll, bad, raw(allowed))
	if r.code != http.StatusUnprocessableEntity {
		t.Fatalf("CEL refusal: %d %s", r.code, r.body)
	}
	var st metav1.Status
	r.decode(t, &st)
	if st.Details == nil || len(st.Details.Causes) == 0 || st.Details.Causes[0].Field != "spec.managedBy" {
		t.Errorf("422 does not name spec.managedBy: %s", r.body)
	}

	// The ServiceAccount RBAC does not allow: Kubernetes' 403, for every verb.
	for _, req := range []struct{ method, path string }{{"GET", coll}, {"GET", coll + "/v2"}, {"POST", coll}, {"DELETE", coll + "/v2"}} {
		var body any
		if req.method == "POST" {
			body = rc
		}
		r := call(t, g, req.method, req.path, body, denied)
		if r.code != http.StatusForbidden {
			t.Errorf("%s %s as v2-denied: %d %s", req.method, req.path, r.code, r.body)
			continue
		}
		r.decode(t, &st)
		if st.Reason != metav1.StatusReasonForbidden || !strings.Contains(st.Message, "v2-denied") {
			t.Errorf("403 body: %s", r.body)
		}
	}
	// Another namespace is another RBAC decision.
	r = call(t, g, "GET", "/apis/ray.io/v1/namespaces/default/rayclusters", nil, allowed)
	if r.code != http.StatusForbidden {
		t.Errorf("other namespace: %d", r.code)
	}

	// Events: only those about ray.io/v1 objects, read with the caller's identity.
	for i, ref := range []corev1.ObjectReference{
		{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "v2", Namespace: ns},
		{APIVersion: "v1", Kind: "Pod", Name: "p", Namespace: ns},
	} {
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ev" + strconv.Itoa(i), Namespace: ns}, InvolvedObject: ref, Reason: "R", Type: "Normal"}
		if err := e.k.Create(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	var el corev1.EventList
	mustOK(t, call(t, g, "GET", "/api/v1/namespaces/"+ns+"/events", nil, allowed), &el)
	if len(el.Items) != 1 || el.Items[0].InvolvedObject.Kind != "RayCluster" {
		t.Errorf("events: %+v", el.Items)
	}
	if r := call(t, g, "GET", "/api/v1/namespaces/"+ns+"/events", nil, denied); r.code != http.StatusForbidden {
		t.Errorf("events as v2-denied: %d", r.code)
	}
	// KubeRay v1.7's path: events.k8s.io/v1, narrowed the same way, ANDed with the caller's own field selector.
	newEvents := "/apis/events.k8s.io/v1/namespaces/" + ns + "/events"
	var el2 eventsv1.EventList
	mustOK(t, call(t, g, "GET", newEvents, nil, allowed), &el2)
	if len(el2.Items) != 1 || el2.Items[0].Regarding.Kind != "RayCluster" || el2.Items[0].APIVersion != "" && el2.Items[0].APIVersion != "events.k8s.io/v1" {
		t.Errorf("events.k8s.io events: %+v", el2.Items)
	}
	mustOK(t, call(t, g, "GET", newEvents+"?fieldSelector=reason%3DOther", nil, allowed), &el2)
	if len(el2.Items) != 0 {
		t.Errorf("the caller's field selector was dropped: %+v", el2.Items)
	}
	if r := call(t, g, "GET", newEvents, nil, denied); r.code != http.StatusForbidden {
		t.Errorf("events.k8s.io events as v2-denied: %d", r.code)
	}
	mustFail(t, call(t, g, "GET", newEvents, nil, ""), 401, code.Code_UNAUTHENTICATED, "")

	// What this server refuses itself is a JSON error as in v1.
	mustFail(t, call(t, g, "GET", coll, nil, ""), 401, code.Code_UNAUTHENTICATED, "")
	mustFail(t, call(t, g, "GET", coll+"?watch=true&timeoutSeconds=-1", nil, allowed), 400, code.Code_INVALID_ARGUMENT, "timeoutSeconds")
	mustFail(t, call(t, g, "GET", coll+"/Bad_Name", nil, allowed), 400, code.Code_INVALID_ARGUMENT, "name")
	mustFail(t, call(t, g, "POST", coll+"/v2", rc, allowed), 405, code.Code_UNIMPLEMENTED, "")
	// Impersonation headers are not forwarded: the caller stays the caller.
	r = callWith(t, g, "GET", coll, nil, http.Header{"Authorization": {denied}, "Impersonate-User": {"system:serviceaccount:" + ns + ":v2-allowed"}})
	if r.code != http.StatusForbidden {
		t.Errorf("impersonation header honoured: %d %s", r.code, r.body)
	}

	// Under auth mode none the server's own identity is used, as for v1.
	mustOK(t, call(t, e.open.URL, "GET", coll+"/v2", nil, ""), nil)
	// Metrics and logs name the v2 operations like v1's.
	if m := string(call(t, g, "GET", "/metrics", nil, e.metricsToken(t, ns)).body); !strings.Contains(m, `manta_apiserver_requests_total{code="201",operation="V2CreateRayCluster"}`) ||
		!strings.Contains(m, `manta_apiserver_requests_total{code="403",operation="V2ListRayClusters"}`) {
		t.Errorf("metrics lack the v2 operations")
	}

	r = call(t, g, "DELETE", coll+"/v2", nil, allowed)
	mustOK(t, r, nil)
	var gone metav1.Status
	if err := json.Unmarshal(r.body, &gone); err != nil || gone.Status != metav1.StatusSuccess || gone.Details == nil || gone.Details.Name != "v2" {
		t.Errorf("delete answer: %s", r.body)
	}
	if r := call(t, g, "GET", coll+"/v2", nil, allowed); r.code != http.StatusNotFound {
		t.Errorf("after delete: %d", r.code)
	}
}
