package bench

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

// A trial is quiescent once no client has written to the API server for quietFor (node heartbeats and leases
// aside, which never stop) and, for Manta, no event and no RayCluster status change waits in its memory
// (manta_events_queued and manta_raycluster_statuses_held 0). Manta writes
// most of its events after the last cluster is ready, KubeRay its own before: counting up to all-ready only would
// leave out work one operator defers and the other does not.
const (
	quietFor       = 5 * time.Second
	quiescePoll    = time.Second
	quiesceTimeout = 10 * time.Minute
)

// heartbeatResources are written for as long as the dev cluster runs, whatever the contender does.
var heartbeatResources = map[string]bool{"leases": true, "nodes": true, "nodes/status": true,
	"tokenreviews": true, "subjectaccessreviews": true}

// serverWrites sums the writes in an apiserver_request_total reading (parseServerRequests), heartbeats left out.
func serverWrites(m map[string]float64) float64 {
	total := 0.0
	for k, v := range m {
		f := strings.Fields(k)
		if len(f) != 2 || heartbeatResources[f[1]] { // "VERB resource CODE" counts a refusal again
			continue
		}
		switch f[0] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION":
			total += v
		}
	}
	return total
}

// writesByResource is the writes (as serverWrites counts them) from before to after, per item, keyed "VERB
// resource"; keys that did not change are left out.
func writesByResource(after, before map[string]float64, per int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 && serverWrites(map[string]float64{k: d}) != 0 {
			out[k] = math.Round(d/float64(per)*100) / 100
		}
	}
	return out
}

// operatorWrites sums an operator's writes from its rest_client_requests_total by method.
func operatorWrites(requests map[string]float64) float64 {
	return requests["POST"] + requests["PUT"] + requests["PATCH"] + requests["DELETE"]
}

// waitQuiescent polls the API server's request counters (and the operator's, op nil for none) every quiescePoll
// until nothing was written for quietFor and no event or status change is held back. at is the reading at all-ready: a write after it
// is first seen by a poll. It returns when the last write was seen (the all-ready time when none came after) and
// whether quiescence came within quiesceTimeout.
func waitQuiescent(b *testing.B, e *trialEnv, op *opProcess, at counted) (lastWrite time.Time, reached bool) {
	b.Helper()
	server, opw, queued, held := at.serverWrites, at.operatorWrites, 0.0, 0.0
	lastWrite = at.readAt
	deadline := time.Now().Add(quiesceTimeout)
	for {
		s := serverWrites(e.serverRequests(b))
		o := 0.0
		queued, held = 0, 0
		if op != nil {
			snap := op.scrape(b)
			o, queued, held = operatorWrites(snap.requests), snap.eventsQueued, snap.statusesHeld
		}
		now := time.Now()
		if s != server || o != opw {
			lastWrite, server, opw = now, s, o
		}
		if now.Sub(lastWrite) >= quietFor && queued == 0 && held == 0 {
			return lastWrite, true
		}
		if now.After(deadline) {
			progressf(b, "not quiescent after %s: %.0f events queued, %.0f statuses held, last write %s ago", quiesceTimeout, queued, held, now.Sub(lastWrite).Round(time.Second))
			return lastWrite, false
		}
		time.Sleep(quiescePoll)
	}
}

// histogram is a Prometheus histogram's cumulative bucket counts by upper bound (+Inf included).
type histogram map[float64]float64

func (h histogram) minus(before histogram) histogram {
	out := histogram{}
	for le, v := range h {
		out[le] = v - before[le]
	}
	return out
}

