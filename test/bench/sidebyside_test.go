package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/sys/liveproc"
	"github.com/manta-dev/manta/internal/testutil"
)

// contender is one side of the race: the raw ceiling (no operator; the harness creates the same pods bare) or an
// operator binary run as its own process with its shipped defaults plus the flags a benchmark needs.
type contender struct {
	name string
	// args builds the operator's command line (nil for the raw ceiling).
	args func(bin, kubeconfig, metricsAddr, pprofAddr string) []string
	// kuberayCRDs installs KubeRay's own CRDs in the contender's dev cluster instead of Manta's.
	kuberayCRDs bool
	kuberay     bool
	// parallelPods makes the raw ceiling create each cluster's pods at once (clusters still one at a time), the
	// way an operator fans out one cluster's pods; plain raw creates every pod one at a time.
	parallelPods bool
	// rayClusters makes the raw ceiling create RayClusters too: each cluster's RayCluster, then at once its head
	// Service and pods (owned by it, as an operator makes them), and once its pods are Ready one status write
	// (rawRayClusters).
	rayClusters bool
}

var contenders = map[string]contender{
	"raw":          {name: "raw"},
	"raw-parallel": {name: "raw-parallel", parallelPods: true},
	// The ceiling for RayClusters: what any operator must have the control plane do for one, done by the harness.
	"raw-rayclusters": {name: "raw-rayclusters", parallelPods: true, rayClusters: true},
	"manta": {name: "manta", args: func(bin, kc, m, pp string) []string {
		// KUBECONFIG in its environment points it at the dev cluster.
		// Plain HTTP metrics on loopback, so the harness scrapes them without a token.
		return []string{bin, "operator", "--enable-leader-election=false",
			"--metrics-addr=" + m, "--metrics-secure=false", "--health-probe-bind-address=0", "--pprof-addr=" + pp}
	}},
	// This tree's Manta with every performance mechanism off (docs/operations.md): what they buy together.
	"manta-off": {name: "manta-off", args: func(bin, kc, m, pp string) []string {
		return append([]string{bin, "operator", "--enable-leader-election=false",
			"--metrics-addr=" + m, "--metrics-secure=false", "--health-probe-bind-address=0", "--pprof-addr=" + pp},
			allOptimizationsOff()...)
	}},
	// Manta built from another revision (MANTA_BENCH_BASE, or a binary: MANTA_BENCH_BASE_BIN), for before/after
	// comparisons in one run.
	// MANTA_BENCH_BASE_ARGS adds flags (space-separated), for a before/after of a setting.
	"manta-base": {name: "manta-base", args: func(bin, kc, m, pp string) []string {
		args := []string{bin, "operator", "--enable-leader-election=false",
			"--metrics-addr=" + m, "--health-probe-bind-address=0", "--pprof-addr=" + pp}
		// A base from before --metrics-secure serves plain HTTP already and would refuse the flag.
		if help, _ := exec.Command(bin, "operator", "--help").Output(); strings.Contains(string(help), "--metrics-secure") {
			args = append(args, "--metrics-secure=false")
		}
		return append(args, strings.Fields(os.Getenv("MANTA_BENCH_BASE_ARGS"))...)
	}},
	// KubeRay's operator at its defaults (--reconcile-concurrency 1, --qps 100, --burst 200).
	"kuberay": {name: "kuberay", kuberayCRDs: true, kuberay: true, args: func(bin, kc, m, _ string) []string {
		return []string{bin, "--kubeconfig=" + kc, "--enable-leader-election=false",
			"--metrics-addr=" + m, "--health-probe-bind-address=0"}
	}},
	"kuberay-c8": {name: "kuberay-c8", kuberayCRDs: true, kuberay: true, args: func(bin, kc, m, _ string) []string {
		return []string{bin, "--kubeconfig=" + kc, "--enable-leader-election=false",
			"--metrics-addr=" + m, "--health-probe-bind-address=0", "--reconcile-concurrency=8"}
	}},
}

