package reliability

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestRayHeadFaults runs HTTPMode RayJobs from an operator process against Ray heads that answer a share of calls
// with 5xx, let others run past the operator's 2 s call timeout, and accept half of the submissions but answer
// them only after that timeout. Every job completes, each submitted once. One more job's head restarts while
// its Ray job runs (the head pod is deleted and Ray forgets its jobs): the operator does not submit it again; it
// reports the lost job and the RayJob fails at its activeDeadlineSeconds. A RayService's head restarts too: its
// Serve config is deployed again on the same cluster.
func TestRayHeadFaults(t *testing.T) {
	dc, cl := devCluster(t)
	start := time.Now()
	ns := namespace(t, cl, "rayfaults")
	fray := newFakeRay(testSeed(t))
	fray.setFaults(rayFaults{errorShare: 0.15, slowShare: 0.1, slowDelay: 3 * time.Second, acceptThenTimeoutShare: 0.5})
	ledger := watchRayPods(t, t.Context(), dc.RESTConfig())
	startOperator(t, "rayfaults", operatorConfig{kubeconfig: startClusterProxy(t, dc.RESTConfig(), fray).kubeconfig(t), namespaces: []string{ns}})

	var jobs []*rayv1.RayJob
	for i := range 6 {
		jobs = append(jobs, smallJob(ns, fmt.Sprintf("job-%d", i), i%2 == 1))
	}
	lost := smallJob(ns, "head-restart", false)
	lost.Spec.Entrypoint = "python " + longRunning + ".py"
	lost.Spec.ActiveDeadlineSeconds = ptr.To[int32](45)
	for _, j := range append(jobs, lost) {
		if err := cl.Create(t.Context(), j); err != nil {
			t.Fatal(err)
		}
	}
	rs := smallService(ns, "serve")
	if err := cl.Create(t.Context(), rs); err != nil {
		t.Fatal(err)
	}

	// The head restart: once Ray runs the job, delete the head pod and make Ray forget.
	got := &rayv1.RayJob{}
	testutil.Eventually(t, convergeTimeout, lost.Name+" RUNNING", func() (bool, string) {
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(lost), got); err != nil {
			return false, err.Error()
		}
		return got.Status.JobStatus == rayv1.JobStatusRunning, fmt.Sprintf("%+v", got.Status)
	})
	rc := got.Status.RayClusterName
	restartHead(t, cl, ns, rc)
	fray.restartHead(ns, rc)
	restartedAt := time.Since(start)
	// The operator has seen the loss once it has asked for the job and been told Ray does not know it, three
	// times: each was a chance to submit again.
	testutil.Eventually(t, convergeTimeout, lost.Name+": the operator to find its job lost three times", func() (bool, string) {
		n := fray.notFound(ns, rc)
		return n >= 3, fmt.Sprintf("%d reads of the lost job", n)
	})
	if accepted, _, _ := fray.submissions(ns, rc); accepted != 1 {
		t.Errorf("%s: Ray accepted %d submissions after the head restart; want the one before it", lost.Name, accepted)
	}

	waitJobs(t, cl, ledger, jobs)
	refused := checkJobsOnce(t, cl, ledger, fray, jobs)
	testutil.Eventually(t, convergeTimeout, lost.Name+" to fail at its deadline", func() (bool, string) {
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(lost), got); err != nil {
			return false, err.Error()
		}
		return got.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusFailed, fmt.Sprintf("%+v", got.Status)
	})
	if got.Status.Reason != rayv1.DeadlineExceeded {
		t.Errorf("%s: reason %q (%s); want %s", lost.Name, got.Status.Reason, got.Status.Message, rayv1.DeadlineExceeded)
	}
	if accepted, _, _ := fray.submissions(ns, rc); accepted != 1 {
		t.Errorf("%s: Ray accepted %d submissions; want 1, none after the head restart", lost.Name, accepted)
	}
	if c := ledger.counts()[ns+"/"+rc+"/head"]; c.created != 2 || c.live != 1 {
		t.Errorf("%s: head pods %s; want the deleted one replaced once", rc, c)
	}

	// The RayService's head restarts: Ray forgets the Serve applications and the operator deploys them again, on
	// the same cluster.
	checkServiceOnce(t, cl, ledger, fray, rs)
	svcCluster := waitServiceReady(t, cl, rs).Status.ActiveServiceStatus.RayClusterName
	restartHead(t, cl, ns, svcCluster)
	fray.restartHead(ns, svcCluster)
	testutil.Eventually(t, convergeTimeout, "the Serve config re-applied after the head restart", func() (bool, string) {
		deploys, cfg := fray.serveState(ns, svcCluster)
		return deploys >= 2 && string(cfg) == serveConfigJSON, fmt.Sprintf("%d deploys, config %s", deploys, cfg)
	})
	if again := waitServiceReady(t, cl, rs); again.Status.ActiveServiceStatus.RayClusterName != svcCluster {
		t.Errorf("RayService %s moved to cluster %s after its head restarted; want %s kept", rs.Name, again.Status.ActiveServiceStatus.RayClusterName, svcCluster)
	}
	if c := ledger.counts()[ns+"/"+svcCluster+"/head"]; c.created != 2 || c.live != 1 {
		t.Errorf("%s: head pods %s; want the deleted one replaced once", svcCluster, c)
	}
	deploys, _ := fray.serveState(ns, svcCluster)
	t.Logf("RayService: Serve config deployed %d times in all (once, then again after the head restart)", deploys)

	t.Logf("faults injected by the fake Ray: %s; head restarted at %s; %d repeated submissions refused by Ray; total %s",
		formatCounts(fray.injectedFaults()), restartedAt.Round(time.Millisecond), refused, time.Since(start).Round(time.Millisecond))
}

// restartHead deletes the head pod of RayCluster ns/name, as a crash would take it; the RayCluster controller
// makes a new one.
func restartHead(t *testing.T, cl client.Client, ns, name string) {
	t.Helper()
	pods := &corev1.PodList{}
	if err := cl.List(t.Context(), pods, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelCluster: name, rayv1.LabelNodeType: rayv1.NodeTypeHead}); err != nil || len(pods.Items) != 1 {
		t.Fatalf("head pod of %s: %d pods, %v", name, len(pods.Items), err)
	}
	if err := cl.Delete(t.Context(), &pods.Items[0]); err != nil {
		t.Fatal(err)
	}
}