// quantile estimates the q-quantile the way PromQL's histogram_quantile does: linearly within the bucket that
// holds it; the highest finite bound when it falls in +Inf. NaN for an empty histogram.
func (h histogram) quantile(q float64) float64 {
	les := make([]float64, 0, len(h))
	for le := range h {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 || h[les[len(les)-1]] <= 0 {
		return math.NaN()
	}
	rank := q * h[les[len(les)-1]]
	lower, below := 0.0, 0.0
	for _, le := range les {
		if c := h[le]; c >= rank && c > below {
			if math.IsInf(le, 1) {
				return lower
			}
			return lower + (le-lower)*(rank-below)/(c-below)
		}
		lower, below = le, h[le]
	}
	return lower
}

// stalenessP50P99 is the p50 and p99 of a staleness histogram's observations, nil when there are none.
func stalenessP50P99(h histogram) *[2]float64 {
	p50, p99 := h.quantile(0.5), h.quantile(0.99)
	if math.IsNaN(p50) {
		return nil
	}
	return &[2]float64{math.Round(p50*100) / 100, math.Round(p99*100) / 100}
}

// createRawRayCluster is raw-rayclusters' create of one cluster: the RayCluster, by the harness's client one at a
// time as for the operators; its head Service and pods are made at once right after by the stand-in (rawRayClusters).
func createRawRayCluster(b *testing.B, e *trialEnv, raw *rawRayClusters, rc *rayv1.RayCluster) {
	b.Helper()
	if err := e.cl.Create(e.ctx, rc); err != nil {
		b.Fatalf("create RayCluster %s/%s: %v", rc.Namespace, rc.Name, err)
	}
	raw.created(rc)
}

// rayPods are the pods an operator makes for rc (1 head, the first group's workers), labelled with the run.
func rayPods(rc *rayv1.RayCluster) []*corev1.Pod {
	pods := []*corev1.Pod{clusterbuild.HeadPod(rc, clusterbuild.PodOptions{})}
	g := &rc.Spec.WorkerGroupSpecs[0]
	for range *g.Replicas {
		pods = append(pods, clusterbuild.WorkerPod(rc, g, clusterbuild.PodOptions{}))
	}
	for _, p := range pods {
		p.Labels[benchLabel] = rc.Labels[benchLabel]
	}
	return pods
}

// rawRayClusters stands in for an operator with nothing but the work any operator must have the control plane do:
// for each RayCluster created, its head Service and pods at once, owned by it as Manta owns them (internal/clusterbuild's
// objects, its controller reference), several clusters in flight as an operator's reconciles are; and, watching
// the run's pods, once all of a cluster's pods are Ready one status write saying ready.
type rawRayClusters struct {
	mu       sync.Mutex
	clusters map[string]*rayv1.RayCluster // by namespace/name, as created
	ready    map[string]map[string]bool   // cluster -> pod -> Ready
	head     map[string]*corev1.Pod
	reported map[string]bool
	creates  chan *rayv1.RayCluster
	writes   chan string
	errs     chan error
}

// rawInFlight is how many clusters' objects rawRayClusters writes at once (the operators' reconcile concurrency).
const rawInFlight = 8

func startRawRayClusters(ctx context.Context, e *trialEnv, run string, podsPerCluster int) *rawRayClusters {
	r := &rawRayClusters{clusters: map[string]*rayv1.RayCluster{}, ready: map[string]map[string]bool{}, head: map[string]*corev1.Pod{},
		reported: map[string]bool{}, creates: make(chan *rayv1.RayCluster, 1<<16), writes: make(chan string, 1<<16), errs: make(chan error, 1)}
	fail := func(err error) {
		if err != nil && ctx.Err() == nil {
			select {
			case r.errs <- err:
			default:
			}
		}
	}
	for range rawInFlight {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case rc := <-r.creates:
					fail(createOwned(ctx, e, rc))
				case key, ok := <-r.writes:
					if !ok {
						return
					}
					fail(r.writeReady(ctx, e, key))
				}
			}
		}()
	}
	observe := func(p *corev1.Pod) {
		key := p.Namespace + "/" + p.Labels[rayv1.LabelCluster]
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.ready[key] == nil {
			r.ready[key] = map[string]bool{}
		}
		r.ready[key][p.Name] = testutil.PodReady(p)
		if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead {
			r.head[key] = p.DeepCopy()
		}
		n := 0
		for _, ok := range r.ready[key] {
			if ok {
				n++
			}
		}
		if n == podsPerCluster && !r.reported[key] && r.clusters[key] != nil {
			r.reported[key] = true
			r.writes <- key
		}
	}
	go func() {
		defer close(r.writes)
		for ctx.Err() == nil {
			var list corev1.PodList
			if err := e.wcl.List(ctx, &list, client.MatchingLabels{benchLabel: run}); err != nil {
				time.Sleep(time.Second)
				continue
			}
			for i := range list.Items {
				observe(&list.Items[i])
			}
			w, err := e.wcl.Watch(ctx, &corev1.PodList{}, client.MatchingLabels{benchLabel: run},
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
			if err != nil {
				continue
			}
			for ev := range w.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
					observe(p)
				}
			}
			w.Stop()
		}
	}()
	return r
}