// trialResult is one contender at one size in one round; the JSON the harness writes is a list of them.
type trialResult struct {
	Contender  string   `json:"contender"`
	Clusters   int      `json:"clusters"`
	Pods       int      `json:"pods"`
	Round      int      `json:"round"`
	Args       []string `json:"args,omitempty"`
	CreateS    float64  `json:"createSeconds"`
	AllReadyS  float64  `json:"allReadySeconds"`
	P50S       float64  `json:"p50ClusterReadySeconds"`
	P99S       float64  `json:"p99ClusterReadySeconds"`
	LastS      float64  `json:"lastClusterReadySeconds"` // the last one created, while the others provision
	CPUSeconds float64  `json:"operatorCPUSeconds"`
	// ControlPlaneCPU is each dev cluster component's CPU-seconds over the trial (kube-apiserver, etcd, kwok, ...):
	// on one machine the operator's and the API server's CPU come from the same two cores.
	ControlPlaneCPU map[string]float64 `json:"controlPlaneCPUSeconds,omitempty"`
	// ServerRequests is what the API server served over the trial from every client (operator, kwok, scheduler,
	// controller manager, the harness), per cluster, by "VERB resource[/subresource]" (apiserver_request_total;
	// the same again with the status code appended for refusals such as 409 and 429): it shows who else works harder
	// beside one operator than beside another.
	ServerRequests map[string]float64 `json:"serverRequestsPerCluster,omitempty"`
	// Phases splits each cluster's create -> ready by its pods' own timestamps (1 s resolution): p50 and p99 over
	// the clusters of each step, in seconds.
	Phases         map[string][2]float64 `json:"phasesP50P99Seconds,omitempty"`
	PeakRSSMiB     float64               `json:"operatorPeakRSSMiB"`
	RequestsByVerb map[string]float64    `json:"requestsPerClusterByVerb,omitempty"`
	WritesPerCl    float64               `json:"writesPerCluster"`
	RateLimitWaitS float64               `json:"rateLimiterWaitSeconds,omitempty"`
	// ReconcilesPerCl counts the RayCluster controller's reconciles (controller_runtime_reconcile_total, which
	// both operators export) per cluster.
	ReconcilesPerCl float64 `json:"reconcilesPerCluster,omitempty"`
	// ServerWritesPerCl is what every client (the operator, the harness, kwok, the scheduler, the controller
	// manager) wrote to the API server per cluster, node heartbeats and leases left out: comparable across all
	// contenders, the raw ones included.
	ServerWritesPerCl float64  `json:"serverWritesPerCluster"`
	Profiles          []string `json:"profiles,omitempty"`
	// The figures above are read when the last cluster turns ready. ToQuiescence has the same counted on until the
	// trial is quiescent (waitQuiescent): what the contender did for the clusters, deferred work included.
	ToQuiescence *quiescentFigures `json:"toQuiescence,omitempty"`
	// StatusStalenessS is the p50 and p99 of manta_raycluster_status_staleness_seconds over the trial (to
	// quiescence): how long the changes Manta's status writes carried had been held back by its coalescing.
	StatusStalenessS *[2]float64 `json:"statusStalenessP50P99Seconds,omitempty"`
	// Scale and Idle are measured after quiescence (afterReady), for the operator contenders.
	Scale *scaleFigures `json:"scale,omitempty"`
	Idle  *idleFigures  `json:"idle,omitempty"`
}

// counted are the figures read from the counters at one point of a trial, as differences from its start.
type counted struct {
	CPUSeconds        float64            `json:"operatorCPUSeconds"`
	ControlPlaneCPU   map[string]float64 `json:"controlPlaneCPUSeconds,omitempty"`
	ServerRequests    map[string]float64 `json:"serverRequestsPerCluster,omitempty"`
	ServerWritesPerCl float64            `json:"serverWritesPerCluster"`
	RequestsByVerb    map[string]float64 `json:"requestsPerClusterByVerb,omitempty"`
	WritesPerCl       float64            `json:"writesPerCluster"`
	RateLimitWaitS    float64            `json:"rateLimiterWaitSeconds,omitempty"`
	ReconcilesPerCl   float64            `json:"reconcilesPerCluster,omitempty"`
	// AllocMiBPerCl is what the operator's Go heap allocated per cluster (go_memstats_alloc_bytes_total, which both
	// operators export): the collector's work, less noisy than CPU-seconds on a shared machine.
	AllocMiBPerCl float64         `json:"allocatedMiBPerCluster,omitempty"`
	snapshot      metricsSnapshot // the operator's counters over the span
	// readAt, serverWrites and operatorWrites are the reading's time and its raw write counters (waitQuiescent).
	readAt                       time.Time
	serverWrites, operatorWrites float64
}

// quiescentFigures are a trial's figures counted until it was quiescent.
type quiescentFigures struct {
	// Reached is false when the trial was still writing after quiesceTimeout (the figures are then up to there).
	Reached bool `json:"reached"`
	// AtS is the time from the first create to the poll that saw the last write (the all-ready reading when no
	// write came after it).
	AtS float64 `json:"quiescentSeconds"`
	counted
}

