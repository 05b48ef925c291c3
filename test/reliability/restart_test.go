package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// Sizes of TestOperatorKilledAndRestarted: the 30 clusters and 10 jobs. Each SIGKILL is followed by a
// restart at once; the chaos lasts about kills × 3 s.
const (
	restartClusters = 30
	restartJobs     = 10
	restartKills    = 6
	convergeTimeout = 4 * time.Minute
)

// TestOperatorKilledAndRestarted SIGKILLs the operator process at random moments while 30 RayClusters scale up and
// down and 10 HTTPMode RayJobs run, restarting it each time. Afterwards every cluster has exactly its desired pods,
// no pod group ever got more pods created than its scale-ups asked for (so no duplicate and, with the final count
// exact, no wrongful delete), every head pod was created once, and every Ray job was accepted once.
func TestOperatorKilledAndRestarted(t *testing.T) {
	dc, cl := devCluster(t)
	start := time.Now()
	ctx := t.Context()
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 14))
	ns := namespace(t, cl, "restarts")
	fray := newFakeRay(seed)
	ledger := watchRayPods(t, ctx, dc.RESTConfig())

	oc := operatorConfig{kubeconfig: startClusterProxy(t, dc.RESTConfig(), fray).kubeconfig(t), namespaces: []string{ns}}
	var procMu sync.Mutex
	op := startOperator(t, "operator-0", oc)

	// desired[i] is every worker replica count cluster i was set to, in order.
	desired := make([][]int32, restartClusters)
	for i := range restartClusters {
		r := int32(rng.IntN(4))
		desired[i] = []int32{r}
		if err := cl.Create(ctx, smallCluster(ns, clusterName(i), r)); err != nil {
			t.Fatal(err)
		}
	}
	jobs := make([]*rayv1.RayJob, restartJobs)
	for i := range restartJobs {
		jobs[i] = smallJob(ns, fmt.Sprintf("job-%d", i), i%2 == 0)
		if err := cl.Create(ctx, jobs[i]); err != nil {
			t.Fatal(err)
		}
	}

	// Chaos: one goroutine kills and restarts the operator, this one scales clusters until the kills are done.
	killsDone := make(chan struct{})
	var killTimes []time.Duration
	go func() {
		defer close(killsDone)
		krng := rand.New(rand.NewPCG(seed, 41))
		for k := 1; k <= restartKills; k++ {
			// A random moment: anywhere from mid start-up to well into steady reconciling.
			pause := time.Duration(500+krng.IntN(4500)) * time.Millisecond
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return
			}
			procMu.Lock()
			op.kill(t)
			killTimes = append(killTimes, time.Since(start))
			op = startOperator(t, fmt.Sprintf("operator-%d", k), oc)
			procMu.Unlock()
		}
	}()
	scales := 0
	for done := false; !done; {
		select {
		case <-killsDone:
			done = true
		case <-time.After(time.Duration(200+rng.IntN(600)) * time.Millisecond):
		}
		for range 1 + rng.IntN(5) {
			i := rng.IntN(restartClusters)
			r := int32(rng.IntN(4))
			if err := scaleCluster(ctx, cl, ns, clusterName(i), r); err != nil {
				t.Fatal(err)
			}
			desired[i] = append(desired[i], r)
			scales++
		}
	}
	chaos := time.Since(start)
	t.Logf("seed %d: %d SIGKILLs at %v, %d scale changes, chaos over after %s", seed, len(killTimes), roundAll(killTimes), scales, chaos.Round(time.Millisecond))

	// Convergence, as the last operator process sees it; then the absences: nothing created twice, nothing
	// deleted that should have stayed, nothing submitted twice.
	names := make([]string, restartClusters)
	for i := range names {
		names[i] = clusterName(i)
	}
	waitClusters(t, cl, ledger, ns, names, desired)
	waitJobs(t, cl, ledger, jobs)
	t.Logf("converged %s after the chaos", (time.Since(start) - chaos).Round(time.Millisecond))
	created, deleted := checkClusterPods(t, ledger, ns, names, desired)
	refused := checkJobsOnce(t, cl, ledger, fray, jobs)
	t.Logf("%d cluster pods created and %d deleted, %d RayJob pods created (%d pods in the namespace); %d Ray jobs accepted once each, %d repeated submissions refused by Ray; total %s",
		created, deleted, 2*len(jobs), ledger.createdIn(ns), len(jobs), refused, time.Since(start).Round(time.Millisecond))
}

func clusterName(i int) string { return fmt.Sprintf("rc-%02d", i) }

// smallCluster is a RayCluster with one worker group "w" of tiny pods.
func smallCluster(ns, name string, replicas int32) *rayv1.RayCluster {
	rc := testutil.MakeRayCluster(ns, name).Workers("w", replicas).Obj()
	rc.Spec.HeadGroupSpec.Template = testutil.RayPodTemplate("ray-head", "100m", "256Mi")
	rc.Spec.WorkerGroupSpecs[0].Template = testutil.RayPodTemplate("ray-worker", "100m", "128Mi")
	return rc
}

// smallJob is an HTTPMode RayJob with a one-worker cluster of tiny pods.
func smallJob(ns, name string, shutdown bool) *rayv1.RayJob {
	rc := smallCluster(ns, "unused", 1)
	rc.Spec.WorkerGroupSpecs[0].MinReplicas, rc.Spec.WorkerGroupSpecs[0].MaxReplicas = ptr.To[int32](1), ptr.To[int32](1)
	return &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: rayv1.RayJobSpec{
			Entrypoint: `python -c "print(6*7)"`, SubmissionMode: rayv1.HTTPMode,
			ShutdownAfterJobFinishes: shutdown, RayClusterSpec: &rc.Spec,
		},
	}
}

func scaleCluster(ctx context.Context, cl client.Client, ns, name string, replicas int32) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		rc := &rayv1.RayCluster{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, rc); err != nil {
			return err
		}
		rc.Spec.WorkerGroupSpecs[0].Replicas = ptr.To(replicas)
		return cl.Update(ctx, rc)
	})
}

// testSeed is $MANTA_RELIABILITY_SEED, or a fresh one; tests log it so a failure can be replayed.
func testSeed(t *testing.T) uint64 {
	if s := os.Getenv("MANTA_RELIABILITY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

func roundAll(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Round(100*time.Millisecond).String())
	}
	return "[" + strings.Join(s, " ") + "]"
}
