package envtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// wideRules are what a tenant would like the autoscaler's ServiceAccount to hold.
var wideRules = []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}

// TestSecurityAutoscalerRBAC: the autoscaler's RBAC never binds a Role or ServiceAccount that is not the cluster's,
// never binds the namespace's default ServiceAccount, and brings its own objects back when they were edited.
func TestSecurityAutoscalerRBAC(t *testing.T) {
	e := startEnv(t)
	for name, fn := range map[string]func(*testing.T, *env){
		"ForeignRoleNotBound":           testForeignRoleNotBound,
		"ForeignServiceAccountNotBound": testForeignServiceAccountNotBound,
		"DefaultServiceAccountRefused":  testDefaultServiceAccountRefused,
		"OwnServiceAccount":             testOwnServiceAccount,
		"OwnedRoleRestored":             testOwnedRoleRestored,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, e)
		})
	}
}

// A tenant pre-creates the Role under the name Manta gives the autoscaler's, with wide rules and no owner.
func testForeignRoleNotBound(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Autoscaling().Obj()
	roleName := clusterbuild.AutoscalerRoleName(rc)
	e.Create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: roleName}, Rules: wideRules})
	e.Create(t, rc)

	ev := waitEventNaming(t, e, ns, raycluster.EventAutoscalerRBACNotOwned, "Role "+ns+"/"+roleName)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("event type %s, want Warning", ev.Type)
	}
	e.Eventually(t, "ReplicaFailure naming the Role", func() (bool, string) {
		c := meta.FindStatusCondition(testutil.Get(t, e.Env, rc).Status.Conditions, string(rayv1.RayClusterReplicaFailure))
		return c != nil && strings.Contains(c.Message, "Role "+ns+"/"+roleName), fmt.Sprintf("%+v", c)
	})
	assertNotBound(t, e, ns, roleName, clusterbuild.AutoscalerServiceAccountName(rc))
	if n := len(e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeHead)); n != 0 {
		t.Errorf("%d head pods: the head must wait while its autoscaler has no Role", n)
	}
	role := &rbacv1.Role{}
	if err := e.cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: roleName}, role); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(role.Rules, wideRules) || len(role.OwnerReferences) != 0 {
		t.Errorf("the tenant's Role was changed: %+v", role)
	}

	// Once the tenant's Role is gone, the cluster gets its own and starts.
	if err := e.cl.Delete(context.Background(), role); err != nil {
		t.Fatal(err)
	}
	e.waitPods(t, rc, 2)
	assertOwnRBAC(t, e, rc)
}

// A ServiceAccount named like the cluster exists and is someone else's: the head does not run as it, nothing binds it.
func testForeignServiceAccountNotBound(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Autoscaling().Obj()
	saName := clusterbuild.AutoscalerServiceAccountName(rc)
	e.Create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: saName}})
	e.Create(t, rc)

	waitEventNaming(t, e, ns, raycluster.EventAutoscalerRBACNotOwned, "ServiceAccount "+ns+"/"+saName)
	assertNotBound(t, e, ns, "", saName)
	if n := len(e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeHead)); n != 0 {
		t.Errorf("%d head pods: the head must not run as another's ServiceAccount", n)
	}
}

// serviceAccountName: default would give the autoscaler's Role to every pod of the namespace that names none.
func testDefaultServiceAccountRefused(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Autoscaling().Obj()
	rc.Spec.HeadGroupSpec.Template.Spec.ServiceAccountName = "default"
	e.Create(t, rc)

	waitEventNaming(t, e, ns, raycluster.ConditionInvalidSpec, "serviceAccountName")
	c := meta.FindStatusCondition(testutil.Get(t, e.Env, rc).Status.Conditions, raycluster.ConditionInvalidSpec)
	if c == nil || !strings.HasPrefix(c.Message, "spec.headGroupSpec.template.spec.serviceAccountName: ") {
		t.Errorf("InvalidRayClusterSpec condition: %+v", c)
	}
	assertNotBound(t, e, ns, "", "default")
	if n := len(e.pods(t, rc)); n != 0 {
		t.Errorf("%d pods created for a refused cluster", n)
	}
}

