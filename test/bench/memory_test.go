package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
)

// KubeRay v0.6.0's operator memory in its Exp 3 (a 5-pod RayCluster every 60 s up to 30 clusters / 150 pods);
// reference/kuberay-compat.md section 8. It is the operator container's memory on GKE, not a Go heap figure.
const kuberayMemory150PodsMB = 41.6

// cacheCounts is how many objects the operator's informer cache holds, by kind.
type cacheCounts struct{ pods, services, rayClusters int }

func (c cacheCounts) String() string {
	return fmt.Sprintf("%d pods, %d services, %d RayClusters", c.pods, c.services, c.rayClusters)
}

// cached lists the kinds the RayCluster controller already watches, so listing starts no new informer.
func (op *operatorRun) cached(b testing.TB, ctx context.Context) cacheCounts {
	b.Helper()
	c := op.mgr.GetCache()
	var pods corev1.PodList
	var svcs corev1.ServiceList
	var rcs rayv1.RayClusterList
	for _, l := range []client.ObjectList{&pods, &svcs, &rcs} {
		if err := c.List(ctx, l); err != nil {
			b.Fatalf("list %T from the operator's cache: %v", l, err)
		}
	}
	return cacheCounts{len(pods.Items), len(svcs.Items), len(rcs.Items)}
}

// BenchmarkOperatorMemory measures the operator's Go heap (in use, after GC) and its informer cache with 2,000
// plain pods in the cluster that are not Ray pods, before and after 30 RayClusters of 5 pods (150 Ray pods, the
// end point of KubeRay's memory benchmark). The cache holds only Ray pods, so the 2,000 must not show up.
func BenchmarkOperatorMemory(b *testing.B) {
	const plainPods, plainNamespaces = 2000, 4
	const clusters, workers = 30, 4
	// 2,150 pods on 24 nodes of 110 pods; the Ray pods take 1 CPU each.
	e := startEnv(b, 20*time.Minute, devcluster.Options{Nodes: 24, NodeCPU: "32", NodeMemory: "128Gi", NodeMaxPods: 110})
	var plainNS []string
	for i := range plainNamespaces {
		plainNS = append(plainNS, fmt.Sprintf("bench-plain-%d", i))
	}
	const rayNS = "bench-mem"
	e.createNamespaces(b, append(plainNS, rayNS)...)

	var objs []client.Object
	for i := range plainPods {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: plainNS[i%plainNamespaces], Name: fmt.Sprintf("plain-%d", i), Labels: map[string]string{"app": "plain"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
		})
	}
	created := e.createAll(b, 32, objs)
	objs = nil
	progressf(b, "%d plain pods created in %.1fs", plainPods, secs(created[len(created)-1].Sub(created[0])))
	waitFor(b, e.ctx, fmt.Sprintf("%d plain pods Running", plainPods), 10*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string, error) {
		running := 0
		for _, ns := range plainNS {
			var pods corev1.PodList
			if err := e.cl.List(ctx, &pods, client.InNamespace(ns)); err != nil {
				return false, "", nil
			}
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
		}
		return running == plainPods, fmt.Sprintf("%d/%d Running", running, plainPods), nil
	})

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		base := heap()
		op := e.startOperator(b, operator.Options{})
		idle := heap()
		idleCache := op.cached(b, e.ctx)

		run := fmt.Sprintf("mem-%d", i)
		var rcs []client.Object
		for j := range clusters {
			rcs = append(rcs, rayCluster(rayNS, fmt.Sprintf("rc-%d-%d", i, j), run, workers))
		}
		r := e.createClustersAndWait(b, op, run, rcs, 1+workers, 10*time.Minute)
		rcs = nil
		b.StopTimer()
		// Let the last status writes and events drain, so the heap is the settled operator's.
		e.sleep(3 * time.Second)
		ready := heap()
		readyCache := op.cached(b, e.ctx)
		var all corev1.PodList
		if err := e.cl.List(e.ctx, &all); err != nil {
			b.Fatal(err)
		}
		rss := rssMiB()
		op.stop()
		unscopedMB, unscopedPods := e.unscopedPodCacheMiB(b)

		idleMB := mib(idle.HeapInuse) - mib(base.HeapInuse)
		readyMB := mib(ready.HeapInuse) - mib(base.HeapInuse)
		b.ReportMetric(idleMB, "idle-heap-MiB")
		b.ReportMetric(readyMB, "ready-heap-MiB")
		b.ReportMetric(unscopedMB, "unscoped-pod-cache-MiB")
		b.ReportMetric(float64(readyCache.pods), "cached-pods")
		b.ReportMetric(float64(len(all.Items)), "cluster-pods")
		b.Logf("operator Go heap in use (after GC, over the %.1f MiB the harness held before the operator started):", mib(base.HeapInuse))
		b.Logf("  idle, %d plain pods in the cluster: %.1f MiB; cache: %s", plainPods, idleMB, idleCache)
		b.Logf("  %d RayClusters x %d pods ready (%.1fs), %d pods in the cluster: %.1f MiB; cache: %s",
			clusters, 1+workers, secs(r.total), len(all.Items), readyMB, readyCache)
		b.Logf("  (live heap objects %.1f -> %.1f -> %.1f MiB; whole test process RSS %.0f MiB, harness included)",
			mib(base.HeapAlloc), mib(idle.HeapAlloc), mib(ready.HeapAlloc), rss)
		b.Logf("  for contrast, an unscoped pod cache (%d pods) alone costs %.1f MiB", unscopedPods, unscopedMB)
		b.Logf("  KubeRay v0.6.0 operator container at 30 RayClusters / 150 pods: %.1f MB (Exp 3; working set, not Go heap)", kuberayMemory150PodsMB)
		// Each iteration leaves its RayClusters in place.
		if rayPods := (i + 1) * clusters * (1 + workers); idleCache.pods != rayPods-clusters*(1+workers) || readyCache.pods != rayPods {
			b.Errorf("the operator's cache holds %d pods idle and %d with %d Ray pods running: the pod cache is not scoped to Ray pods",
				idleCache.pods, readyCache.pods, rayPods)
		}
		b.StartTimer()
	}
}

// unscopedPodCacheMiB is the heap an informer cache of every pod in the cluster costs (what the operator would
// hold without its label-scoped pod cache), measured like the operator's heap.
func (e *env) unscopedPodCacheMiB(b testing.TB) (float64, int) {
	b.Helper()
	base := heap()
	c, err := cache.New(e.admin, cache.Options{Scheme: e.cl.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	if _, err := c.GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false)); err != nil {
		b.Fatalf("unscoped pod informer: %v", err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("unscoped pod cache did not sync")
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		b.Fatal(err)
	}
	n := len(pods.Items)
	after := heap()
	return mib(after.HeapInuse) - mib(base.HeapInuse), n
}
