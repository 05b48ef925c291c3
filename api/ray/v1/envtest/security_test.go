package envtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// The CRDs refuse a head Service name that is not a DNS-1035 label: clients build the dashboard's URL from it, and
// "192.0.2.2?" would make 192.0.2.2 the host. The rule is on HeadGroupSpec, so all three kinds carry it.
func TestSecurityAdmissionRefusesHeadServiceNames(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	_, k := testutil.StartEnvtest(t)
	ctx := context.Background()
	spec := func(name string) rayv1.RayClusterSpec {
		s := testutil.MakeRayCluster("default", "rc").Workers("small", 1).Obj().Spec
		s.HeadGroupSpec.HeadService = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}}
		return s
	}
	objects := func(i int, name string) map[string]client.Object {
		meta := func(kind string) metav1.ObjectMeta {
			return metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", kind, i)}
		}
		s := spec(name)
		return map[string]client.Object{
			"spec.headGroupSpec.headService.metadata.name":                  &rayv1.RayCluster{ObjectMeta: meta("rc"), Spec: s},
			"spec.rayClusterSpec.headGroupSpec.headService.metadata.name":   &rayv1.RayJob{ObjectMeta: meta("rj"), Spec: rayv1.RayJobSpec{Entrypoint: "python x.py", RayClusterSpec: &s}},
			"spec.rayClusterConfig.headGroupSpec.headService.metadata.name": &rayv1.RayService{ObjectMeta: meta("rs"), Spec: rayv1.RayServiceSpec{RayClusterSpec: s}},
		}
	}
	for i, name := range []string{"192.0.2.2?", "host#", "evil.example@x", "x:80", "a/b", "Head", strings.Repeat("a", 64)} {
		for field, obj := range objects(i, name) {
			err := k.Create(ctx, obj)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), field) {
				t.Errorf("%T with head service %q: %v, want Invalid naming %s", obj, name, err, field)
			}
		}
	}
	for field, obj := range objects(100, "my-head-svc") {
		if err := k.Create(ctx, obj); err != nil {
			t.Errorf("%T with a valid head service name (%s): %v", obj, field, err)
		}
	}
}
