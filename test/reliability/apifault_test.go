package reliability

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestAPIServerFaults puts the fault proxy between the operator process and the kube-apiserver for the whole test:
// a share of requests is answered 500, 429 or 409 without reaching the API server, some creates are applied and
// then answered 504, others are delayed, and every watch is cut within seconds. Ten RayClusters scale, four
// RayJobs run, a RayService deploys and an ImagePullJob pulls onto three nodes; all converge with no duplicate pod or submission.
func TestAPIServerFaults(t *testing.T) {
	dc, cl := devCluster(t)
	start := time.Now()
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 500))
	ns := namespace(t, cl, "apifaults")
	fray := newFakeRay(seed)
	ledger := watchRayPods(t, t.Context(), dc.RESTConfig())
	pullers := watchPods(t, t.Context(), dc.RESTConfig(), imagepulljob.LabelImagePuller, func(p *corev1.Pod) string {
		return p.Namespace + "/" + p.Labels[imagepulljob.LabelJobUID] + "/" + p.Spec.NodeName
	})
	proxy := startFaultProxy(t, dc.RESTConfig(), seed, apiFaults{
		error500: 0.04, error429: 0.04, error409: 0.05, lostAfterCommit: 0.05,
		delayed: 0.2, maxDelay: 500 * time.Millisecond, maxWatch: 5 * time.Second,
	}, fray)
	restarts := superviseOperator(t, "apifaults", operatorConfig{kubeconfig: proxy.kubeconfig(t), namespaces: []string{ns}})

	const n = 10
	names := make([]string, n)
	desired := make([][]int32, n)
	for i := range names {
		names[i] = clusterName(i)
		r := int32(rng.IntN(4))
		desired[i] = []int32{r}
		if err := cl.Create(t.Context(), smallCluster(ns, names[i], r)); err != nil {
			t.Fatal(err)
		}
	}
	jobs := []*rayv1.RayJob{smallJob(ns, "job-0", false), smallJob(ns, "job-1", true), smallJob(ns, "job-2", false), smallJob(ns, "job-3", true)}
	for _, j := range jobs {
		if err := cl.Create(t.Context(), j); err != nil {
			t.Fatal(err)
		}
	}
	rs := smallService(ns, "serve")
	if err := cl.Create(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	ipj := &mantav1alpha1.ImagePullJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prepull"},
		Spec:       mantav1alpha1.ImagePullJobSpec{Image: "example/app:v1", ImagePullPolicy: mantav1alpha1.PullAlways, Parallelism: ptr.To[int32](2)},
	}
	if err := cl.Create(t.Context(), ipj); err != nil {
		t.Fatal(err)
	}
	// Scale for a while under the faults.
	scales := 0
	for time.Since(start) < 15*time.Second {
		time.Sleep(time.Duration(300+rng.IntN(500)) * time.Millisecond)
		i, r := rng.IntN(n), int32(rng.IntN(4))
		if err := scaleCluster(t.Context(), cl, ns, names[i], r); err != nil {
			t.Fatal(err)
		}
		desired[i] = append(desired[i], r)
		scales++
	}

	waitClusters(t, cl, ledger, ns, names, desired)
	waitJobs(t, cl, ledger, jobs)
	got := &mantav1alpha1.ImagePullJob{}
	testutil.Eventually(t, convergeTimeout, "the ImagePullJob to complete", func() (bool, string) {
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(ipj), got); err != nil {
			return false, err.Error()
		}
		return got.Status.CompletionTime != nil, fmt.Sprintf("%+v", got.Status)
	})
	created, deleted := checkClusterPods(t, ledger, ns, names, desired)
	refused := checkJobsOnce(t, cl, ledger, fray, jobs)
	checkServiceOnce(t, cl, ledger, fray, rs)
	if got.Status.Desired != 3 || got.Status.Succeeded != 3 || got.Status.Failed != 0 {
		t.Errorf("ImagePullJob status %+v; want 3 of 3 nodes succeeded", got.Status)
	}
	perNode := pullers.counts()
	for _, node := range []string{"kwok-node-0", "kwok-node-1", "kwok-node-2"} {
		if c := perNode[ns+"/"+string(got.UID)+"/"+node]; c.created != 1 {
			t.Errorf("puller pods on %s: %s; want exactly one created", node, c)
		}
	}
	requests, faults := proxy.summary()
	t.Logf("seed %d: %d scale changes; %d API requests through the proxy, faults injected: %s; the operator exited and was restarted %d times",
		seed, scales, requests, formatCounts(faults), restarts.Load())
	t.Logf("%d cluster pods created, %d deleted, %d Ray jobs accepted once each (%d repeats refused), 3 puller pods; total %s",
		created, deleted, len(jobs), refused, time.Since(start).Round(time.Millisecond))
}
