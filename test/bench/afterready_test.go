package bench

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// What a trial measures once every cluster is ready and the trial is quiescent, for the operator contenders: a
// scale change on one cluster while all the others exist, and (MANTA_BENCH_IDLE) what the operator costs while
// nothing changes.

// scaleTo is the worker count the scale change asks of one cluster (from the trial's 3).
const scaleTo = 10

// scaleFigures time one cluster's worker group scaled from From to To while the trial's other clusters exist.
type scaleFigures struct {
	Cluster string `json:"cluster"`
	From    int32  `json:"from"`
	To      int32  `json:"to"`
	// PodsS is the spec update -> all To worker pods exist; ReadyS -> status.readyWorkerReplicas is To. -1 when it
	// did not happen within scaleTimeout.
	PodsS  float64 `json:"podsCreatedSeconds"`
	ReadyS float64 `json:"readySeconds"`
}

// idleFigures are the operator's costs over an idle window (every cluster ready, nothing changing).
type idleFigures struct {
	Seconds float64 `json:"seconds"`
	// CPUPercent is the operator's CPU over the window, in percent of one core.
	CPUPercent     float64            `json:"operatorCPUPercentOfCore"`
	RequestsPerMin map[string]float64 `json:"operatorRequestsPerMinuteByVerb,omitempty"`
	WritesPerMin   float64            `json:"operatorWritesPerMinute"`
	// ServerWritesPerMin is what every client wrote to the API server per minute, heartbeats and leases aside.
	ServerWritesPerMin float64 `json:"serverWritesPerMinute"`
	// ControlPlaneCPUPercent is each dev cluster component's CPU over the window, in percent of one core.
	ControlPlaneCPUPercent map[string]float64 `json:"controlPlaneCPUPercentOfCore,omitempty"`
	// Polled is a second window as long, in which the harness reads the API server's and the operator's metrics
	// every quiescePoll as waitQuiescent does: its CPU less the first window's is what counting to quiescence costs
	// each second it lasts, the same for every contender.
	Polled *idleFigures `json:"polled,omitempty"`
}

const (
	scaleTimeout = 5 * time.Minute
	scalePoll    = 50 * time.Millisecond
)

// idleWindow is MANTA_BENCH_IDLE (a Go duration; 0, the default, measures no idle window).
func idleWindow(b *testing.B) time.Duration {
	v := os.Getenv("MANTA_BENCH_IDLE")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.Fatalf("MANTA_BENCH_IDLE=%q: want a duration such as 10m", v)
	}
	return d
}

// scaleOne scales rc's first worker group to `to` (its maximum with it) and times the pods and the status.
func scaleOne(b *testing.B, e *trialEnv, rc *rayv1.RayCluster, to int32) *scaleFigures {
	b.Helper()
	key := client.ObjectKeyFromObject(rc)
	f := &scaleFigures{Cluster: key.String(), From: *rc.Spec.WorkerGroupSpecs[0].Replicas, To: to, PodsS: -1, ReadyS: -1}
	start := time.Now()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &rayv1.RayCluster{}
		if err := e.cl.Get(e.ctx, key, cur); err != nil {
			return err
		}
		g := &cur.Spec.WorkerGroupSpecs[0]
		g.Replicas, g.MaxReplicas = &to, &to
		return e.cl.Update(e.ctx, cur)
	})
	if err != nil {
		b.Fatalf("scale %s to %d workers: %v", key, to, err)
	}
	for time.Since(start) < scaleTimeout && e.ctx.Err() == nil {
		if f.PodsS < 0 && workerPods(b, e, rc) >= int(to) {
			f.PodsS = time.Since(start).Seconds()
		}
		if f.PodsS >= 0 {
			cur := &rayv1.RayCluster{}
			if err := e.cl.Get(e.ctx, key, cur); err != nil {
				b.Fatal(err)
			}
			if cur.Status.ReadyWorkerReplicas >= to {
				f.ReadyS = time.Since(start).Seconds()
				return f
			}
		}
		time.Sleep(scalePoll)
	}
	progressf(b, "scale %s to %d workers: not done in %s (pods after %.1fs)", key, to, scaleTimeout, f.PodsS)
	return f
}