// With no serviceAccountName the head runs as a ServiceAccount of the cluster's own, and default is never a subject.
func testOwnServiceAccount(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Autoscaling().Obj()
	e.Create(t, rc)
	e.waitPods(t, rc, 2)
	head := e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeHead)[0]
	if head.Spec.ServiceAccountName != "rc" {
		t.Errorf("head runs as %q, want the cluster's own ServiceAccount rc", head.Spec.ServiceAccountName)
	}
	assertOwnRBAC(t, e, rc)
	assertNotBound(t, e, ns, "", "default")
}

// The cluster's own Role and RoleBinding, edited, are brought back before a new head (and autoscaler) starts.
func testOwnedRoleRestored(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Autoscaling().Obj()
	e.Create(t, rc)
	e.waitPods(t, rc, 2)
	key := types.NamespacedName{Namespace: ns, Name: clusterbuild.AutoscalerRoleName(rc)}
	role, rb := &rbacv1.Role{}, &rbacv1.RoleBinding{}
	if err := e.cl.Get(context.Background(), key, role); err != nil {
		t.Fatal(err)
	}
	role.Rules = wideRules
	if err := e.cl.Update(context.Background(), role); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Get(context.Background(), key, rb); err != nil {
		t.Fatal(err)
	}
	rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns})
	if err := e.cl.Update(context.Background(), rb); err != nil {
		t.Fatal(err)
	}
	head := e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeHead)[0]
	if err := e.cl.Delete(context.Background(), &head); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "new head pod", func() (bool, string) {
		heads := e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeHead)
		return len(heads) == 1 && heads[0].UID != head.UID, fmt.Sprintf("%d heads", len(heads))
	})
	// The head is created only after the RBAC is what Manta writes.
	assertOwnRBAC(t, e, rc)
	waitEvent(t, e, ns, raycluster.EventUpdatedRole)
	waitEvent(t, e, ns, raycluster.EventUpdatedRoleBinding)
}

// assertOwnRBAC checks the autoscaler's ServiceAccount, Role and RoleBinding are the cluster's and what Manta writes.
func assertOwnRBAC(t *testing.T, e *env, rc *rayv1.RayCluster) {
	t.Helper()
	c := testutil.Get(t, e.Env, rc)
	ctx := context.Background()
	sa, role, rb := &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}
	for o, name := range map[client.Object]string{sa: clusterbuild.AutoscalerServiceAccountName(c), role: clusterbuild.AutoscalerRoleName(c), rb: clusterbuild.AutoscalerRoleName(c)} {
		if err := e.cl.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, o); err != nil {
			t.Fatalf("%T %s: %v", o, name, err)
		}
		if !metav1.IsControlledBy(o, c) {
			t.Errorf("%T %s is not controlled by the cluster: %+v", o, name, o.GetOwnerReferences())
		}
	}
	want := clusterbuild.AutoscalerRoleBinding(c)
	if !equality.Semantic.DeepEqual(role.Rules, clusterbuild.AutoscalerRole(c).Rules) {
		t.Errorf("Role rules %+v", role.Rules)
	}
	if !equality.Semantic.DeepEqual(rb.Subjects, want.Subjects) || rb.RoleRef != want.RoleRef {
		t.Errorf("RoleBinding subjects %+v roleRef %+v", rb.Subjects, rb.RoleRef)
	}
}

// assertNotBound checks no RoleBinding of the namespace binds role (any Role when "") to the ServiceAccount sa.
func assertNotBound(t *testing.T, e *env, ns, role, sa string) {
	t.Helper()
	list := &rbacv1.RoleBindingList{}
	if err := e.cl.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, rb := range list.Items {
		if role != "" && rb.RoleRef.Name != role {
			continue
		}
		for _, s := range rb.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Name == sa {
				t.Errorf("RoleBinding %s binds %s %s to ServiceAccount %s", rb.Name, rb.RoleRef.Kind, rb.RoleRef.Name, sa)
			}
		}
	}
}

// waitEventNaming waits for an event of the reason whose message contains what, and returns it.
func waitEventNaming(t *testing.T, e *env, ns, reason, what string) corev1.Event {
	t.Helper()
	var found corev1.Event
	e.Eventually(t, "event "+reason+" naming "+what, func() (bool, string) {
		list := &corev1.EventList{}
		if err := e.cl.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range list.Items {
			if ev.Reason == reason && strings.Contains(ev.Message, what) {
				found = ev
				return true, ""
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
		}
		return false, strings.Join(seen, "; ")
	})
	return found
}
