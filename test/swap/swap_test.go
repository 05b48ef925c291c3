// Package swap swaps operators under live Ray work on the dev cluster with its real node, as a platform engineer
// adopts Manta: KubeRay v1.5.0's operator is stopped and Manta's started, then back, then Manta of the previous
// commit is upgraded to this tree's. Across every swap, nothing the first operator made is recreated, the running
// Ray job is not submitted again and ends SUCCEEDED, and the Serve endpoint answers every request.
package swap

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// baseRevision is the Manta the upgrade starts from. Not 81555e8, main before this test: that Manta takes a
// RayService over from KubeRay by rolling it to a new cluster (it read KubeRay's spec hash as a change), which the
// commit named here fixes; the upgrade starts from the first Manta that can hold the work KubeRay made.
const baseRevision = "576ac39"

// kwokClusters is how many idle RayClusters the kwok nodes hold.
const kwokClusters = 3

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// scene is the live work and what the test knows of it.
type scene struct {
	c       *devcluster.Cluster
	cl      client.Client
	cs      kubernetes.Interface
	kubectl string
	ns      string
	job     *rayv1.RayJob
	service *rayv1.RayService
	kwok    []*rayv1.RayCluster
	// Fixed once KubeRay has started the work: every later operator must report the same.
	jobID, jobCluster, serveCluster string
	dash                            *ray.DashboardClient
	probe                           *prober
	last                            *operator // the operator started last
	// initial is every UID once the work ran under KubeRay: every later snapshot must equal it, so that a late
	// recreation (after a swap's checks, before the next swap) counts too.
	initial uids
}

