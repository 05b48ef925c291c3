package raycluster

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/builder"
	"github.com/manta-dev/manta/internal/testutil"
)

// A RayCluster created by a RayJob or RayService (owner reference or origin label) may not carry an
// upgradeStrategy; other clusters may.
func TestValidateUpgradeStrategyOwner(t *testing.T) {
	owner := func(kind string) func(*rayv1.RayCluster) {
		return func(c *rayv1.RayCluster) {
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: rayv1.GroupVersion.String(), Kind: kind, Name: "p", UID: "u"}}
		}
	}
	tests := []struct {
		name     string
		mutate   func(*rayv1.RayCluster)
		recreate bool
		want     string // substring of the message; "" means valid
	}{
		{"standalone with Recreate", func(*rayv1.RayCluster) {}, true, ""},
		{"RayJob owner without upgradeStrategy", owner(builder.KindRayJob), false, ""},
		{"RayJob owner", owner(builder.KindRayJob), true, "upgradeStrategy cannot be set when RayCluster is created by RayJob"},
		{"RayService owner", owner(builder.KindRayService), true, "upgradeStrategy cannot be set when RayCluster is created by RayService"},
		{"RayService origin label", func(c *rayv1.RayCluster) {
			c.Labels = map[string]string{builder.LabelOriginCRD: builder.KindRayService}
		}, true, "created by RayService"},
		{"unrelated owner", func(c *rayv1.RayCluster) {
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "u"}}
		}, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := testutil.MakeRayCluster("ns", "rc").Workers("small", 1)
			if tc.recreate {
				w = w.Recreate()
			}
			c := w.Obj()
			tc.mutate(c)
			f := validate(c)
			switch {
			case tc.want == "" && f != nil:
				t.Errorf("refused: %+v", f)
			case tc.want != "" && (f == nil || f.reason != ReasonUpgradeStrategyNotAllowed || !strings.Contains(f.message, tc.want)):
				t.Errorf("validate = %+v, want %q", f, tc.want)
			}
		})
	}
}
