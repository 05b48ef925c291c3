package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// curvePoint is one contender's figures once every cluster of a step is ready.
type curvePoint struct {
	Contender string `json:"contender"`
	Clusters  int    `json:"clusters"`
	// StepS is the step's first create -> all its clusters ready; PerClusterMs that over the clusters it added.
	StepS        float64 `json:"stepSeconds"`
	PerClusterMs float64 `json:"perClusterMilliseconds"`
	// The operator's resident memory now and at its peak so far, and its CPU since it started.
	RSSMiB     float64 `json:"operatorRSSMiB"`
	PeakRSSMiB float64 `json:"operatorPeakRSSMiB"`
	CPUS       float64 `json:"operatorCPUSeconds"`
	// The API server's and etcd's resident memory.
	APIServerRSSMiB float64 `json:"apiserverRSSMiB"`
	EtcdRSSMiB      float64 `json:"etcdRSSMiB"`
}

// curveNodes and curveNodeMaxPods hold 10,000 clusters of 4 pods with room to spare.
const (
	curveNodes        = 48
	curveNodeMaxPods  = 1000
	curvePerNamespace = 100
	curveInFlight     = 4
)

// BenchmarkScaleCurve grows one dev cluster per contender to each step's number of RayClusters (1 head + 3 workers,
// the side-by-side shape), and once every cluster of a step is ready records the operator's memory and CPU, the
// time per cluster, and the API server's and etcd's memory. A contender whose step does not finish in the step
// timeout ends its curve there. It writes curve.json and one SVG per figure (operator memory, operator CPU, time
// per cluster, API server + etcd memory). Settings:
//
//	MANTA_CURVE_STEPS         cumulative RayClusters per step (default 1000,2500,5000,10000)
//	MANTA_CURVE_CONTENDERS    default manta,kuberay-c8 (any operator contender of BenchmarkSideBySide); none runs
//	                          nothing and only writes MANTA_CURVE_WITH's points
//	MANTA_CURVE_STEP_TIMEOUT  default 30m
//	MANTA_CURVE_OUT           directory of curve.json and the SVGs (default <tmp>/manta-bench/curve)
//	MANTA_CURVE_WITH          earlier runs' curve.json files (comma-separated): their points of the contenders this
//	                          run leaves out are written, tabled and plotted with this run's, in the files' order
//	                          before this run's (one contender rerun alone); a contender in two files comes from the later
//	MANTA_CURVE_PPROF         a directory: the API server's CPU profile (60 s) a minute into each step and every
//	                          5 minutes after, as <contender>-<clusters>-<k>.apiserver.cpu.pprof
func BenchmarkScaleCurve(b *testing.B) {
	steps := envInts(b, "MANTA_CURVE_STEPS", []int{1000, 2500, 5000, 10000})
	names := strings.Split(envOr("MANTA_CURVE_CONTENDERS", "manta,kuberay-c8"), ",")
	stepTimeout, err := time.ParseDuration(envOr("MANTA_CURVE_STEP_TIMEOUT", "30m"))
	if err != nil {
		b.Fatalf("MANTA_CURVE_STEP_TIMEOUT: %v", err)
	}
	root, err := devcluster.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	bins := map[string]string{"kuberay": filepath.Join(root, "bin", "kuberay-operator")}
	var points []curvePoint
	for i := 0; i < b.N; i++ {
		for _, n := range names {
			if n == "none" {
				continue
			}
			c, ok := contenders[n]
			if !ok || c.args == nil || c.name == "manta-base" {
				b.Fatalf("MANTA_CURVE_CONTENDERS: %q is not an operator contender of this tree", n)
			}
			if needsCurrentManta(c, bins) && bins["manta"] == "" {
				bins["manta"] = testutil.BuildManta(b)
			}
			points = append(points, runCurve(b, c, binaryFor(c, bins), kuberayCRDDir(root), steps, stepTimeout)...)
		}
	}
	if with := os.Getenv("MANTA_CURVE_WITH"); with != "" {
		files := strings.Split(with, ",")
		for i := len(files) - 1; i >= 0; i-- { // backwards: each file's points go before those already in
			data, err := os.ReadFile(files[i])
			if err != nil {
				b.Fatalf("MANTA_CURVE_WITH: %v", err)
			}
			if points, err = withEarlierCurve(data, points); err != nil {
				b.Fatalf("MANTA_CURVE_WITH %s: %v", files[i], err)
			}
		}
	}
	out := envOr("MANTA_CURVE_OUT", filepath.Join(os.TempDir(), "manta-bench", "curve"))
	if err := writeCurve(out, points); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "\n%s\nresults and plots written to %s\n", curveTable(points), out)
}

