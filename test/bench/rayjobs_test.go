package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
	"github.com/manta-dev/manta/internal/testutil/podnet"
)

// jobRun is how long each fake Ray job runs once submitted.
const jobRun = time.Second

// jobResult is one contender's RayJob throughput trial; the JSON the harness writes is a list of them.
type jobResult struct {
	Contender string   `json:"contender"`
	Jobs      int      `json:"jobs"`
	Args      []string `json:"args,omitempty"`
	CreateS   float64  `json:"createSeconds"`
	// AllCompleteS is from the first create to the last RayJob seen Complete (jobStatus SUCCEEDED).
	AllCompleteS  float64 `json:"allCompleteSeconds"`
	JobsPerMinute float64 `json:"jobsPerMinute"`
	P50S          float64 `json:"p50JobCompleteSeconds"`
	P99S          float64 `json:"p99JobCompleteSeconds"`
	// Submissions is what the fake Ray heads accepted: one per job, a second would be a resubmission.
	Submissions int `json:"submissions"`
	// The figures below are counted to quiescence (waitQuiescent): every cluster deleted after its job, every event
	// written.
	QuiescentS float64 `json:"quiescentSeconds"`
	CPUSeconds float64 `json:"operatorCPUSeconds"`
	// ControlPlaneCPU is each control plane process's CPU-seconds over the same span (kube-apiserver, etcd, ...).
	ControlPlaneCPU map[string]float64 `json:"controlPlaneCPUSeconds,omitempty"`
	PeakRSSMiB      float64            `json:"operatorPeakRSSMiB"`
	// WritesPerJob are the operator's writes of Kubernetes objects per job (its POST/PUT/PATCH/DELETE, not its
	// writes to a Ray head); RayAPIPerJob its requests to Ray through the API server's proxy, as the API server
	// counts them; ServerWritesPerJob every client's object writes (the scheduler's, kwok's, the
	// controller-manager's). RequestsByVerb is the operator's client metric: Manta's includes its Ray requests,
	// KubeRay's does not.
	WritesPerJob       float64            `json:"writesPerJob"`
	RayAPIPerJob       float64            `json:"rayAPIRequestsPerJob"`
	ServerWritesPerJob float64            `json:"serverWritesPerJob"`
	RequestsByVerb     map[string]float64 `json:"requestsPerJobByVerb,omitempty"`
	// ServerWritesByResource is every client's writes per job by verb and resource, as the API server counts them;
	// TailWritesByResource the same from the last RayJob seen Complete to quiescence: what a later quiescence is
	// made of.
	ServerWritesByResource map[string]float64 `json:"serverWritesPerJobByResource,omitempty"`
	// ReconcilesByController is each of the operator's controllers' reconciles per job (controller_runtime_reconcile_total).
	ReconcilesByController map[string]float64 `json:"reconcilesPerJobByController,omitempty"`
	TailWritesByResource   map[string]float64 `json:"tailWritesPerJobByResource,omitempty"`
	// EventsByReason is the Events there are per job at quiescence, by the component that reported them and their
	// reason ("rayjob-controller/CreatedRayCluster"), each counted once whatever its series count.
	EventsByReason map[string]float64 `json:"eventsPerJobByReason,omitempty"`
	// AllocMiBPerJob is what the operator's Go heap allocated per job (go_memstats_alloc_bytes_total).
	AllocMiBPerJob float64  `json:"allocatedMiBPerJob,omitempty"`
	Profiles       []string `json:"profiles,omitempty"`
}

