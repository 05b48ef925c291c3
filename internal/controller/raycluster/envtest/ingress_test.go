package envtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// The head Ingress is created as the builder makes it (as the API server stores it), follows ingressOptions,
// is put back when edited, and is deleted when enableIngress goes; someone else's under the name is left alone.
func testHeadIngress(t *testing.T, e *env) {
	ns := e.Namespace(t)
	ctx := context.Background()
	rc := testutil.MakeRayCluster(ns, "rc").Obj()
	rc.Annotations = map[string]string{clusterbuild.AnnotationIngressClass: "nginx", "nginx.ingress.kubernetes.io/ssl-redirect": "false"}
	rc.Spec.HeadGroupSpec.EnableIngress = ptr.To(true)
	rc.Spec.HeadGroupSpec.IngressOptions = &rayv1.IngressOptions{Host: ptr.To("ray.example.com")}
	e.Create(t, rc)
	key := types.NamespacedName{Namespace: ns, Name: "rc-head-ingress"}
	matches := func(what string) *networkingv1.Ingress {
		t.Helper()
		var ing *networkingv1.Ingress
		e.Eventually(t, what, func() (bool, string) {
			ing = &networkingv1.Ingress{}
			if err := e.cl.Get(ctx, key, ing); err != nil {
				return false, err.Error()
			}
			c := testutil.Get(t, e.Env, rc)
			if !metav1.IsControlledBy(ing, c) {
				return false, "not controlled by the cluster"
			}
			want := clusterbuild.HeadIngress(c)
			if _, changed := clusterbuild.SyncHeadIngress(ing, want); changed {
				return false, cmp.Diff(want.Spec, ing.Spec) + fmt.Sprint(ing.Annotations)
			}
			return true, ""
		})
		return ing
	}
	ing := matches("Ingress created")
	if ptr.Deref(ing.Spec.IngressClassName, "") != "nginx" || ing.Spec.Rules[0].Host != "ray.example.com" ||
		ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name != "rc-head-svc" || ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Port.Number != 8265 {
		t.Errorf("Ingress spec %+v", ing.Spec)
	}
	waitEvent(t, e, ns, raycluster.EventCreatedIngress)

	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.HeadGroupSpec.IngressOptions.Path = ptr.To("/dashboard") })
	if ing := matches("Ingress follows ingressOptions"); ing.Spec.Rules[0].HTTP.Paths[0].Path != "/dashboard" {
		t.Errorf("path %q", ing.Spec.Rules[0].HTTP.Paths[0].Path)
	}
	waitEvent(t, e, ns, raycluster.EventUpdatedIngress)

	ing = matches("settled")
	ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = "elsewhere"
	if err := e.cl.Update(ctx, ing); err != nil {
		t.Fatal(err)
	}
	matches("edited Ingress restored")

	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.HeadGroupSpec.EnableIngress = nil })
	e.Eventually(t, "Ingress deleted", func() (bool, string) {
		err := e.cl.Get(ctx, key, &networkingv1.Ingress{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	waitEvent(t, e, ns, raycluster.EventDeletedIngress)

	// Someone else's Ingress under the name a second cluster's would take: reported, not written, and the cluster
	// still comes up.
	theirs := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-head-ingress"},
		Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "x", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}
	e.Create(t, theirs)
	other := testutil.MakeRayCluster(ns, "other").Obj()
	other.Spec.HeadGroupSpec.EnableIngress = ptr.To(true)
	e.Create(t, other)
	waitEvent(t, e, ns, raycluster.EventFailedToCreateIngress)
	e.waitPods(t, other, 1)
	got := &networkingv1.Ingress{}
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(theirs), got); err != nil || got.ResourceVersion != theirs.ResourceVersion {
		t.Errorf("someone else's Ingress: %v, resourceVersion %s -> %s", err, theirs.ResourceVersion, got.ResourceVersion)
	}
}
