package bench

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
)

// clusterResult is what one batch of RayClusters cost, from the first create to the last cluster seen ready.
type clusterResult struct {
	clusters, podsPerCluster int
	create, total            time.Duration
	latencies                []time.Duration // per cluster, from its create to first seen ready
	calls                    callCounts
	reconciles               float64
	pods                     podTimeline
	peakRate                 int // most operator requests in one second
}

// createClustersAndWait creates the clusters (up to 10 creates in flight, like clusterloader2 at 100 qps), waits
// until all are ready and measures what it took and what the operator asked of the API server.
func (e *env) createClustersAndWait(b testing.TB, op *operatorRun, run string, clusters []client.Object, podsPerCluster int, timeout time.Duration) clusterResult {
	b.Helper()
	before, rec0 := op.calls.snapshot(), reconciles("raycluster")
	start := time.Now()
	created := e.createAll(b, 10, clusters)
	createDone := time.Now()
	readyAt := e.waitClustersReady(b, run, len(clusters), timeout)
	r := clusterResult{
		clusters: len(clusters), podsPerCluster: podsPerCluster,
		create: createDone.Sub(start), calls: op.calls.since(before),
	}
	for i, o := range clusters {
		at := readyAt[o.GetNamespace()+"/"+o.GetName()]
		r.latencies = append(r.latencies, at.Sub(created[i]))
		r.total = max(r.total, at.Sub(start))
	}
	r.reconciles = reconciles("raycluster") - rec0
	r.peakRate = op.calls.peakRate(start, start.Add(r.total))
	namespaces := map[string]bool{}
	var nsList []string
	for _, o := range clusters {
		if !namespaces[o.GetNamespace()] {
			namespaces[o.GetNamespace()] = true
			nsList = append(nsList, o.GetNamespace())
		}
	}
	if len(clusters) == 1 {
		r.pods = e.podTimeline(b, start, nsList, client.MatchingLabels{"ray.io/cluster": clusters[0].GetName()})
	} else {
		r.pods = e.podTimeline(b, start, nsList, client.HasLabels{"ray.io/cluster"})
	}
	return r
}

func (r clusterResult) report(b *testing.B) {
	p50, p90, p99, maxS := percentiles(r.latencies)
	n := float64(r.clusters)
	b.ReportMetric(secs(r.create), "create-s")
	b.ReportMetric(secs(r.total-r.create), "wait-ready-s")
	b.ReportMetric(secs(r.total), "total-s")
	b.ReportMetric(p50, "p50-cluster-ready-s")
	b.ReportMetric(p99, "p99-cluster-ready-s")
	b.ReportMetric(float64(r.calls.writes())/n, "writes/cluster")
	b.ReportMetric(float64(r.calls.total())/n, "requests/cluster")
	b.ReportMetric(r.reconciles/n, "reconciles/cluster")
	b.Logf("%d RayClusters x %d pods: created in %.2fs, all ready %.2fs after the first create (wait-ready step %.2fs)",
		r.clusters, r.podsPerCluster, secs(r.create), secs(r.total), secs(r.total-r.create))
	b.Logf("  per cluster, create -> ready: p50 %.2fs  p90 %.2fs  p99 %.2fs  max %.2fs", p50, p90, p99, maxS)
	b.Logf("  operator: %d requests (%.0f/s, peak %d/s at a client limit of %d/s), %d writes; per cluster %.1f writes, %.1f requests, %.1f reconciles",
		r.calls.total(), float64(r.calls.total())/secs(r.total), r.peakRate, operatorQPS, r.calls.writes(), float64(r.calls.writes())/n, float64(r.calls.total())/n, r.reconciles/n)
	b.Logf("  %s", r.pods)
	detailf(b, "operator API requests from the first create until all ready:\n%s", r.calls)
}

// BenchmarkRayClusterThroughput creates 100 RayClusters (1 head + 3 workers) across 10 namespaces, the shape of
// KubeRay's 100-raycluster clusterloader2 test, and measures the create step and the wait until every cluster's
// status.state is ready. MANTA_BENCH_RAYCLUSTERS=1000 (a multiple of 10) runs the 1000-raycluster shape instead.
func BenchmarkRayClusterThroughput(b *testing.B) {
	const perNamespace, workers = 10, 3
	total := 100
	if v := os.Getenv("MANTA_BENCH_RAYCLUSTERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n%perNamespace != 0 {
			b.Fatalf("MANTA_BENCH_RAYCLUSTERS=%q: want a positive multiple of %d", v, perNamespace)
		}
		total = n
	}
	namespaces := total / perNamespace
	// Pods of 1 CPU each, about 20 to a node of 32 CPUs.
	nodes := max(20, total*(1+workers)/20)
	e := startEnv(b, 55*time.Minute, devcluster.Options{Nodes: nodes, NodeCPU: "32", NodeMemory: "128Gi", NodeMaxPods: 110})
	var nsNames []string
	for i := range namespaces {
		nsNames = append(nsNames, fmt.Sprintf("bench-tp-%d", i))
	}
	e.createNamespaces(b, nsNames...)
	op := e.startOperator(b, operator.Options{})

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run := fmt.Sprintf("throughput-%d", i)
		var clusters []client.Object
		for _, ns := range nsNames {
			for j := range perNamespace {
				clusters = append(clusters, rayCluster(ns, fmt.Sprintf("rc-%d-%d", i, j), run, workers))
			}
		}
		r := e.createClustersAndWait(b, op, run, clusters, 1+workers, 45*time.Minute)
		b.StopTimer()
		r.report(b)
		b.StartTimer()
	}
}

// BenchmarkRayClusterLarge measures one RayCluster with 100 workers, then one with 500, from create to ready.
func BenchmarkRayClusterLarge(b *testing.B) {
	// 602 pods of 1 CPU each on 24 nodes of 32 CPUs.
	e := startEnv(b, 30*time.Minute, devcluster.Options{Nodes: 24, NodeCPU: "32", NodeMemory: "128Gi", NodeMaxPods: 110})
	const ns = "bench-large"
	e.createNamespaces(b, ns)
	op := e.startOperator(b, operator.Options{})
	for _, workers := range []int{100, 500} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				run := fmt.Sprintf("large-%d-%d", workers, i)
				c := rayCluster(ns, run, run, int32(workers))
				r := e.createClustersAndWait(b, op, run, []client.Object{c}, 1+workers, 10*time.Minute)
				b.StopTimer()
				b.ReportMetric(secs(r.total), "ready-s")
				b.ReportMetric(float64(r.calls.writes()), "writes")
				b.ReportMetric(float64(r.calls.total()), "requests")
				b.ReportMetric(r.reconciles, "reconciles")
				b.Logf("1 RayCluster with %d workers: ready %.2fs after create (%.0f pods/s); operator: %d requests (peak %d/s), %d writes, %.0f reconciles",
					workers, secs(r.total), float64(1+workers)/secs(r.total), r.calls.total(), r.peakRate, r.calls.writes(), r.reconciles)
				b.Logf("  %s", r.pods)
				detailf(b, "operator API requests from create until ready:\n%s", r.calls)
				b.StartTimer()
			}
		})
	}
}
