package rayjob

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/podtrouble"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// A RayJob whose cluster's pods cannot start says why (internal/controller/shared/podtrouble) while it is Initializing:
// its status.message names the causes, and each pod's cause is a Warning event about the RayJob, recorded once (when
// the status naming it is stored). The state machine is KubeRay's: the job waits, and preRunningDeadlineSeconds, when
// set, fails it with the causes in its message. Only a RayJob annotated AnnotationFailOnPermanentStartError "true"
// fails as soon as a cause is permanent (podtrouble.Cause.Permanent).

// AnnotationFailOnPermanentStartError set to "true" on a RayJob fails it (reason PermanentStartError) as soon as
// one of its cluster's pods cannot start for a reason that waiting will not clear: an invalid image name, an image
// the registry says does not exist, or a Secret or ConfigMap still missing MissingConfigGrace after the pod was
// made. "false" or no annotation: the job waits, as in KubeRay. Any other value fails validation.
const AnnotationFailOnPermanentStartError = "manta.dev/fail-on-permanent-start-error"

// PermanentStartError is the status.reason of a RayJob failed under AnnotationFailOnPermanentStartError (Manta's;
// KubeRay has no such reason).
const PermanentStartError rayv1.JobFailedReason = "PermanentStartError"

// DefaultMissingConfigGrace is how long after a pod was created a Secret or ConfigMap it needs may still be
// missing before AnnotationFailOnPermanentStartError counts it as permanent: time for the tool that makes it (an
// external-secrets operator, a Helm hook) to catch up.
const DefaultMissingConfigGrace = 2 * time.Minute

// reportStartTrouble writes why the cluster's pods cannot start in the message of an Initializing job, asks for an
// event for each cause the message did not name yet, and fails the job when it asked for it and a cause is
// permanent. It reports whether it failed the job.
func (p *plan) reportStartTrouble(cluster *rayv1.RayCluster) (bool, error) {
	s := &p.j.Status
	causes, err := p.startTroubles(cluster)
	if err != nil {
		return false, err
	}
	for _, c := range podtrouble.New(s.Message, causes) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: c.Pod}}
		p.Events = append(p.Events, reconcile.Event{Type: corev1.EventTypeWarning, Reason: c.Reason, Action: "Start",
			Note: fmt.Sprintf("RayCluster %s: %s", cluster.Name, c.Line()), StatusChange: true, Related: pod})
	}
	s.Message = podtrouble.Summary(causes)
	if p.j.Annotations[AnnotationFailOnPermanentStartError] != "true" {
		return false, nil
	}
	for _, c := range causes {
		permanent, wait := c.Permanent(p.now, p.cfg.missingConfigGrace)
		if permanent {
			p.fail(PermanentStartError, fmt.Sprintf("%s (%s is \"true\": a permanent start error fails the job)", c.Line(), AnnotationFailOnPermanentStartError))
			return true, nil
		}
		if wait > 0 {
			p.Requeue(wait) // no pod event comes when the grace ends
		}
	}
	return false, nil
}

// startTroubles is why the observed cluster's pods cannot start.
func (p *plan) startTroubles(cluster *rayv1.RayCluster) ([]podtrouble.Cause, error) {
	if cluster == nil {
		return nil, nil
	}
	if p.o.podsErr != nil {
		return nil, fmt.Errorf("list the pods of RayCluster %s: %w", cluster.Name, p.o.podsErr)
	}
	return podtrouble.Pods(p.o.pods), nil
}

// withStartTrouble adds why the cluster's pods cannot start to a deadline's message.
func (p *plan) withStartTrouble(cluster *rayv1.RayCluster, msg string) string {
	causes, err := p.startTroubles(cluster)
	if err != nil || len(causes) == 0 {
		return msg
	}
	return strings.TrimSuffix(msg, ".") + "; the cluster's pods cannot start: " + podtrouble.Summary(causes)
}
