package envtest

import (
	"testing"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestStatusCheckFailuresCleared: a head answering 5xx for a while: the job is submitted once, completes, and its
// check failures are cleared. The controller's clock stands still, so the failures, however long they take on a
// loaded machine, never add up to the status check timeout (they did at load 40 with the shared env's real 3 s).
func TestStatusCheckFailuresCleared(t *testing.T) {
	e, _ := startEnvOnFakeClock(t)
	ns := e.Namespace(t)
	j := e.create(t, testutil.MakeRayJob(ns, "flaky"))
	got := testutil.WaitFor(t, e.Env, j, "rayClusterName", func(j *rayv1.RayJob) bool { return j.Status.RayClusterName != "" })
	e.ray.Cluster(ns, got.Status.RayClusterName).Fail503(5)
	c := e.readyCluster(t, j)
	testutil.WaitFor(t, e.Env, j, "a status check failure recorded", func(j *rayv1.RayJob) bool { return j.Status.JobStatusCheckFailureStartTime != nil })
	got = e.waitJobStatus(t, j, rayv1.JobStatusPending)
	if got.Status.JobStatusCheckFailureStartTime != nil {
		t.Errorf("jobStatusCheckFailureStartTime not cleared: %v", got.Status.JobStatusCheckFailureStartTime)
	}
	e.ray.Cluster(ns, c.Name).SetJob(got.Status.JobId, ray.JobStatusSucceeded, 1, 2)
	e.waitDeployment(t, j, rayv1.JobDeploymentStatusComplete)
	if _, jobs, _ := e.requests(ns, c.Name); jobs != 1 {
		t.Errorf("%d jobs in Ray, want 1", jobs)
	}
}
