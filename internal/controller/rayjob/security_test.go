package rayjob

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The RayJob controller reaches its cluster's dashboard by the head Service name of spec.rayClusterSpec: one that
// is not a DNS-1035 label (it would choose the host of the URL) makes the RayJob invalid.
func TestSecurityValidateRefusesHeadServiceNames(t *testing.T) {
	const path = "spec.rayClusterSpec.headGroupSpec.headService.metadata.name"
	for _, name := range []string{"192.0.2.2?", "host#", "evil.example@x", "x:80", "a/b", "Head", strings.Repeat("a", 64)} {
		j := job(func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec.HeadGroupSpec.HeadService = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}}
		})
		errs := Validate(j)
		found := false
		for _, e := range errs {
			found = found || e.Field == path
		}
		if !found {
			t.Errorf("head service %q: Validate = %v, want an error naming %s", name, errs, path)
		}
	}
	j := job(func(j *rayv1.RayJob) {
		j.Spec.RayClusterSpec.HeadGroupSpec.HeadService = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "my-head"}}
	})
	if errs := Validate(j); len(errs) > 0 {
		t.Errorf("a valid head service name is refused: %v", errs)
	}
}