// runCurve is one contender's curve on a dev cluster of its own.
func runCurve(b *testing.B, c contender, bin, kuberayCRDs string, steps []int, stepTimeout time.Duration) []curvePoint {
	b.Helper()
	profDir := os.Getenv("MANTA_CURVE_PPROF")
	opts := devcluster.Options{Nodes: curveNodes, NodeCPU: "1000", NodeMemory: "4000Gi", NodeMaxPods: curveNodeMaxPods, Profiling: profDir != ""}
	if c.kuberayCRDs && kuberayCRDs != "" {
		opts.CRDDirs = []string{kuberayCRDs}
	}
	e := startEnvFor(b, time.Duration(len(steps))*stepTimeout+10*time.Minute, opts)
	defer e.stop()
	op := startOperatorProcess(b, e, c, bin)
	defer op.stop()
	run := "curve-" + c.name
	var points []curvePoint
	made := 0
	for _, target := range steps {
		if target <= made {
			b.Fatalf("MANTA_CURVE_STEPS must grow: %v", steps)
		}
		var objs []client.Object
		var nsNames []string
		for i := made; i < target; i++ {
			ns := fmt.Sprintf("bench-curve-%d", i/curvePerNamespace)
			if i%curvePerNamespace == 0 {
				nsNames = append(nsNames, ns)
			}
			objs = append(objs, rayCluster(ns, fmt.Sprintf("rc-%d", i), run, 3))
		}
		e.createNamespaces(b, nsNames...)
		start := time.Now()
		stopProfiles := profileStep(b, e, profDir, fmt.Sprintf("%s-%d", c.name, target))
		e.createAll(b, curveInFlight, objs)
		ready := clustersReadyWithin(b, e, run, target, stepTimeout-time.Since(start))
		stopProfiles()
		if !ready {
			progressf(b, "%s: %d clusters not all ready within %s: its curve ends at %d", c.name, target, stepTimeout, made)
			break
		}
		step := time.Since(start)
		pids := e.cluster.PIDs()
		p := curvePoint{Contender: c.name, Clusters: target, StepS: math.Round(step.Seconds()*10) / 10,
			PerClusterMs:    math.Round(float64(step.Milliseconds()) / float64(target-made)),
			RSSMiB:          procStatusMiB(op.cmd.Process.Pid, "VmRSS:"),
			PeakRSSMiB:      procPeakRSSMiB(op.cmd.Process.Pid),
			CPUS:            math.Round(procCPUSeconds(op.cmd.Process.Pid)*10) / 10,
			APIServerRSSMiB: procStatusMiB(pids["kube-apiserver"], "VmRSS:"),
			EtcdRSSMiB:      procStatusMiB(pids["etcd"], "VmRSS:")}
		points = append(points, p)
		made = target
		progressf(b, "%s, %d clusters: step in %.1fs (%.0f ms per cluster), operator RSS %.0f MiB (peak %.0f), %.1f CPU-s; kube-apiserver %.0f MiB, etcd %.0f MiB",
			c.name, target, p.StepS, p.PerClusterMs, p.RSSMiB, p.PeakRSSMiB, p.CPUS, p.APIServerRSSMiB, p.EtcdRSSMiB)
	}
	return points
}

