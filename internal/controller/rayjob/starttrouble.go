package rayjob

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// A RayJob whose cluster's pods cannot start says why (internal/podtrouble) while it is Initializing: its
// status.message names the causes, and each pod's cause is a Warning event about the RayJob, recorded once (when the
// status naming it is stored). The state machine is KubeRay's: the job waits, and preRunningDeadlineSeconds, when
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

// validateStartErrorAnnotation refuses a value of AnnotationFailOnPermanentStartError other than "true" or "false".
func validateStartErrorAnnotation(j *rayv1.RayJob) field.ErrorList {
	v, ok := j.Annotations[AnnotationFailOnPermanentStartError]
	if !ok || v == "true" || v == "false" {
		return nil
	}
	return field.ErrorList{field.NotSupported(field.NewPath("metadata", "annotations").Key(AnnotationFailOnPermanentStartError), v, []string{"true", "false"})}
}
