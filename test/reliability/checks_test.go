package reliability

import (
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// waitClusters waits until each named RayCluster (one worker group "w") has status.observedGeneration equal to its
// generation, is ready, and has exactly one live head and the last of desired[i] live workers. Waiting for
// observedGeneration first makes the later absence checks mean something: the operator has seen the last change.
func waitClusters(t *testing.T, cl client.Client, ledger *podLedger, ns string, names []string, desired [][]int32) {
	t.Helper()
	testutil.Eventually(t, convergeTimeout, "every RayCluster to have exactly its desired pods, observed and ready", func() (bool, string) {
		counts := ledger.counts()
		for i, name := range names {
			rc := &rayv1.RayCluster{}
			if err := cl.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, rc); err != nil {
				return false, err.Error()
			}
			want := desired[i][len(desired[i])-1]
			head, workers := counts[ns+"/"+name+"/head"], counts[ns+"/"+name+"/w"]
			if rc.Status.ObservedGeneration != rc.Generation || rc.Status.State != rayv1.Ready || head.live != 1 || workers.live != int(want) {
				return false, fmt.Sprintf("%s: observedGeneration %d of %d, state %q, head %s, workers %s, want %d workers",
					name, rc.Status.ObservedGeneration, rc.Generation, rc.Status.State, head, workers, want)
			}
		}
		return true, ""
	})
}

// checkClusterPods asserts that each cluster's head was created once and never deleted, and that its workers were
// created no more often than the scale-ups in desired[i] ask for and deleted no more often than the scale-downs
// do. It returns the pods created and deleted.
func checkClusterPods(t *testing.T, ledger *podLedger, ns string, names []string, desired [][]int32) (created, deleted int) {
	t.Helper()
	counts := ledger.counts()
	for i, name := range names {
		seq := desired[i]
		maxCreates, maxDeletes := int(seq[0]), 0
		for k := 1; k < len(seq); k++ {
			maxCreates += max(0, int(seq[k]-seq[k-1]))
			maxDeletes += max(0, int(seq[k-1]-seq[k]))
		}
		head, workers := counts[ns+"/"+name+"/head"], counts[ns+"/"+name+"/w"]
		if head.created != 1 || head.deleted != 0 {
			t.Errorf("%s: head pods %s; want exactly one, never deleted: %s", name, head, ledger.describe(ns+"/"+name+"/head"))
		}
		if workers.created > maxCreates || workers.deleted > maxDeletes {
			t.Errorf("%s: worker pods %s; replicas went %v, which asks for at most %d creates and %d deletes", name, workers, seq, maxCreates, maxDeletes)
		}
		created += head.created + workers.created
		deleted += workers.deleted
	}
	return created, deleted
}

// waitJobs waits until every RayJob (made by smallJob) is Complete and SUCCEEDED and, when it shuts its cluster
// down, the cluster and its pods are gone.
func waitJobs(t *testing.T, cl client.Client, ledger *podLedger, jobs []*rayv1.RayJob) {
	t.Helper()
	testutil.Eventually(t, convergeTimeout, "every RayJob to complete", func() (bool, string) {
		for _, j := range jobs {
			got := &rayv1.RayJob{}
			if err := cl.Get(t.Context(), client.ObjectKeyFromObject(j), got); err != nil {
				return false, err.Error()
			}
			if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusComplete || got.Status.JobStatus != rayv1.JobStatusSucceeded {
				return false, fmt.Sprintf("%s: %s/%s %s", j.Name, got.Status.JobDeploymentStatus, got.Status.JobStatus, got.Status.Message)
			}
			if j.Spec.ShutdownAfterJobFinishes {
				rc := got.Status.RayClusterName
				if err := cl.Get(t.Context(), client.ObjectKey{Namespace: j.Namespace, Name: rc}, &rayv1.RayCluster{}); !errors.IsNotFound(err) {
					return false, fmt.Sprintf("%s: RayCluster %s still there (%v)", j.Name, rc, err)
				}
				c := ledger.counts()
				if live := c[j.Namespace+"/"+rc+"/head"].live + c[j.Namespace+"/"+rc+"/w"].live; live > 0 {
					return false, fmt.Sprintf("%s: %d pods of %s left", j.Name, live, rc)
				}
			}
		}
		return true, ""
	})
}

