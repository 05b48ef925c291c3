package integration

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/manta-dev/manta/internal/devcluster"
)

// testGatewayAPIServed checks that a started dev cluster serves the Gateway API's GatewayClass, Gateway and
// HTTPRoute (v1), and that nothing implements them: a Gateway keeps the status its CRD defaults to.
func testGatewayAPIServed(t *testing.T, ctx context.Context, c *devcluster.Cluster) {
	cs := kubernetes.NewForConfigOrDie(c.RESTConfig())
	list, err := cs.Discovery().ServerResourcesForGroupVersion(gwv1.GroupVersion.String())
	if err != nil {
		t.Fatalf("discovery of %s: %v", gwv1.GroupVersion, err)
	}
	var served []string
	for _, r := range list.APIResources {
		served = append(served, r.Name)
	}
	for _, want := range []string{"gatewayclasses", "gateways", "httproutes"} {
		if !slices.Contains(served, want) {
			t.Errorf("%s does not serve %s; it serves %v", gwv1.GroupVersion, want, served)
		}
	}

	scheme := runtime.NewScheme()
	if err := gwv1.Install(scheme); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	class := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "dev-class"},
		Spec: gwv1.GatewayClassSpec{ControllerName: "example.com/nothing"}}
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "default"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "dev-class", Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}}
	route := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "route", Namespace: "default"},
		Spec: gwv1.HTTPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}}}}
	for _, o := range []client.Object{class, gw, route} {
		if err := cl.Create(ctx, o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
		t.Cleanup(func() { _ = cl.Delete(context.Background(), o) })
	}
	// The CRD's default status: Accepted and Programmed Unknown ("Pending") until an implementation says otherwise.
	if a := meta.FindStatusCondition(gw.Status.Conditions, string(gwv1.GatewayConditionAccepted)); a == nil || a.Status != metav1.ConditionUnknown {
		t.Errorf("new Gateway's Accepted condition %+v, want the CRD's default (Unknown)", a)
	}
}
