package clusterbuild

import (
	"strings"

	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// UnsupportedFields lists the field paths of c that Manta does not implement, in a stable order. The cluster is
// still reconciled without them; the controller reports them in the UnsupportedFeature condition and an event.
func UnsupportedFields(c *rayv1.RayCluster) []string {
	var out []string
	s := &c.Spec
	// The autoscaler sidecar exists only with in-tree autoscaling; its options would otherwise be dropped silently.
	if s.AutoscalerOptions != nil && !ptr.Deref(s.EnableInTreeAutoscaling, false) {
		out = append(out, "spec.autoscalerOptions (enableInTreeAutoscaling is not true)")
	}
	return out
}

// UnsupportedMessage is the condition and event message for UnsupportedFields.
func UnsupportedMessage(fields []string) string {
	return "unsupported fields are ignored: " + strings.Join(fields, ", ")
}
