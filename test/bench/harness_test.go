package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
)

// Operator client limits for every benchmark: KubeRay's defaults (--qps 100, --burst 200), so the figures compare
// like with like. The harness's own client uses the dev cluster's admin config and is not counted.
const (
	operatorQPS   = 100
	operatorBurst = 200
	// operatorConcurrency is `manta operator --reconcile-concurrency`'s default.
	operatorConcurrency = 4
)

func init() {
	// The operator logs at info level per reconcile; at benchmark scale that is noise on a 2-core machine.
	// MANTA_BENCH_LOG=1 turns the operator's logs on.
	if os.Getenv("MANTA_BENCH_LOG") != "" {
		log.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		log.SetLogger(zap.New(zap.WriteTo(nopWriter{})))
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// env is one dev cluster and the harness's (uncounted) clients to it.
type env struct {
	ctx     context.Context
	cluster *devcluster.Cluster
	admin   *rest.Config
	cl      client.Client
	cs      kubernetes.Interface
}

// startEnv starts a dev cluster for one benchmark; it is stopped when the benchmark ends. The context ends
// with the benchmark or after timeout, whichever is first.
func startEnv(b testing.TB, timeout time.Duration, opts devcluster.Options) *env {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	b.Cleanup(cancel)
	if dir := os.Getenv("MANTA_BENCH_DIR"); dir != "" && opts.Dir == "" {
		// Keep the cluster's files and component logs.
		opts.Dir = filepath.Join(dir, b.Name())
		_ = os.RemoveAll(opts.Dir)
	}
	if opts.Logf == nil && os.Getenv("MANTA_BENCH_LOG") != "" {
		opts.Logf = b.Logf
	}
	start := time.Now()
	c, err := devcluster.Start(ctx, opts)
	if err != nil {
		b.Fatalf("start dev cluster: %v", err)
	}
	b.Cleanup(func() {
		if err := c.Stop(); err != nil {
			b.Logf("stop dev cluster: %v", err)
		}
	})
	progressf(b, "dev cluster with %d nodes up in %s", nodeCount(opts), time.Since(start).Round(time.Millisecond))
	admin := c.RESTConfig()
	scheme, err := operator.Scheme()
	if err != nil {
		b.Fatal(err)
	}
	cl, err := client.New(admin, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	return &env{ctx: ctx, cluster: c, admin: admin, cl: cl, cs: kubernetes.NewForConfigOrDie(admin)}
}

func nodeCount(o devcluster.Options) int {
	if len(o.Pools) == 0 {
		return max(o.Nodes, 3)
	}
	n := 0
	for _, p := range o.Pools {
		n += p.Count
	}
	return n
}

// requireKinds fails the benchmark with a clear message when the operator does not register a controller the
// scenario needs (the scheme is the operator's list of API groups; see internal/operator/controllers.go).
func requireKinds(b testing.TB, gvks ...schema.GroupVersionKind) {
	b.Helper()
	scheme, err := operator.Scheme()
	if err != nil {
		b.Fatal(err)
	}
	for _, gvk := range gvks {
		if !scheme.Recognizes(gvk) {
			b.Fatalf("the operator does not register %s yet (internal/operator/controllers.go): this benchmark needs its controller", gvk)
		}
	}
}

// operatorRun is the operator running in this process against the env, with its API requests counted.
type operatorRun struct {
	mgr   ctrl.Manager
	calls *apiCounter
	stop  func()
	// queued0 and active0 are the raycluster work queue's depth and workers in flight before this operator
	// started: the gauges outlive each manager, and one stopped with work queued leaves its count behind.
	queued0, active0 float64
}

// startOperator runs the operator the way `manta operator` does (operator.NewManager + operator.Setup), with
// the counting transport on its rest.Config. It is stopped when the benchmark ends, or earlier with stop.
func (e *env) startOperator(b testing.TB, opts operator.Options) *operatorRun {
	b.Helper()
	requireKinds(b, rayv1.GroupVersion.WithKind("RayCluster"))
	if opts.ReconcileConcurrency == 0 {
		opts.ReconcileConcurrency = operatorConcurrency
	}
	calls := newAPICounter()
	cfg := e.cluster.RESTConfig()
	cfg.QPS, cfg.Burst = operatorQPS, operatorBurst
	cfg.Wrap(calls.wrap)
	// Every benchmark in this process starts its own operator, so controller names repeat.
	opts.SkipNameValidation = true
	mgr, err := operator.NewManager(cfg, opts)
	if err != nil {
		b.Fatalf("operator manager: %v", err)
	}
	if err := operator.Setup(mgr, opts); err != nil {
		b.Fatalf("operator setup: %v", err)
	}
	queued0, active0 := rayclusterQueue()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			b.Errorf("operator: %v", err)
		}
	}
	b.Cleanup(stop)
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	// The controllers start their informers once the manager runs them; wait for the RayCluster controller's, so
	// that start-up requests are over before a scenario starts counting.
	for _, obj := range []client.Object{&rayv1.RayCluster{}, &corev1.Pod{}, &corev1.Service{}} {
		if _, err := mgr.GetCache().GetInformer(syncCtx, obj, cache.BlockUntilSynced(true)); err != nil {
			b.Fatalf("operator cache for %T: %v", obj, err)
		}
	}
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		b.Fatal("operator caches did not sync within a minute")
	}
	e.sleep(time.Second)
	return &operatorRun{mgr: mgr, calls: calls, stop: stop, queued0: queued0, active0: active0}
}