// profileStep profiles the API server's CPU for 60 s a minute into a step and every 5 minutes after, until the
// returned stop is called, into dir as <name>-<k>.apiserver.cpu.pprof: where a long step's time goes. No-op when
// dir is empty.
func profileStep(b *testing.B, e *trialEnv, dir, name string) (stop func()) {
	if dir == "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait := time.Minute
		for k := 1; ; k++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = 4 * time.Minute
			body, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "60").
				Timeout(5 * time.Minute).DoRaw(ctx)
			if err != nil || len(body) == 0 || os.MkdirAll(dir, 0o755) != nil {
				continue
			}
			p := filepath.Join(dir, fmt.Sprintf("%s-%d.apiserver.cpu.pprof", name, k))
			if os.WriteFile(p, body, 0o644) == nil {
				progressf(b, "API server CPU profile: %s", p)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// clustersReadyWithin is waitClustersReady that answers false instead of failing when the time runs out.
func clustersReadyWithin(b *testing.B, e *trialEnv, run string, n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	interval := max(time.Second, time.Duration(n)*time.Millisecond)
	for time.Now().Before(deadline) && e.ctx.Err() == nil {
		var list rayv1.RayClusterList
		if err := e.cl.List(e.ctx, &list, client.MatchingLabels{benchLabel: run}, client.UnsafeDisableDeepCopy); err == nil {
			ready := 0
			for i := range list.Items {
				if list.Items[i].Status.State == rayv1.Ready {
					ready++
				}
			}
			if ready >= n {
				return true
			}
		}
		e.sleep(interval)
	}
	return false
}

// procStatusMiB reads one kB field of /proc/<pid>/status (VmRSS:, VmHWM:) in MiB; 0 when unreadable.
func procStatusMiB(pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			var kb float64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%f kB", &kb); err == nil {
				return math.Round(kb/1024*10) / 10
			}
		}
	}
	return 0
}

// curveFigures are the plotted figures: file name, title, y-axis label and how to read the value from a point.
var curveFigures = []struct {
	file, title, unit string
	value             func(curvePoint) float64
}{
	{"curve-operator-memory.svg", "Operator resident memory once every cluster is ready", "MiB", func(p curvePoint) float64 { return p.RSSMiB }},
	{"curve-operator-cpu.svg", "Operator CPU since it started", "CPU-seconds", func(p curvePoint) float64 { return p.CPUS }},
	{"curve-time-per-cluster.svg", "Time per cluster added in the step", "ms", func(p curvePoint) float64 { return p.PerClusterMs }},
	{"curve-control-plane-memory.svg", "kube-apiserver + etcd resident memory", "MiB", func(p curvePoint) float64 { return p.APIServerRSSMiB + p.EtcdRSSMiB }},
}

// writeCurve writes curve.json and the SVGs into dir.
func writeCurve(dir string, points []curvePoint) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(map[string]any{"points": points, "table": curveTable(points)}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "curve.json"), data, 0o644); err != nil {
		return err
	}
	for _, f := range curveFigures {
		series := map[string][][2]float64{}
		var order []string
		for _, p := range points {
			if _, ok := series[p.Contender]; !ok {
				order = append(order, p.Contender)
			}
			series[p.Contender] = append(series[p.Contender], [2]float64{float64(p.Clusters), f.value(p)})
		}
		svg := lineChartSVG(f.title, "RayClusters (4 pods each)", f.unit, order, series)
		if err := os.WriteFile(filepath.Join(dir, f.file), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// withEarlierCurve puts before points an earlier run's points (its curve.json) of every contender points lacks.
func withEarlierCurve(earlier []byte, points []curvePoint) ([]curvePoint, error) {
	var prev struct {
		Points []curvePoint `json:"points"`
	}
	if err := json.Unmarshal(earlier, &prev); err != nil {
		return nil, err
	}
	ran := map[string]bool{}
	for _, p := range points {
		ran[p.Contender] = true
	}
	var out []curvePoint
	for _, p := range prev.Points {
		if !ran[p.Contender] {
			out = append(out, p)
		}
	}
	return append(out, points...), nil
}

// curveTable is the curve as a Markdown table, with the operator's memory per 1,000 clusters added in each step.
func curveTable(points []curvePoint) string {
	var sb strings.Builder
	sb.WriteString("| contender | clusters (pods) | step | per cluster | operator RSS (peak) | MiB per 1,000 clusters added | operator CPU-s | kube-apiserver / etcd RSS |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|\n")
	prev := map[string]curvePoint{}
	for _, p := range points {
		perK := "-"
		if q, ok := prev[p.Contender]; ok {
			perK = fmt.Sprintf("%.1f", (p.RSSMiB-q.RSSMiB)/float64(p.Clusters-q.Clusters)*1000)
		}
		prev[p.Contender] = p
		fmt.Fprintf(&sb, "| %s | %d (%d) | %.1f s | %.0f ms | %.0f (%.0f) MiB | %s | %.1f | %.0f / %.0f MiB |\n",
			p.Contender, p.Clusters, 4*p.Clusters, p.StepS, p.PerClusterMs, p.RSSMiB, p.PeakRSSMiB, perK, p.CPUS,
			p.APIServerRSSMiB, p.EtcdRSSMiB)
	}
	return sb.String()
}