// workerPods counts rc's worker pods that are not being deleted.
func workerPods(b *testing.B, e *trialEnv, rc *rayv1.RayCluster) int {
	var pods corev1.PodList
	if err := e.cl.List(e.ctx, &pods, client.InNamespace(rc.Namespace),
		client.MatchingLabels{rayv1.LabelCluster: rc.Name, rayv1.LabelNodeType: rayv1.NodeTypeWorker}); err != nil {
		b.Fatal(err)
	}
	n := 0
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// measureIdle reads the operator's and the control plane's CPU, the operator's requests and the API server's writes
// across a window of d in which the harness changes nothing; polled, it reads both metrics every quiescePoll in it.
func measureIdle(b *testing.B, e *trialEnv, op *opProcess, d time.Duration, polled bool) *idleFigures {
	b.Helper()
	pid := op.cmd.Process.Pid
	controlPlane := func() map[string]float64 {
		m := map[string]float64{}
		for name, p := range e.cluster.PIDs() {
			m[name] = procCPUSeconds(p)
		}
		return m
	}
	cpu0, snap0, served0, cp0, t0 := procCPUSeconds(pid), op.scrape(b), serverWrites(e.serverRequests(b)), controlPlane(), time.Now()
	if polled {
		for time.Since(t0) < d && e.ctx.Err() == nil {
			e.serverRequests(b)
			op.scrape(b)
			e.sleep(quiescePoll)
		}
	} else {
		e.sleep(d)
	}
	if e.ctx.Err() != nil {
		b.Fatalf("idle window: %v", e.ctx.Err())
	}
	cpu1, snap1, served1, cp1 := procCPUSeconds(pid), op.scrape(b), serverWrites(e.serverRequests(b)), controlPlane()
	secs := time.Since(t0).Seconds()
	perMin := func(v float64) float64 { return math.Round(v/secs*60*100) / 100 }
	percent := func(v float64) float64 { return math.Round(v/secs*100*100) / 100 }
	f := &idleFigures{Seconds: math.Round(secs), CPUPercent: percent(cpu1 - cpu0),
		RequestsPerMin: map[string]float64{}, ServerWritesPerMin: perMin(served1 - served0), ControlPlaneCPUPercent: map[string]float64{}}
	for name, v := range cp1 {
		f.ControlPlaneCPUPercent[name] = percent(v - cp0[name])
	}
	d1 := snap1.minus(snap0)
	for verb, v := range d1.requests {
		f.RequestsPerMin[verb] = perMin(v)
	}
	f.WritesPerMin = perMin(operatorWrites(d1.requests))
	return f
}

// afterReady runs the after-ready steps of an operator trial: the scale change, then (after the trial is quiescent
// again) the idle window when MANTA_BENCH_IDLE asks for one.
func afterReady(b *testing.B, e *trialEnv, op *opProcess, rc *rayv1.RayCluster, r *trialResult) {
	b.Helper()
	r.Scale = scaleOne(b, e, rc, scaleTo)
	if d := idleWindow(b); d > 0 {
		before := op.scrape(b)
		waitQuiescent(b, e, op, counted{readAt: time.Now(), serverWrites: serverWrites(e.serverRequests(b)),
			operatorWrites: operatorWrites(before.requests)})
		r.Idle = measureIdle(b, e, op, d, false)
		r.Idle.Polled = measureIdle(b, e, op, d, true)
	}
}

// afterReadyTable has a row per operator trial with the scale change and the idle window; "" when no trial has them.
func afterReadyTable(rs []trialResult) string {
	var sb strings.Builder
	for _, r := range rs {
		if r.Scale == nil {
			continue
		}
		if sb.Len() == 0 {
			fmt.Fprintf(&sb, "| clusters | contender | round | one cluster's workers 3 -> %d: pods exist / status ready | idle: operator CPU (%% of a core) | idle: operator requests per minute by verb | idle: all clients' writes per minute |\n", scaleTo)
			sb.WriteString("|---|---|---|---|---|---|---|\n")
		}
		idleCPU, idleReq, idleWrites := "-", "-", "-"
		if i := r.Idle; i != nil {
			idleCPU = fmt.Sprintf("%.2f %% (%.0f s)", i.CPUPercent, i.Seconds)
			idleReq = verbs(i.RequestsPerMin)
			idleWrites = fmt.Sprintf("%.1f", i.ServerWritesPerMin)
		}
		fmt.Fprintf(&sb, "| %d | %s | %d | %s / %s | %s | %s | %s |\n", r.Clusters, r.Contender, r.Round,
			secondsOrNot(r.Scale.PodsS), secondsOrNot(r.Scale.ReadyS), idleCPU, idleReq, idleWrites)
	}
	return sb.String()
}

func secondsOrNot(s float64) string {
	if s < 0 {
		return "not reached"
	}
	return fmt.Sprintf("%.2f s", s)
}