// reconciles is how many reconciles the named controller has finished in this process, from controller-runtime's
// controller_runtime_reconcile_total (which outlives each manager, so take differences).
func reconciles(controller string) float64 {
	return metricSum("controller_runtime_reconcile_total", "controller", controller)
}

// metricSum is the sum of the named metric's series (counters and gauges) in controller-runtime's registry whose
// label has value (NaN when the registry cannot be read).
func metricSum(name, label, value string) float64 {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		return math.NaN()
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return total
}

// registryHistogram is the named histogram's cumulative buckets in controller-runtime's registry, summed over its
// series (+Inf being the count); empty when absent.
func registryHistogram(name string) histogram {
	h := histogram{}
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		return h
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			hm := m.GetHistogram()
			for _, bk := range hm.GetBucket() {
				h[bk.GetUpperBound()] += float64(bk.GetCumulativeCount())
			}
			h[math.Inf(1)] += float64(hm.GetSampleCount())
		}
	}
	return h
}

// quiesce waits until the in-process operator has written nothing for quietFor and every event it recorded is
// sent, and returns how long that took.
func (e *env) quiesce(b testing.TB, op *operatorRun, timeout time.Duration) time.Duration {
	b.Helper()
	events, ok := op.mgr.(interface{ EventsIdle() bool })
	if !ok {
		b.Fatalf("the operator's manager (%T) does not say when its events are sent", op.mgr)
	}
	writes, changed := op.calls.snapshot().writes(), time.Now()
	return waitFor(b, e.ctx, "the operator quiescent", timeout, 250*time.Millisecond, func(context.Context) (bool, string, error) {
		if w := op.calls.snapshot().writes(); w != writes {
			writes, changed = w, time.Now()
		}
		quiet := time.Since(changed)
		return quiet >= quietFor && events.EventsIdle(), fmt.Sprintf("%d writes, the last %s ago, events idle %v", writes, quiet.Round(time.Millisecond), events.EventsIdle()), nil
	})
}

// rayclusterQueue is the depth of the raycluster controller's work queue and its reconciles in flight, summed over
// the managers this process has run.
func rayclusterQueue() (depth, active float64) {
	return metricSum("workqueue_depth", "name", "raycluster"), metricSum("controller_runtime_active_workers", "controller", "raycluster")
}

// touchAnnotation is the annotation settle changes on every RayCluster of a run: metadata the operator must look
// at (the RayCluster controller reconciles on annotation changes) and that asks nothing of it.
const touchAnnotation = "bench.manta.dev/touch"

