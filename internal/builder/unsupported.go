package builder

import (
	"fmt"
	"strings"

	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// batchSchedulerKeys are RayCluster labels and annotations that only mean something to one of KubeRay's
// batch-scheduler plugins (volcano, yunikorn, kai-scheduler, scheduler-plugins), which Manta does not have.
var batchSchedulerKeys = []string{
	rayv1.LabelSchedulerName,
	AnnotationGangScheduling,
	"ray.io/priority-class-name",
	"kai.scheduler/queue",
	"volcano.sh/queue-name",
	"yunikorn.apache.org/queue",
	"yunikorn.apache.org/app-id",
	"scheduling.x-k8s.io/pod-group",
}

// UnsupportedFields lists the field paths of c that Manta does not implement, in a stable order. The cluster is
// still reconciled without them; the controller reports them in the UnsupportedFeature condition and an event.
func UnsupportedFields(c *rayv1.RayCluster) []string {
	var out []string
	s := &c.Spec
	// The autoscaler sidecar exists only with in-tree autoscaling; its options would otherwise be dropped silently.
	if s.AutoscalerOptions != nil && !ptr.Deref(s.EnableInTreeAutoscaling, false) {
		out = append(out, "spec.autoscalerOptions (enableInTreeAutoscaling is not true)")
	}
	for _, k := range batchSchedulerKeys {
		if _, ok := c.Labels[k]; ok {
			out = append(out, fmt.Sprintf("metadata.labels[%s]", k))
		}
		if _, ok := c.Annotations[k]; ok {
			out = append(out, fmt.Sprintf("metadata.annotations[%s]", k))
		}
	}
	return out
}

// UnsupportedMessage is the condition and event message for UnsupportedFields.
func UnsupportedMessage(fields []string) string {
	return "unsupported fields are ignored: " + strings.Join(fields, ", ")
}
