package builder

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"strings"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// TemplateHash hashes what the user asked the pods to be: the spec without the fields that scale or schedule the
// cluster (replicas, min/max, workersToDelete, suspend) and those Kueue and the autoscaler change (tolerations,
// schedulingGates), and without upgradeStrategy itself. It hashes the user's input, never the generated pods, so a
// new operator version that generates different pods does not trigger a recreate.
func TemplateHash(spec *rayv1.RayClusterSpec) string {
	s := spec.DeepCopy()
	s.UpgradeStrategy = nil
	s.Suspend = nil
	s.HeadGroupSpec.Template.Spec.Tolerations = nil
	s.HeadGroupSpec.Template.Spec.SchedulingGates = nil
	for i := range s.WorkerGroupSpecs {
		g := &s.WorkerGroupSpecs[i]
		g.Replicas, g.MinReplicas, g.MaxReplicas = nil, nil, nil
		g.Suspend = nil
		g.ScaleStrategy.WorkersToDelete = nil
		g.IdleTimeoutSeconds = nil
		g.Template.Spec.Tolerations = nil
		g.Template.Spec.SchedulingGates = nil
	}
	js, err := json.Marshal(s)
	if err != nil {
		// A spec that decoded from the API server always encodes again.
		panic(err)
	}
	sum := sha256.Sum256(js)
	return strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:20]))
}