// BenchmarkSideBySideRayJobs races the operators on RayJob throughput: each on a fresh dev cluster whose pod IPs
// answer (internal/testutil/podnet) with a fake Ray head per head pod (internal/testutil/fakeray, its jobs run
// jobRun and succeed), both operators reaching Ray through the API server's proxy (--use-kubernetes-proxy). One
// client creates the RayJobs (HTTPMode, a cluster of 1 head + 1 worker each, deleted when its job ends) one at a
// time and watches until every one is Complete, then counts to quiescence. Settings from the environment:
//
//	MANTA_BENCH_JOBS              RayJobs per trial (default 200)
//	MANTA_BENCH_JOB_CONTENDERS    default manta,kuberay-c8 (also manta-base: MANTA_BENCH_BASE, _BASE_BIN and _BASE_ARGS as in BenchmarkSideBySide)
//	MANTA_BENCH_JOB_ROUNDS        rounds, the contenders' order rotated each round (default 1)
//	MANTA_BENCH_JOBS_JSON         where to write the results (default <tmp>/manta-bench/rayjobs.json)
//	MANTA_BENCH_PPROF             a directory: Manta's CPU profile of each trial (MANTA_BENCH_PPROF_SECONDS) and its heap at all Complete
//
// Needs root (network namespaces), and no other oracle or bench run routing podnet.Range.
func BenchmarkSideBySideRayJobs(b *testing.B) {
	jobs := envInts(b, "MANTA_BENCH_JOBS", []int{200})[0]
	names := strings.Split(envOr("MANTA_BENCH_JOB_CONTENDERS", "manta,kuberay-c8"), ",")
	rounds := envInts(b, "MANTA_BENCH_JOB_ROUNDS", []int{1})[0]
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
	var results []jobResult
	for i := 0; i < b.N; i++ {
		for r := range rounds {
			for _, n := range roundOrder(names, r) {
				c, ok := contenders[n]
				if !ok || c.args == nil {
					b.Fatalf("MANTA_BENCH_JOB_CONTENDERS: %q is not an operator contender of this tree", n)
				}
				if needsCurrentManta(c, bins) && bins["manta"] == "" {
					bins["manta"] = testutil.BuildManta(b)
				}
				results = append(results, runJobTrial(b, c, binaryFor(c, bins), kuberayCRDDir(root), jobs))
			}
		}
	}
	out := envOr("MANTA_BENCH_JOBS_JSON", filepath.Join(os.TempDir(), "manta-bench", "rayjobs.json"))
	table := jobTable(results)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		b.Fatal(err)
	}
	data, _ := json.MarshalIndent(map[string]any{"trials": results, "table": table}, "", "  ")
	if err := os.WriteFile(out, data, 0o644); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "\n%s\nresults written to %s\n", table, out)
}