// BenchmarkSideBySide races Manta's operator and KubeRay's (bin/kuberay-operator), each as its own process on a
// fresh dev cluster, against the raw ceiling (the same pods created bare by the same client), trials alternated in
// one run. One client creates RayClusters of 1 head + 3 workers one at a time and watches until every cluster is
// ready. Settings come from the environment:
//
//	MANTA_BENCH_SIZES       RayClusters per trial, comma-separated (default 100)
//	MANTA_BENCH_ROUNDS      rounds of alternated trials, the contenders' order rotated each round (default 1)
//	MANTA_BENCH_CONTENDERS  default raw,manta,kuberay,kuberay-c8 (also raw-parallel, raw-rayclusters, manta-base, manta-off)
//	MANTA_BENCH_JSON        where to write the results (default <tmp>/manta-bench/sidebyside.json)
//	MANTA_BENCH_BASE        a git revision: the contender manta-base runs Manta built from it (before/after)
//	MANTA_BENCH_BASE_BIN    instead, a manta binary for the contender manta-base
//	MANTA_BENCH_BASE_ARGS   more flags for manta-base (space-separated): a before/after of a setting
//	MANTA_BENCH_IDLE        a duration: after each operator trial's scale change, its costs over that idle window
//	MANTA_BENCH_PPROF       a directory: Manta's CPU profile of each trial and its heap at all-ready go there
func BenchmarkSideBySide(b *testing.B) {
	sizes := envInts(b, "MANTA_BENCH_SIZES", []int{100})
	rounds := envInts(b, "MANTA_BENCH_ROUNDS", []int{1})[0]
	names := strings.Split(envOr("MANTA_BENCH_CONTENDERS", "raw,manta,kuberay,kuberay-c8"), ",")
	root, err := devcluster.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	bins := map[string]string{"kuberay": filepath.Join(root, "bin", "kuberay-operator")}
	if slices.Contains(names, "manta-base") {
		if bins["manta-base"], err = baseBinary(os.Getenv, root, b.TempDir()); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range names {
		c, ok := contenders[n]
		if !ok {
			b.Fatalf("MANTA_BENCH_CONTENDERS: unknown contender %q", n)
		}
		if c.kuberay {
			if _, err := os.Stat(bins["kuberay"]); err != nil {
				b.Fatalf("%v (hack/build-kuberay.sh builds it)", err)
			}
		}
		if needsCurrentManta(c, bins) && bins["manta"] == "" {
			bins["manta"] = testutil.BuildManta(b)
		}
	}
	kuberayCRDs := kuberayCRDDir(root)
	var results []trialResult
	for i := 0; i < b.N; i++ {
		for _, n := range sizes {
			for round := range rounds {
				for _, name := range roundOrder(names, round) {
					c := contenders[name]
					r := runTrial(b, c, binaryFor(c, bins), kuberayCRDs, n, round)
					results = append(results, r)
					progressf(b, "%s, %d clusters, round %d: all ready in %.1fs (created in %.1fs; p50 %.1fs, p99 %.1fs; steps p50/p99 %v), %.1f CPU-s (control plane %v), peak RSS %.0f MiB, %.1f writes/cluster %v, %.1f reconciles/cluster; API server served per cluster %v",
						r.Contender, r.Clusters, round, r.AllReadyS, r.CreateS, r.P50S, r.P99S, r.Phases, r.CPUSeconds, r.ControlPlaneCPU, r.PeakRSSMiB, r.WritesPerCl, r.RequestsByVerb, r.ReconcilesPerCl, r.ServerRequests)
					if q := r.ToQuiescence; q != nil {
						progressf(b, "  to quiescence (reached %v, last write %.1fs after the first create): %.1f CPU-s (control plane %v), %.1f writes/cluster %v, %.1f reconciles/cluster, %.1f server writes/cluster, %.3f MiB allocated/cluster; status staleness p50/p99 %v",
							q.Reached, q.AtS, q.CPUSeconds, q.ControlPlaneCPU, q.WritesPerCl, q.RequestsByVerb, q.ReconcilesPerCl, q.ServerWritesPerCl, q.AllocMiBPerCl, r.StatusStalenessS)
					}
				}
			}
		}
	}
	table := sideBySideTable(results)
	fmt.Fprintf(os.Stdout, "\n%s\n", table)
	out := envOr("MANTA_BENCH_JSON", filepath.Join(os.TempDir(), "manta-bench", "sidebyside.json"))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		b.Fatal(err)
	}
	data, _ := json.MarshalIndent(map[string]any{"trials": results, "table": table}, "", "  ")
	if err := os.WriteFile(out, data, 0o644); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "results written to %s\n", out)
}

// allOptimizationsOff are the operator flags that turn off every performance mechanism: the switchable ones
// (internal/controller/shared/optimize), the GC target and the adaptive GOMAXPROCS.
func allOptimizationsOff() []string {
	names := make([]string, len(optimize.All))
	for i, m := range optimize.All {
		names[i] = string(m)
	}
	return []string{"--disable-optimization=" + strings.Join(names, ","), "--gc-percent=100", "--adaptive-procs=false"}
}

// roundOrder is the order the contenders run in round r: names rotated by r, so that no contender always runs
// first (on a machine fresh from the previous trial's teardown) or always after the same one.
func roundOrder(names []string, r int) []string {
	if len(names) == 0 {
		return nil
	}
	k := r % len(names)
	return append(slices.Clone(names[k:]), names[:k]...)
}

// kuberayCRDDir is the CRD directory of the pinned KubeRay module in the module cache, "" when it is not there
// (then KubeRay runs on Manta's CRDs, which accept the same objects).
func kuberayCRDDir(root string) string {
	cmd := exec.Command("go", "env", "GOMODCACHE")
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	matches, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "github.com", "ray-project", "kuberay", "ray-operator@v1.5.0", "config", "crd", "bases"))
	if len(matches) == 0 {
		return ""
	}
	return matches[0]
}