// createOwned creates rc's head Service and pods, all at once.
func createOwned(ctx context.Context, e *trialEnv, rc *rayv1.RayCluster) error {
	objs := []client.Object{clusterbuild.HeadService(rc)}
	for _, p := range rayPods(rc) {
		objs = append(objs, p)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, o := range objs {
		g.Go(func() error {
			if err := e.cl.Create(gctx, o); err != nil {
				return fmt.Errorf("create %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
			}
			return nil
		})
	}
	return g.Wait()
}

// created registers a cluster the harness made and has its objects made.
func (r *rawRayClusters) created(rc *rayv1.RayCluster) {
	key := rc.Namespace + "/" + rc.Name
	r.creates <- rc
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clusters[key] = rc
	n := 0
	for _, ok := range r.ready[key] {
		if ok {
			n++
		}
	}
	if n == 1+int(*rc.Spec.WorkerGroupSpecs[0].Replicas) && !r.reported[key] {
		r.reported[key] = true
		r.writes <- key
	}
}

// writeReady writes the status an operator reports for a ready cluster of 1 head and one worker group.
func (r *rawRayClusters) writeReady(ctx context.Context, e *trialEnv, key string) error {
	r.mu.Lock()
	rc, head := r.clusters[key].DeepCopy(), r.head[key]
	r.mu.Unlock()
	now := metav1.Now()
	workers := *rc.Spec.WorkerGroupSpecs[0].Replicas
	cpu, mem := resource.Quantity{}, resource.Quantity{}
	for _, p := range rayPods(rc) {
		cpu.Add(*p.Spec.Containers[0].Resources.Requests.Cpu())
		mem.Add(*p.Spec.Containers[0].Resources.Requests.Memory())
	}
	s := &rc.Status
	s.State, s.StateTransitionTimes = rayv1.Ready, map[rayv1.ClusterState]*metav1.Time{rayv1.Ready: &now}
	s.DesiredWorkerReplicas, s.ReadyWorkerReplicas, s.AvailableWorkerReplicas = workers, workers, workers
	s.MinWorkerReplicas, s.MaxWorkerReplicas = ptr.Deref(rc.Spec.WorkerGroupSpecs[0].MinReplicas, 0), ptr.Deref(rc.Spec.WorkerGroupSpecs[0].MaxReplicas, 0)
	s.DesiredCPU, s.DesiredMemory = cpu, mem
	s.Head = rayv1.HeadInfo{ServiceName: clusterbuild.HeadServiceName(rc)}
	if head != nil {
		s.Head.PodName, s.Head.PodIP, s.Head.ServiceIP = head.Name, head.Status.PodIP, head.Status.PodIP
	}
	s.Endpoints = map[string]string{}
	for _, p := range clusterbuild.HeadService(rc).Spec.Ports {
		s.Endpoints[p.Name] = strconv.Itoa(int(p.Port))
	}
	s.ObservedGeneration, s.LastUpdateTime = rc.Generation, &now
	for _, c := range []metav1.Condition{
		{Type: string(rayv1.HeadPodReady), Status: metav1.ConditionTrue, Reason: "HeadPodRunningAndReady"},
		{Type: string(rayv1.RayClusterProvisioned), Status: metav1.ConditionTrue, Reason: "AllPodRunningAndReadyFirstTime"},
		{Type: string(rayv1.RayClusterSuspended), Status: metav1.ConditionFalse, Reason: "RayClusterSuspended"},
		{Type: string(rayv1.RayClusterSuspending), Status: metav1.ConditionFalse, Reason: "RayClusterSuspending"},
	} {
		meta.SetStatusCondition(&s.Conditions, c)
	}
	// Nothing else writes the cluster, so the version it was created at is current.
	return e.cl.Status().Update(ctx, rc)
}
