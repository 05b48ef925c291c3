package raycluster

import (
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// backedOff marks a reconcile error whose retry the create backoff (createbackoff.Backoff) has scheduled: Reconcile returns a RequeueAfter for
// it instead of the error, which would have the work queue retry at its own pace (from 5 ms).
type backedOff struct{ err error }

func (e *backedOff) Error() string { return e.err.Error() }
func (e *backedOff) Unwrap() error { return e.err }

// onlyBackedOff says every error joined or wrapped in err is a backedOff.
func onlyBackedOff(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *backedOff:
		return true
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			if x != nil && !onlyBackedOff(x) {
				return false
			}
		}
		return true
	case interface{ Unwrap() error }:
		return onlyBackedOff(e.Unwrap())
	}
	return false
}

// heldFailure is the ReplicaFailure the cluster already reports, kept while creates wait out their backoff.
func heldFailure(c *rayv1.RayCluster, reason string) *failure {
	if cond := meta.FindStatusCondition(c.Status.Conditions, string(rayv1.RayClusterReplicaFailure)); cond != nil && cond.Status == metav1.ConditionTrue {
		return &failure{cond.Reason, cond.Message}
	}
	return &failure{reason, "waiting to retry a refused pod create"}
}

var errCreatesBackedOff = errors.New("pod creates wait out their backoff after a refusal")
