package raycluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manta-dev/manta/internal/testutil"
)

// A head Service name that is not a DNS-1035 label would choose the host of the dashboard URL the operator and the
// REST API server build from it ("192.0.2.2?" makes "192.0.2.2" the host): the cluster is invalid.
func TestSecurityValidateRefusesHeadServiceNames(t *testing.T) {
	for _, name := range []string{"192.0.2.2?", "host#", "evil.example@x", "x:80", "a/b", "Head", strings.Repeat("a", 64)} {
		c := testutil.MakeRayCluster("ns", "rc").Workers("small", 1).Obj()
		c.Spec.HeadGroupSpec.HeadService = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}}
		f := validate(c)
		if f == nil || f.reason != ReasonInvalidSpec || !strings.HasPrefix(f.message, "spec.headGroupSpec.headService.metadata.name:") {
			t.Errorf("head service %q: validate = %+v, want InvalidSpec naming spec.headGroupSpec.headService.metadata.name", name, f)
		}
	}
	c := testutil.MakeRayCluster("ns", "rc").Workers("small", 1).Obj()
	c.Spec.HeadGroupSpec.HeadService = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "my-head"}}
	if f := validate(c); f != nil {
		t.Errorf("a valid head service name is refused: %+v", f)
	}
}