// runJobTrial is one contender's trial on a dev cluster of its own.
func runJobTrial(b *testing.B, c contender, bin, kuberayCRDs string, jobs int) jobResult {
	b.Helper()
	const perNamespace = 10
	pn, err := podnet.New()
	if err != nil {
		b.Fatal(err)
	}
	defer pn.Close()
	// podnet has pod CIDRs for 16 nodes; 200 jobs make at most 400 pods at once.
	opts := devcluster.Options{Nodes: 16, NodeCPU: "1000", NodeMemory: "4000Gi", NodeMaxPods: 1000}
	if c.kuberayCRDs && kuberayCRDs != "" {
		opts.CRDDirs = []string{kuberayCRDs}
	}
	e := startEnvFor(b, 40*time.Minute, opts)
	defer e.stop()
	if err := podnet.SetNodeCIDRs(e.ctx, e.cl); err != nil {
		b.Fatal(err)
	}
	heads := serveFakeHeads(b, e, pn)
	defer heads.close()
	var nsNames []string
	for i := range (jobs + perNamespace - 1) / perNamespace {
		nsNames = append(nsNames, fmt.Sprintf("bench-jobs-%d", i))
	}
	e.createNamespaces(b, nsNames...)
	run := "jobs-" + c.name
	c.args = withKubernetesProxy(c.args)
	op := startOperatorProcess(b, e, c, bin)
	defer op.stop()
	r := jobResult{Contender: c.name, Jobs: jobs, Args: op.args[1:]}
	before, cpu0, served0 := op.scrape(b), procCPUSeconds(op.cmd.Process.Pid), e.serverRequests(b)
	if op.pprofDir != "" {
		op.startCPUProfile(b, run) // MANTA_BENCH_PPROF, as in BenchmarkSideBySide; the wait for it delays quiescence
	}
	cp0 := map[string]float64{}
	for name, pid := range e.cluster.PIDs() {
		cp0[name] = procCPUSeconds(pid)
	}

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	done := watchJobsComplete(b, ctx, e, run, jobs)
	start := time.Now()
	created := map[string]time.Time{}
	for i := range jobs {
		j := benchRayJob(nsNames[i/perNamespace], fmt.Sprintf("job-%d", i), run)
		if err := e.cl.Create(e.ctx, j); err != nil {
			b.Fatalf("create RayJob %s/%s: %v", j.Namespace, j.Name, err)
		}
		created[j.Namespace+"/"+j.Name] = time.Now()
	}
	r.CreateS = time.Since(start).Seconds()
	var completeAt map[string]time.Time
	select {
	case completeAt = <-done:
	case <-time.After(30 * time.Minute):
		b.Fatalf("%s: %d RayJobs not all Complete within 30 minutes", c.name, jobs)
	}
	var lat []time.Duration
	var end time.Time
	for k, t := range completeAt {
		lat = append(lat, t.Sub(created[k]))
		if t.After(end) {
			end = t
		}
	}
	r.AllCompleteS = end.Sub(start).Seconds()
	r.JobsPerMinute = math.Round(float64(jobs)/end.Sub(start).Minutes()*10) / 10
	r.P50S, _, r.P99S, _ = percentiles(lat)
	r.Submissions = heads.submissions()

	if op.pprofDir != "" {
		r.Profiles = op.finishProfiles(b, fmt.Sprintf("%s-%d", run, jobs))
	}
	snap := op.scrape(b)
	servedAtComplete := e.serverRequests(b)
	at := counted{readAt: time.Now(), serverWrites: serverWrites(servedAtComplete), operatorWrites: operatorWrites(snap.requests)}
	lastWrite, reached := waitQuiescent(b, e, op, at)
	if !reached {
		b.Fatalf("%s: not quiescent after its RayJobs completed", c.name)
	}
	r.QuiescentS = lastWrite.Sub(start).Seconds()
	r.CPUSeconds = procCPUSeconds(op.cmd.Process.Pid) - cpu0
	r.ControlPlaneCPU = map[string]float64{}
	for name, pid := range e.cluster.PIDs() {
		r.ControlPlaneCPU[name] = math.Round((procCPUSeconds(pid)-cp0[name])*100) / 100
	}
	r.PeakRSSMiB = procPeakRSSMiB(op.cmd.Process.Pid)
	d := op.scrape(b).minus(before)
	served := e.serverRequests(b)
	proxied := 0.0
	for k, v := range served {
		if f := strings.Fields(k); len(f) == 2 && strings.HasSuffix(f[1], "/proxy") {
			proxied += v - served0[k]
		}
	}
	opWrites := operatorWrites(d.requests)
	// The API server counts a proxied request as CONNECT whatever its method, and Manta's client-go request metric
	// counts its Ray requests (sent through client-go's REST client) by method: the fake heads count the writes
	// among them (submissions, stops, deletes), which are Ray's, not Kubernetes objects. KubeRay sends its Ray
	// requests through the REST config's bare HTTP client, which its metric does not see.
	if !c.kuberay {
		opWrites -= float64(heads.rayWrites())
	}
	r.WritesPerJob = opWrites / float64(jobs)
	r.RayAPIPerJob = proxied / float64(jobs)
	r.ServerWritesPerJob = (serverWrites(served) - serverWrites(served0)) / float64(jobs)
	r.ServerWritesByResource = writesByResource(served, served0, jobs)
	r.TailWritesByResource = writesByResource(served, servedAtComplete, jobs)
	r.ReconcilesByController = map[string]float64{}
	for c, v := range d.reconcilesBy {
		r.ReconcilesByController[c] = math.Round(v/float64(jobs)*100) / 100
	}
	r.EventsByReason = eventsByReason(b, e, jobs)
	r.AllocMiBPerJob = math.Round(d.allocBytes/float64(jobs)/(1<<20)*1000) / 1000
	r.RequestsByVerb = map[string]float64{}
	for verb, v := range d.requests {
		r.RequestsByVerb[verb] = math.Round(v/float64(jobs)*100) / 100
	}
	progressf(b, "%s, %d RayJobs: all Complete in %.1fs (%.1f jobs/min; p50 %.1fs, p99 %.1fs), %d submissions; to quiescence at %.1fs: %.1f CPU-s, peak RSS %.0f MiB, %.1f writes/job, %.1f Ray API requests/job, %.1f server writes/job, %.3f MiB allocated/job",
		c.name, jobs, r.AllCompleteS, r.JobsPerMinute, r.P50S, r.P99S, r.Submissions, r.QuiescentS, r.CPUSeconds, r.PeakRSSMiB, r.WritesPerJob, r.RayAPIPerJob, r.ServerWritesPerJob, r.AllocMiBPerJob)
	return r
}