func runTrial(b *testing.B, c contender, bin, kuberayCRDs string, clusters, round int) trialResult {
	b.Helper()
	const perNamespace, workers = 10, 3
	pprofDir := os.Getenv("MANTA_BENCH_PPROF")
	opts := devcluster.Options{Nodes: 32, NodeCPU: "1000", NodeMemory: "4000Gi", NodeMaxPods: 1000, Profiling: pprofDir != ""}
	if c.kuberayCRDs && kuberayCRDs != "" {
		opts.CRDDirs = []string{kuberayCRDs}
	}
	e := startEnvFor(b, 40*time.Minute, opts)
	defer e.stop()
	var nsNames []string
	for i := range (clusters + perNamespace - 1) / perNamespace {
		nsNames = append(nsNames, fmt.Sprintf("bench-sbs-%d", i))
	}
	e.createNamespaces(b, nsNames...)
	run := fmt.Sprintf("%s-%d-%d", c.name, clusters, round)
	var rcs []*rayv1.RayCluster
	for i := range clusters {
		rcs = append(rcs, rayCluster(nsNames[i/perNamespace], fmt.Sprintf("rc-%d", i), run, workers))
	}
	r := trialResult{Contender: c.name, Clusters: clusters, Pods: clusters * (1 + workers), Round: round}

	var op *opProcess
	if c.args != nil {
		op = startOperatorProcess(b, e, c, bin)
		defer op.stop()
		r.Args = op.args[1:]
	}
	var before metricsSnapshot
	var cpu0 float64
	cp0 := map[string]float64{}
	for name, pid := range e.cluster.PIDs() {
		cp0[name] = procCPUSeconds(pid)
	}
	if op != nil {
		before = op.scrape(b)
		cpu0 = procCPUSeconds(op.cmd.Process.Pid)
		if op.pprofDir != "" {
			op.startCPUProfile(b, run)
		}
	}

	served0 := e.serverRequests(b)
	var apiProfile chan []byte
	if pprofDir != "" {
		apiProfile = make(chan []byte, 1)
		go func() {
			// The API server's CPU over the same span as the operator's (MANTA_BENCH_PPROF_SECONDS).
			body, _ := e.cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
				Param("seconds", envOr("MANTA_BENCH_PPROF_SECONDS", "30")).Timeout(10 * time.Minute).DoRaw(e.ctx)
			apiProfile <- body
		}()
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	rawPods := c.args == nil && !c.rayClusters
	watcher := startReadyWatch(b, e, ctx, run, rawPods, clusters)
	var rawRCs *rawRayClusters
	if c.rayClusters {
		rawRCs = startRawRayClusters(ctx, e, run, 1+workers)
	}
	start := time.Now()
	created := map[string]time.Time{}
	for _, rc := range rcs {
		key := rc.Namespace + "/" + rc.Name
		switch {
		case c.rayClusters:
			createRawRayCluster(b, e, rawRCs, rc)
		case c.args == nil:
			var objs []client.Object
			for _, p := range barePods(rc) {
				objs = append(objs, p)
			}
			parallel := 1
			if c.parallelPods {
				parallel = len(objs)
			}
			e.createAll(b, parallel, objs)
		default:
			if err := e.cl.Create(e.ctx, rc); err != nil {
				b.Fatalf("create RayCluster %s: %v", key, err)
			}
		}
		created[key] = time.Now()
	}
	r.CreateS = time.Since(start).Seconds()
	var failed <-chan error // raw-rayclusters' failed writes: its clusters would never be ready
	if rawRCs != nil {
		failed = rawRCs.errs
	}
	readyAt := watcher.wait(b, 30*time.Minute, failed)
	var lat []time.Duration
	var end time.Time
	for k, t := range readyAt {
		lat = append(lat, t.Sub(created[k]))
		if t.After(end) {
			end = t
		}
	}
	r.AllReadyS = end.Sub(start).Seconds()
	last := rcs[len(rcs)-1].Namespace + "/" + rcs[len(rcs)-1].Name
	r.LastS = readyAt[last].Sub(created[last]).Seconds()
	r.P50S, _, r.P99S, _ = percentiles(lat)
	r.Phases = phases(b, e, created, readyAt)
	if apiProfile != nil {
		if body := <-apiProfile; len(body) > 0 {
			p := filepath.Join(pprofDir, run+".apiserver.cpu.pprof")
			if os.MkdirAll(pprofDir, 0o755) == nil && os.WriteFile(p, body, 0o644) == nil {
				r.Profiles = append(r.Profiles, p)
			}
		}
	}
	count := func() counted {
		var k counted
		k.ControlPlaneCPU = map[string]float64{}
		for name, pid := range e.cluster.PIDs() {
			k.ControlPlaneCPU[name] = procCPUSeconds(pid) - cp0[name]
		}
		k.ServerRequests = map[string]float64{}
		served := e.serverRequests(b)
		k.readAt, k.serverWrites = time.Now(), serverWrites(served)
		for key, v := range served {
			if d := (v - served0[key]) / float64(clusters); d >= 0.01 {
				k.ServerRequests[key] = math.Round(d*100) / 100
			}
		}
		k.ServerWritesPerCl = (serverWrites(served) - serverWrites(served0)) / float64(clusters)
		if op != nil {
			k.CPUSeconds = procCPUSeconds(op.cmd.Process.Pid) - cpu0
			now := op.scrape(b)
			k.operatorWrites = operatorWrites(now.requests)
			d := now.minus(before)
			k.snapshot = d
			k.RequestsByVerb = map[string]float64{}
			for verb, v := range d.requests {
				k.RequestsByVerb[verb] = v / float64(clusters)
			}
			k.WritesPerCl = operatorWrites(d.requests) / float64(clusters)
			k.RateLimitWaitS = d.rateLimitWait
			k.ReconcilesPerCl = d.reconciles / float64(clusters)
			k.AllocMiBPerCl = math.Round(d.allocBytes/float64(clusters)/(1<<20)*1000) / 1000
		}
		return k
	}
	atReady := count()
	r.ControlPlaneCPU, r.ServerRequests, r.ServerWritesPerCl = atReady.ControlPlaneCPU, atReady.ServerRequests, atReady.ServerWritesPerCl
	if op != nil {
		r.CPUSeconds = atReady.CPUSeconds
		r.PeakRSSMiB = procPeakRSSMiB(op.cmd.Process.Pid)
		r.RequestsByVerb, r.WritesPerCl, r.RateLimitWaitS, r.ReconcilesPerCl = atReady.RequestsByVerb, atReady.WritesPerCl, atReady.RateLimitWaitS, atReady.ReconcilesPerCl
		if op.pprofDir != "" {
			r.Profiles = append(r.Profiles, op.finishProfiles(b, run)...)
		}
	}
	lastWrite, reached := waitQuiescent(b, e, op, atReady)
	q := &quiescentFigures{Reached: reached, AtS: lastWrite.Sub(start).Seconds(), counted: count()}
	r.ToQuiescence = q
	if op != nil {
		r.PeakRSSMiB = procPeakRSSMiB(op.cmd.Process.Pid)
		r.StatusStalenessS = stalenessP50P99(q.snapshot.staleness)
		afterReady(b, e, op, rcs[0], &r)
	}
	return r
}

// phases splits each cluster's time to ready into steps, from its pods' timestamps: "pickup" (the cluster created
// -> its first pod created), "creates" (first -> last pod created), "pods ready" (last pod created -> last pod
// Ready) and "report" (last pod Ready -> the cluster seen ready; 0 for raw). Pod timestamps have whole seconds.
func phases(b *testing.B, e *trialEnv, created, readyAt map[string]time.Time) map[string][2]float64 {
	b.Helper()
	var pods corev1.PodList
	if err := e.cl.List(e.ctx, &pods, client.HasLabels{rayv1.LabelCluster}, client.UnsafeDisableDeepCopy); err != nil {
		b.Logf("phases: list pods: %v", err)
		return nil
	}
	type span struct{ first, last, ready time.Time }
	spans := map[string]*span{}
	for i := range pods.Items {
		p := &pods.Items[i]
		key := p.Namespace + "/" + p.Labels[rayv1.LabelCluster]
		sp := spans[key]
		if sp == nil {
			sp = &span{}
			spans[key] = sp
		}
		c := p.CreationTimestamp.Time
		if sp.first.IsZero() || c.Before(sp.first) {
			sp.first = c
		}
		if c.After(sp.last) {
			sp.last = c
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.LastTransitionTime.After(sp.ready) {
				sp.ready = cond.LastTransitionTime.Time
			}
		}
	}
	steps := map[string][]time.Duration{}
	for key, sp := range spans {
		c, ok := created[key]
		if !ok || sp.ready.IsZero() {
			continue
		}
		// Server timestamps are truncated to the second: round the client's to match.
		c = c.Truncate(time.Second)
		steps["pickup"] = append(steps["pickup"], max(0, sp.first.Sub(c)))
		steps["creates"] = append(steps["creates"], sp.last.Sub(sp.first))
		steps["pods ready"] = append(steps["pods ready"], max(0, sp.ready.Sub(sp.last)))
		steps["report"] = append(steps["report"], max(0, readyAt[key].Truncate(time.Second).Sub(sp.ready)))
	}
	out := map[string][2]float64{}
	for name, ds := range steps {
		p50, _, p99, _ := percentiles(ds)
		out[name] = [2]float64{p50, p99}
	}
	return out
}

// startEnvFor is startEnv for a trial that ends before the benchmark does.
func startEnvFor(b *testing.B, timeout time.Duration, opts devcluster.Options) *trialEnv {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	start := time.Now()
	c, err := devcluster.Start(ctx, opts)
	if err != nil {
		cancel()
		b.Fatalf("start dev cluster: %v", err)
	}
	progressf(b, "dev cluster with %d nodes up in %s", nodeCount(opts), time.Since(start).Round(time.Millisecond))
	scheme, err := operator.Scheme()
	if err != nil {
		b.Fatal(err)
	}
	admin := c.RESTConfig()
	cl, err := client.NewWithWatch(admin, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	te := &trialEnv{env: &env{ctx: ctx, cluster: c, admin: admin, cl: cl}, wcl: cl}
	te.cancel = cancel
	te.cs = kubernetes.NewForConfigOrDie(admin)
	return te
}

type trialEnv struct {
	*env
	wcl    client.WithWatch
	cancel context.CancelFunc
}

func (t *trialEnv) stop() {
	t.cancel()
	_ = t.cluster.Stop()
}

// barePods are the pods the operator would make for rc, created without an operator and owned by nothing: the raw
// ceiling.
func barePods(rc *rayv1.RayCluster) []*corev1.Pod {
	pods := rayPods(rc)
	for _, p := range pods {
		p.OwnerReferences = nil
	}
	return pods
}

// readyWatch follows RayClusters (or, for the raw ceiling, bare pods) with one watch and records when each cluster
// was first seen ready: a RayCluster in state ready, or all four of a cluster's bare pods Ready.
type readyWatch struct {
	n       int
	done    chan struct{}
	readyAt map[string]time.Time
	err     error
}

func startReadyWatch(b *testing.B, e *trialEnv, ctx context.Context, run string, raw bool, n int) *readyWatch {
	w := &readyWatch{n: n, done: make(chan struct{}), readyAt: map[string]time.Time{}}
	var list client.ObjectList = &rayv1.RayClusterList{}
	if raw {
		list = &corev1.PodList{}
	}
	readyPods := map[string]map[string]bool{} // cluster -> ready pods
	observe := func(obj runtime.Object) {
		now := time.Now()
		switch o := obj.(type) {
		case *rayv1.RayCluster:
			key := o.Namespace + "/" + o.Name
			if _, seen := w.readyAt[key]; !seen && o.Status.State == rayv1.Ready {
				w.readyAt[key] = now
			}
		case *corev1.Pod:
			key := o.Namespace + "/" + o.Labels[rayv1.LabelCluster]
			if readyPods[key] == nil {
				readyPods[key] = map[string]bool{}
			}
			readyPods[key][o.Name] = testutil.PodReady(o)
			nReady := 0
			for _, r := range readyPods[key] {
				if r {
					nReady++
				}
			}
			if _, seen := w.readyAt[key]; !seen && nReady == 4 {
				w.readyAt[key] = now
			}
		}
	}
	go func() {
		defer close(w.done)
		for len(w.readyAt) < n {
			l := list.DeepCopyObject().(client.ObjectList)
			if err := e.wcl.List(ctx, l, client.MatchingLabels{benchLabel: run}); err != nil {
				if ctx.Err() != nil {
					w.err = err
					return
				}
				time.Sleep(time.Second)
				continue
			}
			items, _ := meta.ExtractList(l)
			for _, it := range items {
				observe(it)
			}
			l2 := list.DeepCopyObject().(client.ObjectList)
			rv := l.(interface{ GetResourceVersion() string }).GetResourceVersion()
			wi, err := e.wcl.Watch(ctx, l2, client.MatchingLabels{benchLabel: run}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err != nil {
				continue
			}
			for ev := range wi.ResultChan() {
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					observe(ev.Object)
				}
				if len(w.readyAt) >= n {
					break
				}
			}
			wi.Stop()
		}
	}()
	return w
}

// wait returns when every cluster was seen ready, and fails the benchmark after timeout or on an error from failed.
func (w *readyWatch) wait(b *testing.B, timeout time.Duration, failed <-chan error) map[string]time.Time {
	select {
	case err := <-failed:
		b.Fatalf("raw-rayclusters: %v", err)
		return nil
	case <-w.done:
		if w.err != nil {
			b.Fatalf("watching readiness: %v", w.err)
		}
		return w.readyAt
	case <-time.After(timeout):
		b.Fatalf("not all %d clusters ready after %s", w.n, timeout)
		return nil
	}
}

// opProcess is an operator running as its own process.
type opProcess struct {
	cmd      *exec.Cmd
	args     []string
	metrics  string // http://127.0.0.1:<port>/metrics
	pprof    string
	pprofDir string
	profDone chan []byte
	log      *os.File
	exited   chan struct{} // closed when the process has ended
}

func (op *opProcess) hasExited() bool {
	select {
	case <-op.exited:
		return true
	default:
		return false
	}
}

func startOperatorProcess(b *testing.B, e *trialEnv, c contender, bin string) *opProcess {
	b.Helper()
	ports, err := devcluster.FreePorts(2)
	if err != nil {
		b.Fatal(err)
	}
	m, pp := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	args := c.args(bin, e.cluster.Kubeconfig, m, pp)
	logPath := filepath.Join(e.cluster.Dir(), c.name+"-operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.cluster.Kubeconfig)
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", args[0], err)
	}
	op := &opProcess{cmd: cmd, args: args, metrics: "http://" + m + "/metrics", pprof: "http://" + pp, log: logFile, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(op.exited) }()
	if strings.HasPrefix(c.name, "manta") {
		op.pprofDir = os.Getenv("MANTA_BENCH_PPROF")
	}
	// Up when its metrics answer; then a few seconds for its informers to list the (still empty) cluster.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := httpGet(op.metrics); err == nil {
			break
		}
		if op.hasExited() {
			b.Fatalf("%s exited: log %s", c.name, logPath)
		}
		if time.Now().After(deadline) {
			op.stop()
			b.Fatalf("%s did not come up within 2 minutes; log %s", c.name, logPath)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(5 * time.Second)
	return op
}

func (op *opProcess) stop() {
	if !op.hasExited() {
		_ = op.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-op.exited:
		case <-time.After(15 * time.Second):
			_ = op.cmd.Process.Kill()
			<-op.exited
		}
	}
	op.log.Close()
}

func (op *opProcess) startCPUProfile(b *testing.B, run string) {
	op.profDone = make(chan []byte, 1)
	go func() {
		// pprof profiles for a fixed duration: ask for about the trial's length (MANTA_BENCH_PPROF_SECONDS).
		body, _ := httpGetBytes(op.pprof + "/debug/pprof/profile?seconds=" + envOr("MANTA_BENCH_PPROF_SECONDS", "30"))
		op.profDone <- body
	}()
}

func (op *opProcess) finishProfiles(b *testing.B, run string) []string {
	var out []string
	if err := os.MkdirAll(op.pprofDir, 0o755); err != nil {
		b.Fatal(err)
	}
	if heap, err := httpGetBytes(op.pprof + "/debug/pprof/heap"); err == nil {
		p := filepath.Join(op.pprofDir, run+".heap.pprof")
		if os.WriteFile(p, heap, 0o644) == nil {
			out = append(out, p)
		}
	}
	if cpu := <-op.profDone; len(cpu) > 0 {
		p := filepath.Join(op.pprofDir, run+".cpu.pprof")
		if os.WriteFile(p, cpu, 0o644) == nil {
			out = append(out, p)
		}
	}
	return out
}

func httpGet(url string) (string, error) {
	b, err := httpGetBytes(url)
	return string(b), err
}

func httpGetBytes(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// metricsSnapshot is what the harness reads from an operator's own metrics endpoint.
type metricsSnapshot struct {
	requests      map[string]float64 // rest_client_requests_total by method
	rateLimitWait float64            // rest_client_rate_limiter_duration_seconds_sum, when the operator exports it
	reconciles    float64            // controller_runtime_reconcile_total of the raycluster controller (both operators)
	reconcilesBy  map[string]float64 // controller_runtime_reconcile_total by controller
	eventsQueued  float64            // manta_events_queued (Manta only; 0 for KubeRay, which queues none)
	statusesHeld  float64            // manta_raycluster_statuses_held (Manta only; KubeRay holds none back)
	staleness     histogram          // manta_raycluster_status_staleness_seconds (Manta only)
	allocBytes    float64            // go_memstats_alloc_bytes_total
}

func (op *opProcess) scrape(b *testing.B) metricsSnapshot {
	body, err := httpGet(op.metrics)
	if err != nil {
		b.Fatalf("scrape %s: %v", op.metrics, err)
	}
	return parseMetrics(body)
}

// parseMetrics reads the two families the table needs from Prometheus text exposition.
func parseMetrics(text string) metricsSnapshot {
	s := metricsSnapshot{requests: map[string]float64{}, reconcilesBy: map[string]float64{}, staleness: histogram{}}
	for _, line := range strings.Split(text, "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			if f := strings.Fields(line); len(f) == 2 {
				v, _ := strconv.ParseFloat(f[1], 64)
				switch f[0] {
				case "rest_client_rate_limiter_duration_seconds_sum":
					s.rateLimitWait += v
				case "manta_events_queued":
					s.eventsQueued = v
				case "manta_raycluster_statuses_held":
					s.statusesHeld = v
				case "go_memstats_alloc_bytes_total":
					s.allocBytes = v
				}
			}
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			continue
		}
		switch name {
		case "rest_client_requests_total":
			if m := labelValue(labels, "method"); m != "" {
				s.requests[m] += v
				if labelValue(labels, "code") == "409" {
					// Conflicts (a write from a stale cache), counted apart as well.
					s.requests[m+" 409"] += v
				}
			}
		case "rest_client_rate_limiter_duration_seconds_sum":
			s.rateLimitWait += v
		case "controller_runtime_reconcile_total":
			s.reconcilesBy[labelValue(labels, "controller")] += v
			if labelValue(labels, "controller") == "raycluster" {
				s.reconciles += v
			}
		case "manta_raycluster_status_staleness_seconds_bucket":
			if le, err := strconv.ParseFloat(labelValue(labels, "le"), 64); err == nil {
				s.staleness[le] = v
			}
		}
	}
	return s
}

