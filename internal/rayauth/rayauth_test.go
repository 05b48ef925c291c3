package rayauth

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

func TestToken(t *testing.T) {
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: data}
	}
	cl := fake.NewClientBuilder().WithObjects(
		secret("rc", map[string][]byte{"auth_token": []byte("generated")}),
		secret("mine", map[string][]byte{"auth_token": []byte("named")}),
		secret("empty", map[string][]byte{"token": []byte("x")}),
	).Build()
	cluster := func(name string, o *rayv1.AuthOptions) *rayv1.RayCluster {
		return &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: rayv1.RayClusterSpec{AuthOptions: o}}
	}
	token := &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}
	for _, tc := range []struct {
		name    string
		c       *rayv1.RayCluster
		want    string
		wantErr string
	}{
		{"no auth", cluster("rc", nil), "", ""},
		{"disabled", cluster("rc", &rayv1.AuthOptions{Mode: rayv1.AuthModeDisabled}), "", ""},
		{"generated", cluster("rc", token), "generated", ""},
		{"named", cluster("rc", &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, SecretName: ptr.To("mine")}), "named", ""},
		{"k8s tokens: no shared one", cluster("rc", &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, EnableK8sTokenAuth: ptr.To(true)}), "", ""},
		{"missing", cluster("gone", token), "", `ray auth token secret "gone" (spec.authOptions): secrets "gone" not found`},
		{"no key", cluster("rc", &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, SecretName: ptr.To("empty")}), "", `ray auth token secret "empty" (spec.authOptions) has no "auth_token" key`},
	} {
		got, err := Token(context.Background(), cl, tc.c)
		if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: %q, %v; want %q, error %q", tc.name, got, err, tc.want, tc.wantErr)
		}
		if tc.name == "missing" && !apierrors.IsNotFound(err) {
			t.Errorf("missing: %v is not NotFound (the REST API answers 503 naming the Secret on NotFound)", err)
		}
	}
}