// checkJobsOnce asserts that each RayJob's cluster got one head and one worker, and that Ray accepted exactly one
// submission, under the RayJob's job ID. It returns how many repeated submissions Ray refused.
func checkJobsOnce(t *testing.T, cl client.Client, ledger *podLedger, fray *fakeRay, jobs []*rayv1.RayJob) (refusedTotal int) {
	t.Helper()
	counts := ledger.counts()
	for _, j := range jobs {
		got := &rayv1.RayJob{}
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(j), got); err != nil {
			t.Fatal(err)
		}
		rc := got.Status.RayClusterName
		for _, g := range []string{"head", "w"} {
			if c := counts[j.Namespace+"/"+rc+"/"+g]; c.created != 1 {
				t.Errorf("%s: RayCluster %s group %s: %s; want exactly one created: %s", j.Name, rc, g, c, ledger.describe(j.Namespace+"/"+rc+"/"+g))
			}
		}
		accepted, refused, ids := fray.submissions(j.Namespace, rc)
		refusedTotal += refused
		if accepted != 1 || !slices.Equal(ids, []string{got.Status.JobId}) {
			t.Errorf("%s: Ray accepted %d submissions %v (refused %d more); want exactly one, %s", j.Name, accepted, ids, refused, got.Status.JobId)
		}
	}
	return refusedTotal
}

// serveConfigYAML is the serveConfigV2 of smallService; serveConfigJSON what Ray receives for it.
const (
	serveConfigYAML = "applications:\n- name: app\n  import_path: model:app\n  route_prefix: /\n"
	serveConfigJSON = `{"applications":[{"import_path":"model:app","name":"app","route_prefix":"/"}]}`
)

// smallService is a RayService of one application on a one-worker cluster of tiny pods.
func smallService(ns, name string) *rayv1.RayService {
	return &rayv1.RayService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: rayv1.RayServiceSpec{ServeConfigV2: serveConfigYAML, RayClusterSpec: smallCluster("", "", 1).Spec}}
}

// waitServiceReady waits for the RayService's Ready condition and an active cluster, and returns the service.
func waitServiceReady(t *testing.T, cl client.Client, rs *rayv1.RayService) *rayv1.RayService {
	t.Helper()
	got := &rayv1.RayService{}
	testutil.Eventually(t, convergeTimeout, "RayService "+rs.Name+" ready", func() (bool, string) {
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(rs), got); err != nil {
			return false, err.Error()
		}
		ok := meta.IsStatusConditionTrue(got.Status.Conditions, string(rayv1.RayServiceReady)) && got.Status.ActiveServiceStatus.RayClusterName != "" &&
			got.Status.ObservedGeneration == got.Generation
		return ok, fmt.Sprintf("%+v", got.Status)
	})
	return got
}

// checkServiceOnce asserts that the RayService made one RayCluster, whose head and worker were created once, and
// that its head took the Serve config once, the right one.
func checkServiceOnce(t *testing.T, cl client.Client, ledger *podLedger, fray *fakeRay, rs *rayv1.RayService) {
	t.Helper()
	got := waitServiceReady(t, cl, rs)
	rcs := &rayv1.RayClusterList{}
	if err := cl.List(t.Context(), rcs, client.InNamespace(rs.Namespace)); err != nil {
		t.Fatal(err)
	}
	var owned []string
	for _, c := range rcs.Items {
		if metav1.IsControlledBy(&c, got) {
			owned = append(owned, c.Name)
		}
	}
	rc := got.Status.ActiveServiceStatus.RayClusterName
	if !slices.Equal(owned, []string{rc}) {
		t.Errorf("RayService %s owns RayClusters %v; want only its active one %s", rs.Name, owned, rc)
	}
	counts := ledger.counts()
	for _, g := range []string{"head", "w"} {
		if c := counts[rs.Namespace+"/"+rc+"/"+g]; c.created != 1 {
			t.Errorf("RayService %s: RayCluster %s group %s: %s; want exactly one created: %s", rs.Name, rc, g, c, ledger.describe(rs.Namespace+"/"+rc+"/"+g))
		}
	}
	if deploys, cfg := fray.serveState(rs.Namespace, rc); deploys != 1 || string(cfg) != serveConfigJSON {
		t.Errorf("RayService %s: the head took %d Serve deploys, running %s; want one, %s", rs.Name, deploys, cfg, serveConfigJSON)
	}
}