// serverRequests reads apiserver_request_total from the dev cluster's API server, by "VERB resource[/subresource]"
// (and the same with the code appended for answers of 300 and over), watches left out (counted when they start, not by what they carry).
func (e *trialEnv) serverRequests(b *testing.B) map[string]float64 {
	body, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(e.ctx)
	if err != nil {
		b.Fatalf("API server metrics: %v", err)
	}
	return parseServerRequests(string(body))
}

func parseServerRequests(text string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		verb := labelValue(labels, "verb")
		if !ok || verb == "WATCH" {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		key := verb + " " + labelValue(labels, "resource")
		if sub := labelValue(labels, "subresource"); sub != "" {
			key += "/" + sub
		}
		out[key] += v
		if code := labelValue(labels, "code"); code >= "300" {
			out[key+" "+code] += v
		}
	}
	return out
}

func labelValue(labels, key string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

func (s metricsSnapshot) minus(before metricsSnapshot) metricsSnapshot {
	out := metricsSnapshot{requests: map[string]float64{}, rateLimitWait: s.rateLimitWait - before.rateLimitWait, reconciles: s.reconciles - before.reconciles,
		eventsQueued: s.eventsQueued, staleness: s.staleness.minus(before.staleness), reconcilesBy: map[string]float64{},
		allocBytes: s.allocBytes - before.allocBytes}
	for k, v := range s.reconcilesBy {
		if d := v - before.reconcilesBy[k]; d > 0 {
			out.reconcilesBy[k] = d
		}
	}
	for k, v := range s.requests {
		if d := v - before.requests[k]; d > 0 {
			out.requests[k] = d
		}
	}
	return out
}

// procCPUSeconds is a process's user + system CPU time so far.
func procCPUSeconds(pid int) float64 { return liveproc.CPUSeconds(pid) }

// procPeakRSSMiB is a process's peak resident set size (VmHWM) from /proc/<pid>/status.
func procPeakRSSMiB(pid int) float64 { return procStatusMiB(pid, "VmHWM:") }

// sideBySideTable is the one table of the benchmark: a row per trial, grouped by size, in the order run. Where a
// figure has two values, the first is read when the last cluster turned ready, the second once the trial was
// quiescent (waitQuiescent); "quiescent" is when the last write was seen, from the first create.
func sideBySideTable(rs []trialResult) string {
	var sb strings.Builder
	sb.WriteString("| clusters (pods) | contender | round | all ready | quiescent | vs ceiling | p50 / p99 / last cluster | operator CPU-s | apiserver / etcd CPU-s | peak RSS | requests per cluster by verb (to quiescence) | writes per cluster | all clients' writes per cluster | status staleness p50 / p99 |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	ceiling := ceilings(rs)
	for _, r := range rs {
		vs := "-"
		if base := ceiling[[2]int{r.Clusters, r.Round}]; base > 0 && !isRaw(r.Contender) {
			vs = fmt.Sprintf("%.2fx", r.AllReadyS/base)
		}
		q := r.ToQuiescence
		if q == nil {
			q = &quiescentFigures{}
		}
		quiescent := fmt.Sprintf("%.1f s", q.AtS)
		if !q.Reached {
			quiescent = "not reached"
		}
		cpu, rss, byVerb, writes, stale := "-", "-", "-", "-", "-"
		if !isRaw(r.Contender) {
			cpu = fmt.Sprintf("%.1f / %.1f", r.CPUSeconds, q.CPUSeconds)
			rss = fmt.Sprintf("%.0f MiB", r.PeakRSSMiB)
			byVerb = verbs(q.RequestsByVerb)
			writes = fmt.Sprintf("%.1f / %.1f", r.WritesPerCl, q.WritesPerCl)
		}
		if st := r.StatusStalenessS; st != nil {
			stale = fmt.Sprintf("%.2f / %.2f s", st[0], st[1])
		}
		cp := fmt.Sprintf("%.1f / %.1f, %.1f / %.1f", r.ControlPlaneCPU["kube-apiserver"], r.ControlPlaneCPU["etcd"],
			q.ControlPlaneCPU["kube-apiserver"], q.ControlPlaneCPU["etcd"])
		fmt.Fprintf(&sb, "| %d (%d) | %s | %d | %.1f s | %s | %s | %.1f / %.1f / %.1f s | %s | %s | %s | %s | %s | %.1f / %.1f | %s |\n",
			r.Clusters, r.Pods, r.Contender, r.Round, r.AllReadyS, quiescent, vs, r.P50S, r.P99S, r.LastS, cpu, cp, rss, byVerb, writes,
			r.ServerWritesPerCl, q.ServerWritesPerCl, stale)
	}
	if medians := medianTable(rs); medians != "" {
		sb.WriteString("\nMedians over the rounds:\n\n")
		sb.WriteString(medians)
	}
	if after := afterReadyTable(rs); after != "" {
		sb.WriteString("\nOnce all ready and quiescent:\n\n")
		sb.WriteString(after)
	}
	return sb.String()
}

func isRaw(contender string) bool { return strings.HasPrefix(contender, "raw") }

// medianTable has, when some contender ran more than one round at a size, a row per size and contender with the
// median of each figure over its rounds ("vs ceiling" is the median of the per-round ratios); "" otherwise.
func medianTable(rs []trialResult) string {
	type key struct {
		clusters  int
		contender string
	}
	var order []key
	byKey := map[key][]trialResult{}
	multi := false
	for _, r := range rs {
		k := key{r.Clusters, r.Contender}
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], r)
		multi = multi || len(byKey[k]) > 1
	}
	if !multi {
		return ""
	}
	ceiling := ceilings(rs)
	var sb strings.Builder
	sb.WriteString("| clusters (pods) | contender | rounds | all ready | quiescent | vs ceiling | p50 / p99 / last cluster | operator CPU-s | peak RSS | writes per cluster | all clients' writes per cluster | status staleness p50 / p99 |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range order {
		trials := byKey[k]
		med := func(f func(trialResult) float64) float64 {
			var v []float64
			for _, t := range trials {
				v = append(v, f(t))
			}
			return median(v)
		}
		quiet := func(f func(*quiescentFigures) float64) func(trialResult) float64 {
			return func(t trialResult) float64 {
				if t.ToQuiescence == nil {
					return 0
				}
				return f(t.ToQuiescence)
			}
		}
		vs := "-"
		if !isRaw(k.contender) {
			var ratios []float64
			for _, t := range trials {
				if base := ceiling[[2]int{t.Clusters, t.Round}]; base > 0 {
					ratios = append(ratios, t.AllReadyS/base)
				}
			}
			if len(ratios) > 0 {
				vs = fmt.Sprintf("%.2fx", median(ratios))
			}
		}
		cpu, rss, writes, stale := "-", "-", "-", "-"
		if !isRaw(k.contender) {
			cpu = fmt.Sprintf("%.1f / %.1f", med(func(t trialResult) float64 { return t.CPUSeconds }),
				med(quiet(func(q *quiescentFigures) float64 { return q.CPUSeconds })))
			rss = fmt.Sprintf("%.0f MiB", med(func(t trialResult) float64 { return t.PeakRSSMiB }))
			writes = fmt.Sprintf("%.1f / %.1f", med(func(t trialResult) float64 { return t.WritesPerCl }),
				med(quiet(func(q *quiescentFigures) float64 { return q.WritesPerCl })))
		}
		if trials[0].StatusStalenessS != nil {
			stale = fmt.Sprintf("%.2f / %.2f s", med(func(t trialResult) float64 { return stalenessAt(t, 0) }),
				med(func(t trialResult) float64 { return stalenessAt(t, 1) }))
		}
		fmt.Fprintf(&sb, "| %d (%d) | %s | %d | %.1f s | %.1f s | %s | %.1f / %.1f / %.1f s | %s | %s | %s | %.1f / %.1f | %s |\n",
			k.clusters, trials[0].Pods, k.contender, len(trials), med(func(t trialResult) float64 { return t.AllReadyS }),
			med(quiet(func(q *quiescentFigures) float64 { return q.AtS })), vs,
			med(func(t trialResult) float64 { return t.P50S }), med(func(t trialResult) float64 { return t.P99S }),
			med(func(t trialResult) float64 { return t.LastS }), cpu, rss, writes,
			med(func(t trialResult) float64 { return t.ServerWritesPerCl }),
			med(quiet(func(q *quiescentFigures) float64 { return q.ServerWritesPerCl })), stale)
	}
	return sb.String()
}