// TestSwapUnderLiveWork: KubeRay v1.5.0 runs three RayClusters on kwok nodes, a RayJob whose driver runs on the
// real node until the test releases it, and a RayService serving on the real node, with a prober sending requests
// to the Serve endpoint throughout. Then, one after the other:
//   - KubeRay stopped, Manta (this tree) started;
//   - the RayService given a worker group of no replicas, which Manta adds to its cluster in place (stamping its
//     own spec hash); then Manta stopped, KubeRay started again;
//   - KubeRay stopped, Manta of baseRevision started;
//   - that Manta stopped, this tree's started (the upgrade).
//
// After each, no pod, Service, Job or RayCluster has a new UID, is gone or is added (against what KubeRay ran at
// first, so a late change counts too); the head knows exactly one Ray job; every status is what the work is
// (RayClusters ready, the RayService Running on its first cluster, the RayJob RUNNING with its first job ID) as
// the new operator reports it, and stays so after it has reconciled every object again. Then the driver is
// released and the RayJob ends SUCCEEDED under the last operator; the prober saw no failed request.
func TestSwapUnderLiveWork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	start := time.Now()
	root := testutil.MustRepoRoot(t)
	binDir := filepath.Join(root, "bin")
	if err := devcluster.RealNodeSupport(binDir); err != nil {
		t.Fatalf("this machine cannot run the real node: %v", err)
	}
	kuberay := filepath.Join(binDir, "kuberay-operator")
	if _, err := os.Stat(kuberay); err != nil {
		t.Fatalf("KubeRay's operator (hack/build-kuberay.sh, make tools): %v", err)
	}
	current, err := testutil.BuildMantaTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base, err := testutil.BuildMantaAt(root, baseRevision, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Manta built from this tree and from %s in %s", baseRevision, time.Since(start).Round(time.Second))

	c, err := devcluster.Start(ctx, devcluster.Options{
		Pools:    []devcluster.NodePool{{Name: "kwok", Count: 2, Labels: map[string]string{kwokLabel: "true"}}},
		RealNode: true, Logf: t.Logf,
	})
	if err != nil {
		t.Fatalf("start the dev cluster with a real node: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop the dev cluster: %v", err)
		}
	})
	s := newScene(t, ctx, c, filepath.Join(binDir, "kubectl"))

	op := startOperator(t, c, "kuberay-1", kuberay, true)
	// Each swap stops the operator before; this stops the last one (or the one a failed swap left running).
	t.Cleanup(func() { s.last.stop() })
	s.last = op
	s.createWork(t, ctx)
	s.waitWork(t, ctx, op)
	t.Logf("work running under KubeRay v1.5.0 after %s: RayJob %s (job %s on %s), RayService %s on %s", time.Since(start).Round(time.Second),
		s.job.Name, s.jobID, s.jobCluster, s.service.Name, s.serveCluster)

	s.probe = newProber(c, fmt.Sprintf("http://%s-serve-svc.%s.svc.cluster.local:8000/", s.service.Name, s.ns))
	// kube-proxy programs a new Service a little after it has endpoints: the prober starts once it is through.
	waitFor(t, ctx, 2*time.Minute, "a first answer through the serve Service", func() (bool, string) {
		err := s.probe.once(ctx)
		return err == nil, fmt.Sprint(err)
	})
	go s.probe.run(ctx)
	defer s.probe.stop()
	if s.initial, err = snapshot(ctx, s.cl, s.ns); err != nil {
		t.Fatal(err)
	}
	t.Logf("under KubeRay: %d pods, %d Services, %d Jobs, %d RayClusters", s.initial.count("pod"), s.initial.count("service"),
		s.initial.count("job"), s.initial.count("raycluster"))

	for _, sw := range []struct {
		to      string
		bin     string
		kuberay bool
		// first, if set, runs under the operator before the swap.
		first func(*testing.T, context.Context)
	}{
		{to: "manta-1", bin: current},
		{to: "kuberay-2", bin: kuberay, kuberay: true, first: s.addSpareGroup},
		{to: "manta-base", bin: base},
		{to: "manta-2", bin: current},
	} {
		t.Run(op.name+" to "+sw.to, func(t *testing.T) {
			if sw.first != nil {
				sw.first(t, ctx)
			}
			op = s.swap(t, ctx, op, sw.to, sw.bin, sw.kuberay)
		})
		if t.Failed() {
			t.FailNow()
		}
	}

	// The end of the job, under the last operator.
	head := s.headPod(t, ctx, s.jobCluster)
	if out, err := s.kubectlOut(ctx, "-n", s.ns, "exec", head, "-c", "ray-head", "--", "touch", releaseFile); err != nil {
		t.Fatalf("release the driver: %v: %s", err, out)
	}
	waitFor(t, ctx, 5*time.Minute, "RayJob "+s.job.Name+" SUCCEEDED / Complete", func() (bool, string) {
		var j rayv1.RayJob
		if err := s.cl.Get(ctx, client.ObjectKeyFromObject(s.job), &j); err != nil {
			return false, err.Error()
		}
		if rayv1.IsJobDeploymentTerminal(j.Status.JobDeploymentStatus) && j.Status.JobStatus != rayv1.JobStatusSucceeded {
			t.Fatalf("RayJob ended %s / %s: %s", j.Status.JobStatus, j.Status.JobDeploymentStatus, j.Status.Message)
		}
		return j.Status.JobStatus == rayv1.JobStatusSucceeded && j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusComplete,
			fmt.Sprintf("%s / %s: %s", j.Status.JobStatus, j.Status.JobDeploymentStatus, j.Status.Message)
	})
	s.checkOneRayJob(t, ctx)
	after, err := snapshot(ctx, s.cl, s.ns)
	if err != nil {
		t.Fatal(err)
	}
	if gone, added, recreated := s.initial.diff(after); len(gone)+len(added)+len(recreated) > 0 {
		t.Errorf("at the job's end, objects differ from KubeRay's: gone %v, new %v, recreated %v", gone, added, recreated)
	}
	out, err := s.kubectlOut(ctx, "-n", s.ns, "logs", "job/"+s.job.Name)
	if err != nil || !strings.Contains(out, "swap-job started") || !strings.Contains(out, "swap-job released") {
		t.Errorf("the submitter's logs (kubectl logs job/%s) lack the driver's start or release: %v\n%s", s.job.Name, err, out)
	}
	s.probe.stop()
	sent, failed := s.probe.sent.Load(), s.probe.failed.Load()
	t.Logf("prober through %s-serve-svc over all swaps: %d requests sent, %d failed", s.service.Name, sent, failed)
	if failed != 0 || sent == 0 {
		t.Errorf("requests: %d sent, %d failed; the first failures: %v", sent, failed, s.probe.failures())
	}
	t.Logf("swap test took %s", time.Since(start).Round(time.Second))
}