// settle is the barrier that stands for "long enough" before and after counting the operator's writes. It changes
// touchAnnotation on every RayCluster labelled run (through the harness's uncounted client) and returns once the
// operator has processed every change: its cache holds each new value, its raycluster work queue counted an add
// for each cluster since, nothing is queued or in flight there, a reconcile finished for every add counted since
// the change, and every event recorded so far has been sent. So every cluster has been reconciled again after the
// change, and every write of a reconcile that started before it (an event included) has been sent.
func (e *env) settle(b testing.TB, op *operatorRun, run string, timeout time.Duration) {
	b.Helper()
	const controller = "raycluster"
	queue := func() (depth, active float64) {
		depth, active = rayclusterQueue()
		return depth - op.queued0, active - op.active0
	}
	events, ok := op.mgr.(interface{ EventsIdle() bool })
	if !ok {
		b.Fatalf("the operator's manager (%T) does not say when its events are sent", op.mgr)
	}
	// Nothing queued or in flight before the change, so that an add counted from here on is one the change
	// caused or one that comes after it.
	waitFor(b, e.ctx, "the operator's raycluster queue idle", timeout, 50*time.Millisecond, func(context.Context) (bool, string, error) {
		depth, active := queue()
		return depth == 0 && active == 0, fmt.Sprintf("%.0f queued, %.0f in flight", depth, active), nil
	})
	var list rayv1.RayClusterList
	if err := e.cl.List(e.ctx, &list, client.MatchingLabels{benchLabel: run}); err != nil {
		b.Fatal(err)
	}
	adds0, rec0 := metricSum("workqueue_adds_total", "name", controller), reconciles(controller)
	token := fmt.Sprint(time.Now().UnixNano())
	for i := range list.Items {
		c := &list.Items[i]
		patch := client.MergeFrom(c.DeepCopy())
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[touchAnnotation] = token
		if err := e.cl.Patch(e.ctx, c, patch); err != nil {
			b.Fatalf("touch RayCluster %s/%s: %v", c.Namespace, c.Name, err)
		}
	}
	n := float64(len(list.Items))
	last := ""
	took := waitFor(b, e.ctx, fmt.Sprintf("the operator to process a change to %d RayClusters", len(list.Items)), timeout, 50*time.Millisecond, func(ctx context.Context) (bool, string, error) {
		var cached rayv1.RayClusterList
		if err := op.mgr.GetCache().List(ctx, &cached, client.MatchingLabels{benchLabel: run}); err != nil {
			return false, "", err
		}
		seen := 0
		for _, c := range cached.Items {
			if c.Annotations[touchAnnotation] == token {
				seen++
			}
		}
		adds, recs := metricSum("workqueue_adds_total", "name", controller)-adds0, reconciles(controller)-rec0
		depth, active := queue()
		p := fmt.Sprintf("%d/%d changes in the cache, %.0f adds, %.0f reconciles, %.0f queued, %.0f in flight", seen, len(list.Items), adds, recs, depth, active)
		last = p
		if seen < len(list.Items) || adds < n || depth > 0 || active > 0 || recs < adds {
			return false, p, nil
		}
		return events.EventsIdle(), p + ", events not all sent", nil
	})
	b.Logf("settled in %s: %s", took.Round(time.Millisecond), last)
}

// waitFor polls cond every interval until it reports done, logging its progress line every 15 s, and returns how
// long it took. It fails the benchmark after timeout, or on an error from cond, with the last progress line.
func waitFor(b testing.TB, ctx context.Context, what string, timeout, interval time.Duration, cond func(context.Context) (bool, string, error)) time.Duration {
	b.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	lastLog := start
	progress := ""
	for {
		done, p, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			b.Fatalf("waiting for %s: %v", what, err)
		}
		if p != "" {
			progress = p
		}
		if done {
			return time.Since(start)
		}
		if time.Since(lastLog) >= 15*time.Second {
			progressf(b, "waiting for %s (%s): %s", what, time.Since(start).Round(time.Second), progress)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			b.Fatalf("%s: not done after %s: %s", what, time.Since(start).Round(time.Second), progress)
		case <-time.After(interval):
		}
	}
}

// createNamespaces creates the namespaces and waits for their default ServiceAccount, without which the API
// server's ServiceAccount admission rejects pods.
func (e *env) createNamespaces(b testing.TB, names ...string) {
	b.Helper()
	for _, n := range names {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if err := e.cl.Create(e.ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatalf("create namespace %s: %v", n, err)
		}
	}
	waitFor(b, e.ctx, "default service accounts", time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, string, error) {
		for _, n := range names {
			if _, err := e.cs.CoreV1().ServiceAccounts(n).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return false, "namespace " + n, nil
			}
		}
		return true, "", nil
	})
}

// createAll creates the objects with up to parallel requests in flight and returns when each create returned.
func (e *env) createAll(b testing.TB, parallel int, objs []client.Object) []time.Time {
	b.Helper()
	created := make([]time.Time, len(objs))
	g, ctx := errgroup.WithContext(e.ctx)
	g.SetLimit(parallel)
	for i, o := range objs {
		g.Go(func() error {
			if err := e.cl.Create(ctx, o); err != nil {
				return fmt.Errorf("create %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
			}
			created[i] = time.Now()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	return created
}

// sleep waits for d or until the benchmark's context ends.
func (e *env) sleep(d time.Duration) {
	select {
	case <-e.ctx.Done():
	case <-time.After(d):
	}
}

// benchLabel marks every RayCluster a benchmark creates, with the benchmark's run name as value.
const benchLabel = "bench.manta.dev/run"

// rayCluster is the shape of the clusterloader2 configs in KubeRay's benchmark/perf-tests: one head and one
// worker group, Ray 2.52.0, small resource requests.
func rayCluster(ns, name, run string, workers int32) *rayv1.RayCluster {
	podTemplate := func(container, cpu, mem string) corev1.PodTemplateSpec {
		rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: container, Image: "rayproject/ray:2.52.0",
			Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()},
		}}}}
	}
	return &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{benchLabel: run}},
		Spec: rayv1.RayClusterSpec{
			RayVersion: "2.52.0",
			HeadGroupSpec: rayv1.HeadGroupSpec{
				RayStartParams: map[string]string{"dashboard-host": "0.0.0.0"},
				Template:       podTemplate("ray-head", "1", "2Gi"),
			},
			WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{
				GroupName: "small-group", Replicas: ptr.To(workers), MinReplicas: ptr.To(workers), MaxReplicas: ptr.To(workers),
				NumOfHosts: 1, RayStartParams: map[string]string{}, Template: podTemplate("ray-worker", "1", "1Gi"),
			}},
		},
	}
}

