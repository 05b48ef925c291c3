package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/idle"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
	"github.com/manta-dev/manta/internal/testutil/podnet"
)

// idleResult is one trial of BenchmarkSideBySideIdle.
type idleResult struct {
	Trial    string   `json:"trial"` // "annotated" or "plain"
	Clusters int      `json:"clusters"`
	Args     []string `json:"args,omitempty"`
	// Window is the measured idle window: every cluster ready, the operator quiescent, nothing changed by the harness.
	Window idleFigures `json:"window"`
	// RayReadsPerClusterPerMin counts the requests the fake heads answered, by API; OperatorReadsPerClusterPerMin
	// is the operator's own count (manta_idle_check_reads_total, by API and outcome); ProxiedPerClusterPerMin is the
	// requests to Ray the API server proxied (the operator reaches heads through it here).
	RayReadsPerClusterPerMin      map[string]float64 `json:"rayReadsPerClusterPerMinute"`
	OperatorReadsPerClusterPerMin map[string]float64 `json:"operatorIdleReadsPerClusterPerMinute"`
	ProxiedPerClusterPerMin       float64            `json:"proxiedRayRequestsPerClusterPerMinute"`
	// ReadBound is the most the idle controller may read per cluster per minute at its check interval: four APIs
	// per check.
	ReadBound float64 `json:"readBoundPerClusterPerMinute"`
	// Suspend (annotated trial): the timeout lowered to the minimum on every cluster at once, until every cluster
	// is suspended and its pods gone.
	Suspend *suspendFigures `json:"suspend,omitempty"`
}

// suspendFigures time the suspension of every cluster once their timeout has passed.
type suspendFigures struct {
	AllSuspendedS  float64 `json:"allSuspendedSeconds"`
	PodsGoneS      float64 `json:"podsGoneSeconds"`
	WritesPerClust float64 `json:"operatorWritesPerCluster"`
	CPUSeconds     float64 `json:"operatorCPUSeconds"`
}

// BenchmarkSideBySideIdle measures what idle suspension (manta.dev/idle-timeout) costs an idle fleet, and what
// suspending it costs: two trials of Manta, each on a fresh dev cluster whose head pods answer at their IPs with
// fake Ray heads that run nothing (podnet, fakeray), Manta reaching them through the API server's proxy. The
// "plain" trial's RayClusters carry no annotation; the "annotated" trial's carry a timeout longer than the run.
// Each trial creates the clusters (1 head + 1 worker), waits until all are ready and the operator is quiescent,
// then measures an idle window: the operator's CPU, requests and writes per minute, the reads the heads answered
// per cluster per minute by API, and the operator's own count of them. The annotated trial then lowers every
// cluster's timeout to idle.MinTimeout at once and times until all are suspended and their pods gone. Settings:
//
//	MANTA_BENCH_IDLE_CLUSTERS  RayClusters per trial (default 500)
//	MANTA_BENCH_IDLE_WINDOW    the idle window (default 5m)
//	MANTA_BENCH_IDLE_JSON      where to write the results (default <tmp>/manta-bench/idle.json)
//
// Needs root (network namespaces), and no other oracle or bench run routing podnet.Range.
func BenchmarkSideBySideIdle(b *testing.B) {
	clusters := envInts(b, "MANTA_BENCH_IDLE_CLUSTERS", []int{500})[0]
	window, err := time.ParseDuration(envOr("MANTA_BENCH_IDLE_WINDOW", "5m"))
	if err != nil || window <= 0 {
		b.Fatalf("MANTA_BENCH_IDLE_WINDOW: want a duration such as 5m")
	}
	bin := testutil.BuildManta(b)
	var results []idleResult
	for i := 0; i < b.N; i++ {
		for _, trial := range []string{"plain", "annotated"} {
			results = append(results, runIdleTrial(b, trial, bin, clusters, window))
		}
	}
	table := idleTable(results)
	out := envOr("MANTA_BENCH_IDLE_JSON", filepath.Join(os.TempDir(), "manta-bench", "idle.json"))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		b.Fatal(err)
	}
	data, _ := json.MarshalIndent(map[string]any{"trials": results, "table": table}, "", "  ")
	if err := os.WriteFile(out, data, 0o644); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "\n%s\nresults written to %s\n", table, out)
}

