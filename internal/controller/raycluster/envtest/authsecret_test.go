package envtest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

func tokenSecretOf(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	for _, e := range pod.Spec.Containers[clusterbuild.RayContainerIndex].Env {
		if e.Name == clusterbuild.EnvRayAuthToken && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			return e.ValueFrom.SecretKeyRef.Name
		}
	}
	t.Fatalf("pod %s has no RAY_AUTH_TOKEN from a Secret", pod.Name)
	return ""
}

// mode: token makes the cluster's own Secret, named as KubeRay names it, owned by the cluster (so it goes with it),
// holding a random token that later reconciles do not change; the pods take the token from it, and the field is
// no longer reported unsupported.
func testAuthSecretCreated(t *testing.T, e *env) {
	ctx := context.Background()
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	rc.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}
	e.Create(t, rc)
	pods := e.waitPods(t, rc, 2)
	rc = testutil.Get(t, e.Env, rc)

	var sec corev1.Secret
	if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rc"}, &sec); err != nil {
		t.Fatalf("token Secret: %v", err)
	}
	if !metav1.IsControlledBy(&sec, rc) || sec.Labels[rayv1.LabelCluster] != "rc" {
		t.Errorf("Secret owners %+v, labels %v: want the RayCluster as controller", sec.OwnerReferences, sec.Labels)
	}
	token := string(sec.Data[clusterbuild.AuthTokenSecretKey])
	if len(token) < 40 {
		t.Errorf("token %q: want 32 random bytes, base64", token)
	}
	for i := range pods {
		if got := tokenSecretOf(t, &pods[i]); got != "rc" {
			t.Errorf("pod %s takes the token from %q", pods[i].Name, got)
		}
	}

	// Another reconcile, shown done by the new worker: the token stays (running Ray processes hold it).
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](2) })
	e.waitPods(t, rc, 3)
	if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rc"}, &sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data[clusterbuild.AuthTokenSecretKey]) != token {
		t.Error("the token changed on a later reconcile")
	}
	if c := meta.FindStatusCondition(testutil.Get(t, e.Env, rc).Status.Conditions, raycluster.ConditionUnsupportedFeature); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("authOptions still reported: %+v", c)
	}
}

// authOptions.secretName: the named Secret is used and none is made; a Secret that already has the operator's name
// is used as it is, token and all, as KubeRay does.
func testAuthSecretNamedOrExisting(t *testing.T, e *env) {
	ctx := context.Background()
	ns := e.Namespace(t)
	e.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"}, StringData: map[string]string{"auth_token": "m"}})
	named := testutil.MakeRayCluster(ns, "named").Obj()
	named.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, SecretName: ptr.To("mine")}
	e.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "preset"}, StringData: map[string]string{"auth_token": "p"}})
	preset := testutil.MakeRayCluster(ns, "preset").Obj()
	preset.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}
	e.Create(t, named)
	e.Create(t, preset)

	// The Secret is handled before the head pod is created, in the same reconcile: the pod is the barrier.
	if got := tokenSecretOf(t, &e.waitPods(t, named, 1)[0]); got != "mine" {
		t.Errorf("named: pod takes the token from %q", got)
	}
	if got := tokenSecretOf(t, &e.waitPods(t, preset, 1)[0]); got != "preset" {
		t.Errorf("preset: pod takes the token from %q", got)
	}
	if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "named"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Secret was made for a cluster that names its own: %v", err)
	}
	var sec corev1.Secret
	if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "preset"}, &sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["auth_token"]) != "p" || len(sec.OwnerReferences) != 0 {
		t.Errorf("the existing Secret was changed: owners %+v, token %q", sec.OwnerReferences, sec.Data["auth_token"])
	}
}