// waitClustersReady waits until the n RayClusters labelled with run are all in state ready, and returns when each
// was first seen ready.
func (e *env) waitClustersReady(b testing.TB, run string, n int, timeout time.Duration) map[string]time.Time {
	b.Helper()
	readyAt := map[string]time.Time{}
	// Listing many RayClusters is work for a small API server; poll less often the more there are.
	interval := max(200*time.Millisecond, time.Duration(n)*time.Millisecond)
	waitFor(b, e.ctx, fmt.Sprintf("%d RayClusters ready", n), timeout, interval, func(ctx context.Context) (bool, string, error) {
		var list rayv1.RayClusterList
		if err := e.cl.List(ctx, &list, client.MatchingLabels{benchLabel: run}); err != nil {
			return false, "", nil // the API server may be busy; try again
		}
		now := time.Now()
		readyWorkers, desiredWorkers := 0, 0
		for _, c := range list.Items {
			readyWorkers += int(c.Status.ReadyWorkerReplicas)
			desiredWorkers += int(c.Status.DesiredWorkerReplicas)
			key := c.Namespace + "/" + c.Name
			if _, seen := readyAt[key]; !seen && c.Status.State == rayv1.Ready {
				readyAt[key] = now
			}
		}
		return len(readyAt) >= n, fmt.Sprintf("%d/%d clusters ready, %d/%d workers ready", len(readyAt), n, readyWorkers, desiredWorkers), nil
	})
	return readyAt
}

// podTimeline says when the last of a set of pods was created, scheduled and Ready, as offsets from start, read
// from the pods' own timestamps (whole seconds): it splits a time-to-ready into the operator's part (creating the
// pods) and the scheduler's and the fake kubelets' parts.
type podTimeline struct {
	pods                      int
	created, scheduled, ready time.Duration
}

func (e *env) podTimeline(b testing.TB, start time.Time, namespaces []string, opts ...client.ListOption) podTimeline {
	b.Helper()
	t := podTimeline{}
	from := start.Truncate(time.Second)
	for _, ns := range namespaces {
		var pods corev1.PodList
		if err := e.cl.List(e.ctx, &pods, append([]client.ListOption{client.InNamespace(ns)}, opts...)...); err != nil {
			b.Fatalf("list pods: %v", err)
		}
		for _, p := range pods.Items {
			t.pods++
			t.created = max(t.created, p.CreationTimestamp.Sub(from))
			for _, c := range p.Status.Conditions {
				switch c.Type {
				case corev1.PodScheduled:
					t.scheduled = max(t.scheduled, c.LastTransitionTime.Sub(from))
				case corev1.PodReady:
					t.ready = max(t.ready, c.LastTransitionTime.Sub(from))
				}
			}
		}
	}
	return t
}

func (t podTimeline) String() string {
	return fmt.Sprintf("%d pods: last created at +%.0fs, last scheduled at +%.0fs, last Ready at +%.0fs (pod timestamps, whole seconds)",
		t.pods, secs(t.created), secs(t.scheduled), secs(t.ready))
}

// heap is the Go heap in use after two garbage collections.
func heap() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

func mib(bytes uint64) float64 { return float64(bytes) / (1 << 20) }

// rssMiB is this process's resident set size from /proc (0 when unavailable).
func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb float64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%f kB", &kb); err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}

// progressf prints a progress line to stdout as it happens (a benchmark's log is printed only at its end).
func progressf(b testing.TB, format string, args ...any) {
	fmt.Fprintf(os.Stdout, "%s %s: %s\n", time.Now().Format("15:04:05"), b.Name(), fmt.Sprintf(format, args...))
}

// detailf prints lines that do not fit the benchmark's log (testing keeps only its first 10 lines) to stdout,
// each prefixed with the benchmark's name.
func detailf(b testing.TB, format string, args ...any) {
	var sb strings.Builder
	for _, line := range strings.Split(fmt.Sprintf(format, args...), "\n") {
		fmt.Fprintf(&sb, "%s: %s\n", b.Name(), line)
	}
	fmt.Fprint(os.Stdout, "\n"+sb.String())
}

// percentiles of durations, in seconds: p50, p90, p99, max.
func percentiles(ds []time.Duration) (p50, p90, p99, maxS float64) {
	if len(ds) == 0 {
		return
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[max(i, 0)].Seconds()
	}
	return at(0.50), at(0.90), at(0.99), s[len(s)-1].Seconds()
}

func secs(d time.Duration) float64 { return d.Seconds() }