// runIdleTrial is one trial on a dev cluster of its own.
func runIdleTrial(b *testing.B, trial, bin string, clusters int, window time.Duration) idleResult {
	b.Helper()
	const perNamespace = 10
	pn, err := podnet.New()
	if err != nil {
		b.Fatal(err)
	}
	defer pn.Close()
	// podnet has pod CIDRs for 16 nodes of 254 addresses; each cluster has two pods, and the scheduler need not
	// spread them evenly.
	if clusters > 1600 {
		b.Fatalf("MANTA_BENCH_IDLE_CLUSTERS=%d: at most 1600 fit the pod network", clusters)
	}
	e := startEnvFor(b, 60*time.Minute, devcluster.Options{Nodes: 16, NodeCPU: "1000", NodeMemory: "4000Gi", NodeMaxPods: 1000})
	defer e.stop()
	if err := podnet.SetNodeCIDRs(e.ctx, e.cl); err != nil {
		b.Fatal(err)
	}
	heads := serveFakeHeads(b, e, pn)
	defer heads.close()
	var nsNames []string
	for i := range (clusters + perNamespace - 1) / perNamespace {
		nsNames = append(nsNames, fmt.Sprintf("bench-idle-%d", i))
	}
	e.createNamespaces(b, nsNames...)
	run := "idle-" + trial
	c := contenders["manta"]
	c.args = withKubernetesProxy(c.args)
	op := startOperatorProcess(b, e, c, bin)
	defer op.stop()
	r := idleResult{Trial: trial, Clusters: clusters, Args: op.args[1:]}

	var objs []client.Object
	for i := range clusters {
		rc := rayCluster(nsNames[i/perNamespace], fmt.Sprintf("rc-%d", i), run, 1)
		if trial == "annotated" {
			// Longer than the run: the window measures checks, not suspensions.
			rc.Annotations = map[string]string{idle.AnnotationIdleTimeout: "24h"}
		}
		objs = append(objs, rc)
	}
	e.createAll(b, 4, objs)
	e.waitClustersReady(b, run, clusters, 30*time.Minute)
	snap := op.scrape(b)
	if _, reached := waitQuiescent(b, e, op, counted{readAt: time.Now(), serverWrites: serverWrites(e.serverRequests(b)),
		operatorWrites: operatorWrites(snap.requests)}); !reached {
		b.Fatalf("%s: not quiescent once its clusters were ready", trial)
	}

	reads0, own0, served0 := heads.readsByAPI(), idleReads(b, op), e.serverRequests(b)
	r.Window = *measureIdle(b, e, op, window, false)
	reads1, own1, served1 := heads.readsByAPI(), idleReads(b, op), e.serverRequests(b)
	perClusterMin := func(v float64) float64 {
		return math.Round(v/float64(clusters)/r.Window.Seconds*60*1000) / 1000
	}
	r.RayReadsPerClusterPerMin, r.OperatorReadsPerClusterPerMin = map[string]float64{}, map[string]float64{}
	for k, v := range reads1 {
		r.RayReadsPerClusterPerMin[k] = perClusterMin(float64(v - reads0[k]))
	}
	for k, v := range own1 {
		r.OperatorReadsPerClusterPerMin[k] = perClusterMin(v - own0[k])
	}
	r.ProxiedPerClusterPerMin = perClusterMin(proxied(served1) - proxied(served0))
	r.ReadBound = 4 * time.Minute.Seconds() / idle.DefaultCheckInterval.Seconds()
	total := 0.0
	for _, v := range r.RayReadsPerClusterPerMin {
		total += v
	}
	switch {
	case trial == "plain" && total > 0:
		b.Errorf("plain trial: the heads answered %.3f reads per cluster per minute; no cluster asked for idle checks", total)
	case trial == "annotated" && (total == 0 || total > r.ReadBound):
		b.Errorf("annotated trial: %.3f reads per cluster per minute, want more than 0 and at most %.0f", total, r.ReadBound)
	}
	progressf(b, "%s, %d clusters, idle %.0fs: operator CPU %.2f%% of a core, writes/min %.1f, Ray reads/cluster/min %v (operator's count %v), proxied/cluster/min %.3f",
		trial, clusters, r.Window.Seconds, r.Window.CPUPercent, r.Window.WritesPerMin, r.RayReadsPerClusterPerMin, r.OperatorReadsPerClusterPerMin, r.ProxiedPerClusterPerMin)
	if trial == "annotated" {
		r.Suspend = suspendAll(b, e, op, run, objs)
	}
	return r
}