func newScene(t *testing.T, ctx context.Context, c *devcluster.Cluster, kubectl string) *scene {
	t.Helper()
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	s := &scene{c: c, cl: cl, cs: kubernetes.NewForConfigOrDie(c.RESTConfig()), kubectl: kubectl, ns: "live"}
	nsCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := testutil.CreateNamespace(nsCtx, cl, s.ns); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *scene) createWork(t *testing.T, ctx context.Context) {
	t.Helper()
	cm, err := appsConfigMap(s.ns)
	if err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{cm}
	for i := range kwokClusters {
		rc := kwokCluster(s.ns, fmt.Sprintf("idle-%d", i))
		s.kwok = append(s.kwok, rc)
		objs = append(objs, rc)
	}
	s.job, s.service = holdJob(s.ns), echoService(s.ns)
	objs = append(objs, s.job, s.service)
	for _, o := range objs {
		if err := s.cl.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// waitWork waits for the work to run under the first operator, and fixes the job's ID and the clusters' names.
func (s *scene) waitWork(t *testing.T, ctx context.Context, op *operator) {
	t.Helper()
	waitFor(t, ctx, 15*time.Minute, "the work running", func() (bool, string) {
		if err := op.exited(); err != nil {
			t.Fatal(err)
		}
		var j rayv1.RayJob
		var rs rayv1.RayService
		if err := s.cl.Get(ctx, client.ObjectKeyFromObject(s.job), &j); err != nil {
			return false, err.Error()
		}
		if err := s.cl.Get(ctx, client.ObjectKeyFromObject(s.service), &rs); err != nil {
			return false, err.Error()
		}
		if rayv1.IsJobDeploymentTerminal(j.Status.JobDeploymentStatus) {
			t.Fatalf("RayJob ended before its release: %s / %s: %s", j.Status.JobStatus, j.Status.JobDeploymentStatus, j.Status.Message)
		}
		s.jobID, s.jobCluster = j.Status.JobId, j.Status.RayClusterName
		s.serveCluster = rs.Status.ActiveServiceStatus.RayClusterName
		ok, why := s.converged(ctx)
		return ok, why + "; " + s.podReport(ctx)
	})
	var rc rayv1.RayCluster
	if err := s.cl.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.jobCluster}, &rc); err != nil {
		t.Fatal(err)
	}
	f, err := ray.NewFactory(ray.Options{
		Timeout:    20 * time.Second,
		HTTPClient: &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: s.c.DialContext}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.dash, err = f.Dashboard(rayjob.HeadTarget(&rc)); err != nil {
		t.Fatal(err)
	}
	s.checkOneRayJob(t, ctx)
}

// converged says whether every object's status is what the live work is: each RayCluster ready with its workers,
// the RayService Running and Ready on its first cluster with nothing pending, the RayJob RUNNING on its first
// cluster with its first job ID (once known).
func (s *scene) converged(ctx context.Context) (bool, string) {
	var why []string
	clusters := map[string]int32{s.jobCluster: 0, s.serveCluster: 0}
	for _, rc := range s.kwok {
		clusters[rc.Name] = 1
	}
	for name, workers := range clusters {
		if name == "" {
			why = append(why, "a cluster not named yet")
			continue
		}
		var rc rayv1.RayCluster
		if err := s.cl.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &rc); err != nil {
			why = append(why, err.Error())
			continue
		}
		if rc.Status.State != rayv1.Ready || rc.Status.ReadyWorkerReplicas != workers {
			why = append(why, fmt.Sprintf("RayCluster %s: state %q, %d ready workers", name, rc.Status.State, rc.Status.ReadyWorkerReplicas))
		}
	}
	var j rayv1.RayJob
	if err := s.cl.Get(ctx, client.ObjectKeyFromObject(s.job), &j); err != nil {
		return false, err.Error()
	}
	if j.Status.JobStatus != rayv1.JobStatusRunning || j.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusRunning ||
		j.Status.JobId == "" || j.Status.JobId != s.jobID || j.Status.RayClusterName != s.jobCluster {
		why = append(why, fmt.Sprintf("RayJob: %s / %s, job %q on %q (want %q on %q): %s", j.Status.JobStatus, j.Status.JobDeploymentStatus,
			j.Status.JobId, j.Status.RayClusterName, s.jobID, s.jobCluster, j.Status.Message))
	}
	var rs rayv1.RayService
	if err := s.cl.Get(ctx, client.ObjectKeyFromObject(s.service), &rs); err != nil {
		return false, err.Error()
	}
	st := rs.Status
	if st.ServiceStatus != rayv1.Running || !meta.IsStatusConditionTrue(st.Conditions, string(rayv1.RayServiceReady)) ||
		st.ActiveServiceStatus.RayClusterName != s.serveCluster || st.PendingServiceStatus.RayClusterName != "" {
		why = append(why, fmt.Sprintf("RayService: %q, ready %v, active %q (want %q), pending %q, apps %v", st.ServiceStatus,
			meta.IsStatusConditionTrue(st.Conditions, string(rayv1.RayServiceReady)), st.ActiveServiceStatus.RayClusterName,
			s.serveCluster, st.PendingServiceStatus.RayClusterName, st.ActiveServiceStatus.Applications))
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// digests are the statuses of every object without timestamps, by "<kind>/<name>".
func (s *scene) digests(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	add := func(key string, status any) error {
		d, err := statusDigest(status)
		out[key] = d
		return err
	}
	var rcs rayv1.RayClusterList
	if err := s.cl.List(ctx, &rcs, client.InNamespace(s.ns)); err != nil {
		return nil, err
	}
	for _, rc := range rcs.Items {
		if err := add("raycluster/"+rc.Name, rc.Status); err != nil {
			return nil, err
		}
	}
	var j rayv1.RayJob
	if err := s.cl.Get(ctx, client.ObjectKeyFromObject(s.job), &j); err != nil {
		return nil, err
	}
	var rs rayv1.RayService
	if err := s.cl.Get(ctx, client.ObjectKeyFromObject(s.service), &rs); err != nil {
		return nil, err
	}
	if err := add("rayjob/"+j.Name, j.Status); err != nil {
		return nil, err
	}
	return out, add("rayservice/"+rs.Name, rs.Status)
}

// swap stops from and starts to, and checks what the brief of the package says.
func (s *scene) swap(t *testing.T, ctx context.Context, from *operator, to, bin string, kuberay bool) *operator {
	before, err := snapshot(ctx, s.cl, s.ns)
	if err != nil {
		t.Fatal(err)
	}
	if gone, added, recreated := s.initial.diff(before); len(gone)+len(added)+len(recreated) > 0 {
		t.Errorf("while %s ran, objects changed from KubeRay's: gone %v, new %v, recreated %v", from.name, gone, added, recreated)
	}
	sentBefore, failedBefore := s.probe.sent.Load(), s.probe.failed.Load()
	from.stop()
	op := startOperator(t, s.c, to, bin, kuberay)
	s.last = op
	// The counts are measured and checked whether or not the statuses converge: a recreated object is often why
	// they do not.
	defer func() {
		after, err := snapshot(ctx, s.cl, s.ns)
		if err != nil {
			t.Error(err)
			return
		}
		gone, added, recreated := s.initial.diff(after)
		n := s.checkOneRayJob(t, ctx)
		sent, failed := s.probe.sent.Load()-sentBefore, s.probe.failed.Load()-failedBefore
		t.Logf("%s to %s: kept %d pods, %d Services, %d Jobs, %d RayClusters; gone %d %v, new %d %v, recreated %d %v; "+
			"%d Ray job(s) on the head; %d requests sent during the swap, %d failed", from.name, to,
			after.count("pod"), after.count("service"), after.count("job"), after.count("raycluster"),
			len(gone), gone, len(added), added, len(recreated), recreated, n, sent, failed)
		if len(gone)+len(added)+len(recreated) > 0 {
			t.Errorf("%s changed what %s made: gone %v, new %v, recreated %v", to, from.name, gone, added, recreated)
		}
		if failed != 0 {
			t.Errorf("%d of %d requests failed during the swap; the first failures: %v", failed, sent, s.probe.failures())
		}
	}()
	s.waitConverged(t, ctx, op)
	return op
}

// waitConverged waits until op has reconciled every object (its reconcile counters, from zero at its start, reach
// the objects' count) and every status is the live work's. Then it checks that the statuses settle: it pokes each
// RayCluster (an annotation: the clusters' and their owners' controllers reconcile again) and waits for as many
// reconciles again, round after round, until a round leaves every status as the round before did but for
// timestamps. A round may still carry the new operator's word from one object into another (a RayService copies
// its cluster's status); a status that moves on every round fails.
func (s *scene) waitConverged(t *testing.T, ctx context.Context, op *operator) {
	t.Helper()
	objects := map[string]int{"raycluster": kwokClusters + 2, "rayjob": 1, "rayservice": 1}
	waitReconciles := func(what string, from map[string]int) map[string]int {
		var got map[string]int
		waitFor(t, ctx, 5*time.Minute, what, func() (bool, string) {
			var err error
			if got, err = op.reconciles(ctx); err != nil {
				if op.exited() != nil {
					t.Fatal(err)
				}
				return false, err.Error()
			}
			for k, n := range objects {
				if got[k] < from[k]+n {
					return false, fmt.Sprintf("reconciles %v, want %v more than %v", got, objects, from)
				}
			}
			return true, ""
		})
		return got
	}
	start := time.Now()
	counts := waitReconciles(op.name+" reconciled every object", nil)
	waitFor(t, ctx, 5*time.Minute, "statuses under "+op.name, func() (bool, string) {
		if err := op.exited(); err != nil {
			t.Fatal(err)
		}
		return s.converged(ctx)
	})
	t.Logf("%s: every status the live work's after %s", op.name, time.Since(start).Round(time.Millisecond))

	const rounds = 3
	prev, err := s.digests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var moved []string
	for round := 1; round <= rounds; round++ {
		var rcs rayv1.RayClusterList
		if err := s.cl.List(ctx, &rcs, client.InNamespace(s.ns)); err != nil {
			t.Fatal(err)
		}
		for _, rc := range rcs.Items {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"swap.manta.dev/poked":"%s-%d"}}}`, op.name, round)
			if err := s.cl.Patch(ctx, &rc, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
				t.Fatal(err)
			}
		}
		counts = waitReconciles(fmt.Sprintf("%s reconciled every object again (round %d)", op.name, round), counts)
		if ok, why := s.converged(ctx); !ok {
			t.Fatalf("statuses under %s moved after it reconciled again: %s", op.name, why)
		}
		now, err := s.digests(ctx)
		if err != nil {
			t.Fatal(err)
		}
		moved = moved[:0]
		for k, d := range prev {
			if now[k] != d {
				moved = append(moved, fmt.Sprintf("%s:\nbefore %s\nafter  %s", k, d, now[k]))
			}
		}
		if len(moved) == 0 {
			t.Logf("%s: statuses settled after %d reconcile round(s)", op.name, round)
			return
		}
		prev = now
	}
	t.Errorf("%s's statuses still moved on the %dth reconcile round with nothing changed: %s", op.name, rounds, strings.Join(moved, "\n"))
}

// addSpareGroup appends a worker group of no replicas to the RayService, and waits for the operator to add it to
// the serving cluster in place (no pod is made, so the UIDs stay KubeRay's). The cluster then carries Manta's spec
// hash: the next operator, KubeRay, must take that cluster over as it is.
func (s *scene) addSpareGroup(t *testing.T, ctx context.Context) {
	zero, one := int32(0), int32(1)
	waitFor(t, ctx, time.Minute, "add a worker group to RayService "+s.service.Name, func() (bool, string) {
		var rs rayv1.RayService
		if err := s.cl.Get(ctx, client.ObjectKeyFromObject(s.service), &rs); err != nil {
			return false, err.Error()
		}
		rs.Spec.RayClusterSpec.WorkerGroupSpecs = append(rs.Spec.RayClusterSpec.WorkerGroupSpecs, rayv1.WorkerGroupSpec{
			GroupName: "spare", Replicas: &zero, MinReplicas: &zero, MaxReplicas: &one, RayStartParams: map[string]string{},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{rayContainer("ray-worker", "400m", "1Gi")}}},
		})
		err := s.cl.Update(ctx, &rs)
		return err == nil, fmt.Sprint(err)
	})
	var rc rayv1.RayCluster
	waitFor(t, ctx, 2*time.Minute, "the spare group added to "+s.serveCluster+" in place", func() (bool, string) {
		if err := s.cl.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.serveCluster}, &rc); err != nil {
			return false, err.Error()
		}
		return len(rc.Spec.WorkerGroupSpecs) == 1 && rc.Annotations["ray.io/num-worker-groups"] == "1",
			fmt.Sprintf("%d worker groups, annotations %v", len(rc.Spec.WorkerGroupSpecs), rc.Annotations)
	})
	t.Logf("RayCluster %s has the spare group; its annotations: %v", rc.Name, rc.Annotations)
}

// checkOneRayJob checks that the RayJob's head knows exactly one Ray job, the RayJob's, and returns how many it
// knows.
func (s *scene) checkOneRayJob(t *testing.T, ctx context.Context) int {
	t.Helper()
	jobs, err := s.dash.ListJobs(ctx)
	if err != nil {
		t.Fatalf("list the jobs of %s's head: %v", s.jobCluster, err)
	}
	if len(jobs) != 1 || jobs[0].SubmissionID != s.jobID {
		var ids []string
		for _, j := range jobs {
			ids = append(ids, fmt.Sprintf("%s (%s, %s)", j.SubmissionID, j.Type, j.Status))
		}
		t.Errorf("the head of %s knows %d Ray jobs %v, want one: %s", s.jobCluster, len(jobs), ids, s.jobID)
	}
	return len(jobs)
}

func (s *scene) headPod(t *testing.T, ctx context.Context, cluster string) string {
	t.Helper()
	pods, err := s.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{
		LabelSelector: rayv1.LabelCluster + "=" + cluster + "," + rayv1.LabelNodeType + "=" + rayv1.NodeTypeHead})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the head pod of %s: %v, %d pods", cluster, err, len(pods.Items))
	}
	return pods.Items[0].Name
}

func (s *scene) kubectlOut(ctx context.Context, args ...string) (string, error) {
	out, err := execOut(ctx, s.kubectl, append([]string{"--kubeconfig", s.c.Kubeconfig}, args...)...)
	return out, err
}

// podReport lists the namespace's pods with their phase and node, for failure messages.
func (s *scene) podReport(ctx context.Context) string {
	pods, err := s.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, p := range pods.Items {
		ready := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				ready = c.Status == corev1.ConditionTrue
			}
		}
		parts = append(parts, fmt.Sprintf("%s %s ready=%v on %s", p.Name, p.Status.Phase, ready, p.Spec.NodeName))
	}
	return "pods: " + strings.Join(parts, ", ")
}

// waitFor polls cond until it holds, failing with cond's last word after timeout.
func waitFor(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not after %s: %s", what, timeout, why)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}
