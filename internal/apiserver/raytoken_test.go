package apiserver

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The job-submission routes read the token where the operator puts it (KubeRay's name for the Secret), or from
// the Secret the cluster names; a cluster without a shared token needs no Secret (and no SubjectAccessReview).
func TestRayTokenSecretName(t *testing.T) {
	long := strings.Repeat("a", 53)
	for _, tc := range []struct {
		name   string
		opts   *rayv1.AuthOptions
		want   string
		wantOK bool
	}{
		{"c", nil, "", false},
		{"c", &rayv1.AuthOptions{Mode: rayv1.AuthModeDisabled}, "", false},
		{"c", &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}, "c", true},
		{long, &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}, long[3:], true},
		{"c", &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, SecretName: ptr.To("c-token")}, "c-token", true},
		{"c", &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, EnableK8sTokenAuth: ptr.To(true)}, "", false},
	} {
		rc := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: tc.name}, Spec: rayv1.RayClusterSpec{AuthOptions: tc.opts}}
		if got, ok := rayTokenSecretName(rc); got != tc.want || ok != tc.wantOK {
			t.Errorf("%s %+v: %q, %v; want %q, %v", tc.name, tc.opts, got, ok, tc.want, tc.wantOK)
		}
	}
}
