package bench

import (
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
)

// stalenessMetric is Manta's histogram of how long a status write's changes were held back.
const stalenessMetric = "manta_raycluster_status_staleness_seconds"

// steadyWindow is how long the API calls benchmark watches a settled operator.
const steadyWindow = 30 * time.Second

// BenchmarkOperatorAPICalls counts the operator's requests to the API server, by verb and resource: at start-up,
// from creating 10 RayClusters (1 head + 3 workers) until all are ready and on until the operator is quiescent
// (the events and statuses it writes after ready belong to the clusters), and in a steady state where nothing
// changes for 30 s, which should cost no writes at all.
func BenchmarkOperatorAPICalls(b *testing.B) {
	const clusters, workers = 10, 3
	e := startEnv(b, 15*time.Minute, devcluster.Options{Nodes: 4, NodeCPU: "32", NodeMemory: "128Gi", NodeMaxPods: 110})
	const ns = "bench-calls"
	e.createNamespaces(b, ns)
	op := e.startOperator(b, operator.Options{})
	startup := op.calls.snapshot()
	b.Logf("operator start-up until caches synced: %d requests, %d writes", startup.total(), startup.writes())
	detailf(b, "operator API requests at start-up:\n%s", startup)

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run := fmt.Sprintf("calls-%d", i)
		var objs []client.Object
		for j := range clusters {
			objs = append(objs, rayCluster(ns, fmt.Sprintf("rc-%d-%d", i, j), run, workers))
		}
		from, stale0 := op.calls.snapshot(), registryHistogram(stalenessMetric)
		r := e.createClustersAndWait(b, op, run, objs, 1+workers, 5*time.Minute)

		b.StopTimer()
		// Writes that land just after the last cluster turned ready (a late status or event) belong to the
		// reconcile-to-ready phase, not to the steady state: wait until the operator has processed a later change
		// to every cluster and sent its events.
		settleFrom, settleStart := op.calls.snapshot(), time.Now()
		e.settle(b, op, run, time.Minute)
		quiesceTook := e.quiesce(b, op, 5*time.Minute)
		settle, settleTook := op.calls.since(settleFrom), time.Since(settleStart).Round(time.Millisecond)
		// Everything the operator did for the clusters: from the first create until it was quiescent. The touches
		// of settle ask for no write, so every write here is one the clusters caused.
		all := op.calls.since(from)
		stale := stalenessP50P99(registryHistogram(stalenessMetric).minus(stale0))
		steadyFrom, rec0 := op.calls.snapshot(), reconciles("raycluster")
		e.sleep(steadyWindow)
		steady := op.calls.since(steadyFrom)
		steadyReconciles := reconciles("raycluster") - rec0

		n := float64(clusters)
		b.ReportMetric(float64(all.writes())/n, "writes/cluster")
		b.ReportMetric(float64(r.calls.writes())/n, "ready-writes/cluster")
		b.ReportMetric(float64(r.calls.total())/n, "requests/cluster")
		b.ReportMetric(r.reconciles/n, "reconciles/cluster")
		b.ReportMetric(float64(steady.writes()), "steady-writes")
		b.ReportMetric(float64(steady.total()), "steady-requests")
		b.Logf("%d RayClusters x %d pods, create -> all ready in %.2fs: %d requests, %d writes, %.0f reconciles", clusters, 1+workers,
			secs(r.total), r.calls.total(), r.calls.writes(), r.reconciles)
		perCluster := func(cc callCounts) string {
			return fmt.Sprintf("%.1f writes (%.1f pod creates, %.1f status updates, %.1f events)", float64(cc.writes())/n,
				float64(cc.count("create", "pods"))/n, float64(cc.count("", "rayclusters.ray.io/status"))/n, float64(cc.count("", "events"))/n)
		}
		b.Logf("  per cluster at all-ready: %s, %.1f requests, %.1f reconciles", perCluster(r.calls), float64(r.calls.total())/n, r.reconciles/n)
		b.Logf("  per cluster to quiescence: %s", perCluster(all))
		if stale != nil {
			b.ReportMetric(stale[0], "status-staleness-p50-s")
			b.ReportMetric(stale[1], "status-staleness-p99-s")
			b.Logf("  status staleness (manta_raycluster_status_staleness_seconds): p50 %.2fs, p99 %.2fs", stale[0], stale[1])
		}
		b.Logf("  settling after ready (%s, quiescent after %s more): %d requests, %d writes", settleTook, quiesceTook.Round(time.Millisecond), settle.total(), settle.writes())
		b.Logf("  steady state, %s with no changes: %d requests, %d writes, %.0f reconciles", steadyWindow, steady.total(), steady.writes(), steadyReconciles)
		detailf(b, "operator API requests from the first create until all ready:\n%s", r.calls)
		if settle.total() > 0 {
			detailf(b, "operator API requests settling after ready (%s):\n%s", settleTook, settle)
		}
		if steady.total() > 0 {
			detailf(b, "operator API requests in the steady state:\n%s", steady)
		}
		if steady.writes() > 0 {
			b.Errorf("the operator wrote %d times in %s with nothing changing; want 0:\n%s", steady.writes(), steadyWindow, steady)
		}
		b.StartTimer()
	}
}