// suspendAll lowers every cluster's idle timeout to the minimum, which each has been idle longer than, and times
// until every one is suspended (state suspended) and its pods are gone.
func suspendAll(b *testing.B, e *trialEnv, op *opProcess, run string, objs []client.Object) *suspendFigures {
	b.Helper()
	before, cpu0 := op.scrape(b), procCPUSeconds(op.cmd.Process.Pid)
	start := time.Now()
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`,
		idle.AnnotationIdleTimeout, idle.MinTimeout.String())))
	for _, o := range objs {
		if err := e.cl.Patch(e.ctx, o.DeepCopyObject().(client.Object), patch); err != nil {
			b.Fatalf("lower the idle timeout of %s/%s: %v", o.GetNamespace(), o.GetName(), err)
		}
	}
	f := &suspendFigures{}
	n := len(objs)
	waitFor(b, e.ctx, fmt.Sprintf("%d RayClusters suspended", n), 20*time.Minute, max(time.Second, time.Duration(n)*2*time.Millisecond),
		func(ctx context.Context) (bool, string, error) {
			var list rayv1.RayClusterList
			if err := e.cl.List(ctx, &list, client.MatchingLabels{benchLabel: run}); err != nil {
				return false, "", nil
			}
			suspended := 0
			for _, c := range list.Items {
				if c.Status.State == rayv1.Suspended {
					suspended++
				}
			}
			return suspended == n, fmt.Sprintf("%d/%d suspended", suspended, n), nil
		})
	f.AllSuspendedS = time.Since(start).Seconds()
	waitFor(b, e.ctx, "every pod of the suspended clusters gone", 20*time.Minute, max(time.Second, time.Duration(n)*2*time.Millisecond),
		func(ctx context.Context) (bool, string, error) {
			var pods corev1.PodList
			if err := e.cl.List(ctx, &pods, client.HasLabels{rayv1.LabelCluster}); err != nil {
				return false, "", nil
			}
			return len(pods.Items) == 0, fmt.Sprintf("%d pods left", len(pods.Items)), nil
		})
	f.PodsGoneS = time.Since(start).Seconds()
	snap := op.scrape(b)
	if _, reached := waitQuiescent(b, e, op, counted{readAt: time.Now(), serverWrites: serverWrites(e.serverRequests(b)),
		operatorWrites: operatorWrites(snap.requests)}); !reached {
		b.Errorf("not quiescent after the suspensions")
	}
	f.WritesPerClust = math.Round(operatorWrites(op.scrape(b).minus(before).requests)/float64(n)*100) / 100
	f.CPUSeconds = math.Round((procCPUSeconds(op.cmd.Process.Pid)-cpu0)*100) / 100
	progressf(b, "suspend: %d clusters suspended in %.1fs, pods gone in %.1fs, %.2f operator writes per cluster, %.1f CPU-s",
		n, f.AllSuspendedS, f.PodsGoneS, f.WritesPerClust, f.CPUSeconds)
	return f
}

// idleReads is the operator's manta_idle_check_reads_total by "api/outcome".
func idleReads(b *testing.B, op *opProcess) map[string]float64 {
	b.Helper()
	text, err := httpGet(op.metrics)
	if err != nil {
		b.Fatalf("scrape %s: %v", op.metrics, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, "manta_idle_check_reads_total{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		var v float64
		if _, err := fmt.Sscan(value, &v); err != nil {
			continue
		}
		out[labelValue(labels, "api")+"/"+labelValue(labels, "outcome")] += v
	}
	return out
}

// proxied sums the API server's requests to a services or pods proxy subresource.
func proxied(served map[string]float64) float64 {
	n := 0.0
	for k, v := range served {
		if f := strings.Fields(k); len(f) == 2 && strings.HasSuffix(f[1], "/proxy") {
			n += v
		}
	}
	return n
}

// idleTable is the results as a Markdown table.
func idleTable(rs []idleResult) string {
	var sb strings.Builder
	sb.WriteString("| trial | clusters | idle window | operator CPU (% of a core) | operator requests per minute by verb | operator writes per minute | Ray reads per cluster per minute (at the heads) | proxied Ray requests per cluster per minute | bound | suspend all: suspended / pods gone / writes per cluster / CPU-s |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		susp := "-"
		if s := r.Suspend; s != nil {
			susp = fmt.Sprintf("%.1f s / %.1f s / %.2f / %.1f", s.AllSuspendedS, s.PodsGoneS, s.WritesPerClust, s.CPUSeconds)
		}
		total := 0.0
		for _, v := range r.RayReadsPerClusterPerMin {
			total += v
		}
		fmt.Fprintf(&sb, "| %s | %d | %.0f s | %.2f | %s | %.1f | %.2f (%s) | %.2f | %.0f | %s |\n", r.Trial, r.Clusters, r.Window.Seconds,
			r.Window.CPUPercent, verbs(r.Window.RequestsPerMin), r.Window.WritesPerMin, total, byAPI(r.RayReadsPerClusterPerMin),
			r.ProxiedPerClusterPerMin, r.ReadBound, susp)
	}
	return sb.String()
}

// byAPI formats reads by API, sorted: "actors 1.00, jobs 1.00"; "-" when none.
func byAPI(m map[string]float64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.2f", k, m[k])
	}
	return strings.Join(parts, ", ")
}