// eventsByReason counts the dev cluster's Events per job by reporting component and reason.
func eventsByReason(b *testing.B, e *trialEnv, jobs int) map[string]float64 {
	evs, err := e.cs.CoreV1().Events("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatalf("list events: %v", err)
	}
	out := map[string]float64{}
	for _, ev := range evs.Items {
		by := ev.ReportingController
		if by == "" {
			by = ev.Source.Component
		}
		out[by+"/"+ev.Reason]++
	}
	for k, v := range out {
		out[k] = math.Round(v/float64(jobs)*100) / 100
	}
	return out
}

// withKubernetesProxy adds --use-kubernetes-proxy to a contender's command line: the harness has no cluster DNS.
func withKubernetesProxy(args func(bin, kc, m, pp string) []string) func(bin, kc, m, pp string) []string {
	return func(bin, kc, m, pp string) []string {
		return append(args(bin, kc, m, pp), "--use-kubernetes-proxy")
	}
}

// benchRayJob is an HTTPMode RayJob whose job succeeds, on a cluster of 1 head + 1 worker deleted once it ends.
func benchRayJob(ns, name, run string) *rayv1.RayJob {
	rc := rayCluster(ns, name, run, 1)
	return &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{benchLabel: run}},
		Spec: rayv1.RayJobSpec{
			Entrypoint: "python -c 'print(1)'", SubmissionMode: rayv1.HTTPMode, RayClusterSpec: &rc.Spec,
			ShutdownAfterJobFinishes: true, TTLSecondsAfterFinished: 0,
		},
	}
}

// watchJobsComplete watches the RayJobs labelled run and sends, once all n are Complete with their job SUCCEEDED,
// when each was first seen so. A job that fails ends the benchmark.
func watchJobsComplete(b *testing.B, ctx context.Context, e *trialEnv, run string, n int) <-chan map[string]time.Time {
	out := make(chan map[string]time.Time, 1)
	w, err := e.wcl.Watch(ctx, &rayv1.RayJobList{}, client.MatchingLabels{benchLabel: run})
	if err != nil {
		b.Fatalf("watch RayJobs: %v", err)
	}
	go func() {
		defer w.Stop()
		at := map[string]time.Time{}
		for ev := range w.ResultChan() {
			j, ok := ev.Object.(*rayv1.RayJob)
			if !ok {
				continue
			}
			key := j.Namespace + "/" + j.Name
			if _, seen := at[key]; seen || j.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusComplete {
				if j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusFailed {
					b.Errorf("RayJob %s failed: %s", key, j.Status.Message)
				}
				continue
			}
			if j.Status.JobStatus != rayv1.JobStatusSucceeded {
				b.Errorf("RayJob %s Complete with job status %q", key, j.Status.JobStatus)
			}
			at[key] = time.Now()
			if len(at) == n {
				out <- at
				return
			}
		}
	}()
	return out
}

// fakeHeads answers for every head pod of the trial at its IP with a fake Ray head of its own.
type fakeHeads struct {
	pods toolscache.Indexer
	// writes counts the requests other than GET and HEAD the heads answered (submissions, stops, deletes).
	writes atomic.Int64
	mu     sync.Mutex
	heads  map[types.UID]*fakeray.Head
	reads  map[string]int64 // GETs answered, by API (rayAPI)
	close  func()           // stops answering and ends every head's jobs
}

const byPodIP = "podIP"