func stalenessAt(t trialResult, i int) float64 {
	if t.StatusStalenessS == nil {
		return 0
	}
	return t.StatusStalenessS[i]
}

// ceilings is, per size and round, the time to all ready "vs ceiling" divides by: raw-rayclusters' when it ran (it
// makes every object a RayCluster needs), else the faster of the bare-pod contenders.
func ceilings(rs []trialResult) map[[2]int]float64 {
	clusters, pods := map[[2]int]float64{}, map[[2]int]float64{}
	for _, r := range rs {
		k := [2]int{r.Clusters, r.Round}
		switch {
		case r.Contender == "raw-rayclusters":
			clusters[k] = r.AllReadyS
		case isRaw(r.Contender) && (pods[k] == 0 || r.AllReadyS < pods[k]):
			pods[k] = r.AllReadyS
		}
	}
	for k, v := range clusters {
		pods[k] = v
	}
	return pods
}

// median of v (the mean of the middle two for an even count); v is reordered.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

func verbs(m map[string]float64) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, v := range []string{"POST", "PUT", "PATCH", "DELETE", "GET", "LIST", "WATCH"} {
		if m[v] > 0 {
			p := fmt.Sprintf("%s %.2f", v, m[v])
			if c := m[v+" 409"]; c > 0 {
				p += fmt.Sprintf(" (%.2f conflicts)", c)
			}
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, ", ")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envInts(b *testing.B, key string, def []int) []int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want positive integers, comma-separated", key, v)
		}
		out = append(out, n)
	}
	return out
}
