package imagepulljob

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// expectations remember, per job UID, the puller pods created that the cache does not show yet (with what the
// planner needs of them) and those deleted that it still shows alive: without them a reconcile right after a create
// would see a free parallelism slot and start a pod on another node.
type expectations = reconcile.Expectations[types.UID, pendingPod]

func newExpectations(now func() time.Time) *expectations {
	return reconcile.NewExpectations[types.UID, pendingPod](now, expectationsTimeout)
}