// serveFakeHeads listens in the pod network on Ray's dashboard and dashboard agent ports, until its close.
func serveFakeHeads(b *testing.B, e *trialEnv, n *podnet.Network) *fakeHeads {
	factory := informers.NewSharedInformerFactoryWithOptions(e.cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = rayv1.LabelNodeType + "=" + rayv1.NodeTypeHead
	}))
	inf := factory.Core().V1().Pods().Informer()
	if err := inf.AddIndexers(toolscache.Indexers{byPodIP: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Status.PodIP != "" {
			return []string{p.Status.PodIP}, nil
		}
		return nil, nil
	}}); err != nil {
		b.Fatal(err)
	}
	factory.Start(e.ctx.Done())
	factory.WaitForCacheSync(e.ctx.Done())
	h := &fakeHeads{pods: inf.GetIndexer(), heads: map[types.UID]*fakeray.Head{}, reads: map[string]int64{}}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, localAddr{}, c.LocalAddr())
		}}
	for _, port := range []int{8265, 52365} {
		l, err := n.Listen(net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
		if err != nil {
			b.Fatalf("listen on port %d in the pod network: %v", port, err)
		}
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				b.Errorf("fake Ray heads on port %d: %v", port, err)
			}
		}()
	}
	h.close = func() {
		_ = srv.Close()
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, hd := range h.heads {
			hd.Close()
		}
	}
	return h
}

type localAddr struct{}

func (h *fakeHeads) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	addr, _ := req.Context().Value(localAddr{}).(*net.TCPAddr)
	if addr == nil {
		http.Error(w, "fake Ray: no local address", http.StatusInternalServerError)
		return
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		h.writes.Add(1)
	} else {
		h.mu.Lock()
		h.reads[rayAPI(req.URL.Path)]++
		h.mu.Unlock()
	}
	hd := h.headAt(addr.IP.String())
	if hd == nil {
		http.Error(w, "fake Ray: no Ray head at "+addr.IP.String(), http.StatusBadGateway)
		return
	}
	if addr.Port == 52365 {
		hd.Agent().ServeHTTP(w, req)
		return
	}
	hd.Dashboard().ServeHTTP(w, req)
}

// headAt is the fake head of the running head pod at ip, made on first use; nil when no such pod runs.
func (h *fakeHeads) headAt(ip string) *fakeray.Head {
	objs, _ := h.pods.ByIndex(byPodIP, ip)
	for _, o := range objs {
		p := o.(*corev1.Pod)
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		hd := h.heads[p.UID]
		if hd == nil {
			hd = fakeray.New(fakeray.Options{Run: fakeray.Scripted(jobRun)})
			h.heads[p.UID] = hd
		}
		return hd
	}
	return nil
}

// rayAPI names the Ray API a path belongs to: jobs, serve, actors, tasks, or the path itself.
func rayAPI(path string) string {
	switch {
	case strings.HasPrefix(path, "/api/jobs/"):
		return "jobs"
	case strings.HasPrefix(path, "/api/serve/"):
		return "serve"
	case strings.HasPrefix(path, "/api/v0/actors"):
		return "actors"
	case strings.HasPrefix(path, "/api/v0/tasks"):
		return "tasks"
	}
	return path
}

// readsByAPI is a copy of the GETs the heads answered, by API.
func (h *fakeHeads) readsByAPI() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int64, len(h.reads))
	for k, v := range h.reads {
		out[k] = v
	}
	return out
}

// rayWrites is how many requests other than GET and HEAD reached the heads.
func (h *fakeHeads) rayWrites() int64 { return h.writes.Load() }

// submissions is what the heads accepted.
func (h *fakeHeads) submissions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, hd := range h.heads {
		a, _ := hd.Submissions()
		n += a
	}
	return n
}

// jobTable is the results as a Markdown table.
func jobTable(rs []jobResult) string {
	var sb strings.Builder
	sb.WriteString("| RayJobs | contender | all Complete | jobs per minute | p50 / p99 create -> Complete | submissions | quiescent | operator CPU-s | apiserver / etcd CPU-s | peak RSS | writes per job | Ray API requests per job | all clients' writes per job |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		cp := "-"
		if r.ControlPlaneCPU != nil {
			cp = fmt.Sprintf("%.1f / %.1f", r.ControlPlaneCPU["kube-apiserver"], r.ControlPlaneCPU["etcd"])
		}
		fmt.Fprintf(&sb, "| %d | %s | %.1f s | %.1f | %.1f / %.1f s | %d | %.1f s | %.1f | %s | %.0f MiB | %.1f | %.1f | %.1f |\n",
			r.Jobs, r.Contender, r.AllCompleteS, r.JobsPerMinute, r.P50S, r.P99S, r.Submissions, r.QuiescentS,
			r.CPUSeconds, cp, r.PeakRSSMiB, r.WritesPerJob, r.RayAPIPerJob, r.ServerWritesPerJob)
	}
	return sb.String()
}
