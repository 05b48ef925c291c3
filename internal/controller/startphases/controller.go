package startphases

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/cacheread"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/metrics"
)

// Kinds, the kind label of the histogram.
const (
	KindPod        = "Pod"
	KindRayCluster = "RayCluster"
	KindRayJob     = "RayJob"
)

// DefaultLateThreshold is --start-phase-late-threshold's default: a step of a start that takes longer is reported
// in a Warning event. Two minutes is well past a warm start's every step on a real cluster (seconds) and below the
// multi-minute image pulls users ask about.
const DefaultLateThreshold = 2 * time.Minute

// PulledIndex is the field index of the cached Pulled events by the UID of the pod they are about.
const PulledIndex = "involvedObject.uid"

// PulledIndexValue is the index function: the UID of the pod a Pulled event is about.
func PulledIndexValue(o client.Object) []string {
	ev, ok := o.(*corev1.Event)
	if !ok || ev.Reason != "Pulled" || ev.InvolvedObject.Kind != "Pod" {
		return nil
	}
	return []string{string(ev.InvolvedObject.UID)}
}

// PulledEvents is how the operator's cache holds core/v1 Events: only the kubelet's Pulled events (a field
// selector, so the API server sends no others), stripped of what the phases do not read.
func PulledEvents() cache.ByObject {
	return cache.ByObject{
		Field: fields.OneTermEqualSelector("reason", "Pulled"),
		Transform: func(o any) (any, error) {
			if ev, ok := o.(*corev1.Event); ok {
				ev.ManagedFields = nil
				ev.Source, ev.ReportingController, ev.ReportingInstance, ev.Action = corev1.EventSource{}, "", "", ""
				ev.Related = nil
			}
			return o, nil
		},
	}
}

// Options configure the controllers.
type Options struct {
	// LateThreshold: a step of a start that takes longer gets a Warning event; 0 records no such event.
	LateThreshold time.Duration
	// Observe records one sample (metrics.ObserveStartPhase when nil).
	Observe func(kind, phase, nodeType string, d time.Duration)
	// Clock is the controller's time, of the RUNNING sighting and of the epoch (reconcile.RealClock when nil).
	Clock reconcile.Clock
	// Optimizations switches gone-cluster-filter (nil: on).
	Optimizations *optimize.Switches
}

// Reconciler records the start phases of RayClusters (with their pods) and RayJobs. It writes only events.
//
// Each phase of each object is recorded once: the reconciler remembers, by object, the phases it has recorded
// (forgotten when the object is deleted; a pod's when it leaves its cluster's pod list). On operator restart, or
// when another replica takes the lead, that memory is empty: the new process records only phases reached at or
// after its epoch (its first reconcile, to the second: the API server keeps whole seconds), so a phase the
// previous process may have recorded is not counted again, and its late and summary events are not repeated; a
// phase reached while no operator ran is not recorded at all (an undercount, never a double count).
type Reconciler struct {
	client   client.Client
	recorder events.EventRecorder
	opts     Options
	// pods and pulled read a cluster's pods and a pod's Pulled events in place: a cluster's reconcile, at each
	// change of any of its pods, reads both.
	pods   *cacheread.Index[*corev1.Pod]
	pulled *cacheread.Index[*corev1.Event]
	// cached reads the cache's RayClusters in place: a pod event of a cluster not there is dropped.
	cached *cacheread.Store[*rayv1.RayCluster]

	mu       sync.Mutex
	epoch    time.Time
	clusters map[types.NamespacedName]*clusterState
	jobs     map[types.NamespacedName]*jobState
}

// clusterState is what has been recorded of one RayCluster: a bit per phase, of the cluster and of each pod.
type clusterState struct {
	uid        types.UID
	done       uint16
	summarized bool
	pods       map[types.UID]uint16
	// times are the cluster's phases as first seen: the summary reads them, since later reconciles no longer look
	// up the Pulled events of pods whose pull is recorded.
	times Times
	last  [numPhases]string
}

// jobState is what has been recorded of one RayJob, and what the phases need that no object keeps: whether it was
// seen before RUNNING, when it was first seen RUNNING, and its cluster's phases (the cluster may be deleted when
// the job ends).
type jobState struct {
	uid            types.UID
	done           uint16
	summarized     bool
	sawPending     bool
	runningSeen    time.Time
	cluster        Times
	clusterKnown   bool
	clusterPodLast [numPhases]string
}

// NewReconciler builds the reconciler on the manager's cache and event recorder.
func NewReconciler(mgr ctrl.Manager, opts Options) *Reconciler {
	if opts.Observe == nil {
		opts.Observe = metrics.ObserveStartPhase
	}
	if opts.Clock == nil {
		opts.Clock = reconcile.RealClock
	}
	return newReconciler(mgr.GetClient(), mgr.GetCache(), mgr.GetEventRecorder("startphases-controller"), opts)
}

// newReconciler builds the reconciler on a cached client and, when not nil, the cache's informers (read in place).
func newReconciler(cl client.Client, informers cache.Informers, recorder events.EventRecorder, opts Options) *Reconciler {
	return &Reconciler{client: cl, recorder: recorder, opts: opts,
		pods:     cacheread.NewIndex(informers, cl, &corev1.Pod{}, func() client.ObjectList { return &corev1.PodList{} }, clusterpods.Index),
		pulled:   cacheread.NewIndex(informers, cl, &corev1.Event{}, func() client.ObjectList { return &corev1.EventList{} }, PulledIndex),
		cached:   cacheread.NewStore(informers, cl, func() *rayv1.RayCluster { return &rayv1.RayCluster{} }),
		clusters: map[types.NamespacedName]*clusterState{}, jobs: map[types.NamespacedName]*jobState{}}
}

// +kubebuilder:rbac:groups=ray.io,resources=rayclusters;rayjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers two controllers: one for RayClusters (woken by their pods and their pods' Pulled
// events), one for RayJobs (woken by their RayClusters too).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	if err := clusterpods.Register(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Event{}, PulledIndex, PulledIndexValue); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("startphases-raycluster").
		For(&rayv1.RayCluster{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.podCluster)).
		Watches(&corev1.Event{}, handler.EnqueueRequestsFromMapFunc(r.eventCluster)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(crreconcile.Func(r.reconcileCluster)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("startphases-rayjob").
		For(&rayv1.RayJob{}).
		Watches(&rayv1.RayCluster{}, handler.EnqueueRequestsFromMapFunc(clusterJob)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(crreconcile.Func(r.reconcileJob))
}

// podCluster maps a Ray pod to its RayCluster.
func podCluster(_ context.Context, o client.Object) []ctrl.Request {
	name := o.GetLabels()[rayv1.LabelCluster]
	if name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// podCluster maps a Ray pod to its RayCluster while that is in the cache (gone-cluster-filter): a reconcile of a
// cluster not there would only forget what its own delete made the controller forget, and one that comes later is
// reconciled at its create.
func (r *Reconciler) podCluster(ctx context.Context, o client.Object) []ctrl.Request {
	reqs := podCluster(ctx, o)
	if len(reqs) == 0 || !r.opts.Optimizations.On(optimize.GoneClusterFilter) {
		return reqs
	}
	if _, found, err := r.cached.Get(ctx, reqs[0].Namespace, reqs[0].Name); !found && err == nil {
		r.opts.Optimizations.Acted(optimize.GoneClusterFilter)
		return nil
	}
	return reqs
}

// eventCluster maps a Pulled event to the RayCluster of the pod it is about (through the cached pod), so a pull
// reported after the pod's last change is still recorded.
func (r *Reconciler) eventCluster(ctx context.Context, o client.Object) []ctrl.Request {
	ev, ok := o.(*corev1.Event)
	if !ok || ev.InvolvedObject.Kind != "Pod" {
		return nil
	}
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: ev.InvolvedObject.Namespace, Name: ev.InvolvedObject.Name}, pod, readOnly...); err != nil {
		return nil // not a Ray pod (the cache holds only those), or gone
	}
	return podCluster(ctx, pod)
}

// clusterJob maps a RayCluster a RayJob made to that RayJob.
func clusterJob(_ context.Context, o client.Object) []ctrl.Request {
	l := o.GetLabels()
	if l[rayv1.LabelOriginCRD] != KindRayJob || l[rayv1.LabelOriginCRName] == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: l[rayv1.LabelOriginCRName]}}}
}

// start sets the epoch at the process's first reconcile (of either kind, whatever it finds).
func (r *Reconciler) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.since()
}

// since returns the epoch, set at the first call: phases before it are not this process's to record. Call it with
// r.mu held.
func (r *Reconciler) since() time.Time {
	if r.epoch.IsZero() {
		r.epoch = r.opts.Clock.Now().Truncate(time.Second)
	}
	return r.epoch
}

// readOnly reads an object the reconcile only reads in place: the cache's own, not a copy. It is passed as a
// ready-made slice: a variadic argument built at each call escapes to the heap.
var readOnly = []client.GetOption{&client.GetOptions{UnsafeDisableDeepCopy: ptr.To(true)}}

// bit is phase p's bit in a done mask.
func bit(p Phase) uint16 { return 1 << p }

// clusterPhases are the phases a RayJob takes from its RayCluster.
const clusterPhases = 1<<Scheduled | 1<<ImagePulled | 1<<ContainersStarted | 1<<RayReady

// record marks phase p of an object recorded in *done and reports whether it is new and this process's (at or
// after the epoch): only then is it observed and may it be reported late.
func (r *Reconciler) record(done *uint16, t *Times, p Phase) bool {
	if !t.Has(p) || *done&bit(p) != 0 {
		return false
	}
	*done |= bit(p)
	return !t.At[p].Before(r.since())
}

// reconcileCluster records the new phases of a RayCluster and its pods.
func (r *Reconciler) reconcileCluster(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.start()
	s := getScratch()
	defer s.release()
	c := &s.cluster
	if err := r.client.Get(ctx, req.NamespacedName, c, readOnly...); err != nil {
		if apierrors.IsNotFound(err) {
			r.mu.Lock()
			delete(r.clusters, req.NamespacedName)
			r.mu.Unlock()
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// A pod's Pulled events are looked up only while its or the cluster's pull phase is to be recorded. The pods'
	// map is read outside the lock without a copy: it is replaced, never changed, once stored.
	r.mu.Lock()
	var podDone map[types.UID]uint16
	clusterPulled := false
	if st := r.clusters[req.NamespacedName]; st != nil && st.uid == c.UID {
		podDone, clusterPulled = st.pods, st.done&bit(ImagePulled) != 0
	}
	r.mu.Unlock()
	if err := r.observePods(ctx, s, c, podDone, clusterPulled); err != nil {
		return ctrl.Result{}, err
	}
	ct, last := ClusterTimes(c, s.pods)

	var res reconcile.Result
	r.mu.Lock()
	st := r.clusters[req.NamespacedName]
	if st == nil || st.uid != c.UID {
		st = &clusterState{uid: c.UID}
		r.clusters[req.NamespacedName] = st
	}
	// Pods gone from the cluster are forgotten; the map is replaced only when a pod came, went or reached a phase,
	// not at each reconcile.
	changed := len(st.pods) != len(s.pods)
	for i := range s.pods {
		p, m := &s.pods[i], &s.meta[i]
		done, known := st.pods[m.uid]
		before := done
		for _, ph := range clusterOwnPhases {
			if r.record(&done, &p.Times, ph) {
				r.opts.Observe(KindPod, ph.String(), m.nodeType, p.Times.Since(ph))
			}
		}
		m.done = done
		changed = changed || !known || done != before
	}
	if changed {
		live := make(map[types.UID]uint16, len(s.pods))
		for i := range s.meta {
			live[s.meta[i].uid] = s.meta[i].done
		}
		st.pods = live
	}
	st.times.Created = ct.Created
	for _, ph := range clusterOwnPhases {
		if ct.Has(ph) && !st.times.Has(ph) {
			st.times.At[ph], st.last[ph] = ct.At[ph], last[ph]
		}
	}
	ct = st.times
	for _, ph := range clusterOwnPhases {
		if !r.record(&st.done, &ct, ph) {
			continue
		}
		r.opts.Observe(KindRayCluster, ph.String(), "", ct.Since(ph))
		if Late(&ct, ph, r.opts.LateThreshold) {
			res.Eventf(corev1.EventTypeWarning, LateReason(ph), "StartPhase", "%s", lateNote(KindRayCluster, &ct, ph, r.opts.LateThreshold, st.last[ph]))
		}
	}
	if ct.Has(RayReady) && !st.summarized {
		st.summarized = true
		if !ct.At[RayReady].Before(r.since()) {
			res.Eventf(corev1.EventTypeNormal, ReasonSummary, "StartPhase", "RayCluster %s", Summary("started", &ct, RayReady))
		}
	}
	r.mu.Unlock()
	return res.Finish(r.recorder, c, nil, nil)
}

// reconcileJob records the new phases of a RayJob.
func (r *Reconciler) reconcileJob(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.start()
	s := getScratch()
	defer s.release()
	j := &s.job
	if err := r.client.Get(ctx, req.NamespacedName, j, readOnly...); err != nil {
		if apierrors.IsNotFound(err) {
			r.mu.Lock()
			delete(r.jobs, req.NamespacedName)
			r.mu.Unlock()
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var (
		ct    Times
		last  [numPhases]string
		found bool
	)
	r.mu.Lock()
	clusterDone := false // the job's phases that are its cluster's are all recorded
	if st := r.jobs[req.NamespacedName]; st != nil && st.uid == j.UID {
		clusterDone = st.done&clusterPhases == clusterPhases
	}
	r.mu.Unlock()
	if name := j.Status.RayClusterName; name != "" && !clusterDone {
		c := &s.cluster
		err := r.client.Get(ctx, types.NamespacedName{Namespace: j.Namespace, Name: name}, c, readOnly...)
		switch {
		case err == nil:
			if err := r.observePods(ctx, s, c, nil, false); err != nil {
				return ctrl.Result{}, err
			}
			ct, last = ClusterTimes(c, s.pods)
			found = true
		case !apierrors.IsNotFound(err):
			return ctrl.Result{}, err
		}
	}

	var res reconcile.Result
	r.mu.Lock()
	st := r.jobs[req.NamespacedName]
	if st == nil || st.uid != j.UID {
		st = &jobState{uid: j.UID}
		r.jobs[req.NamespacedName] = st
	}
	if found {
		// The cluster's phases only grow; a cluster deleted when the job ended leaves the last ones seen.
		for p := range ct.At {
			if ct.Has(Phase(p)) {
				st.cluster.At[p], st.clusterPodLast[p] = ct.At[p], last[p]
			}
		}
		st.clusterKnown = true
	}
	switch s := j.Status.JobStatus; {
	case s == rayv1.JobStatusRunning && st.sawPending && st.runningSeen.IsZero():
		st.runningSeen = r.opts.Clock.Now()
	case s == "" || s == rayv1.JobStatusNew || s == rayv1.JobStatusPending:
		st.sawPending = true
	}
	var cluster *Times
	if st.clusterKnown {
		cluster = &st.cluster
	}
	jt := JobTimes(j, cluster, st.runningSeen)
	for _, ph := range Phases {
		if !r.record(&st.done, &jt, ph) {
			continue
		}
		r.opts.Observe(KindRayJob, ph.String(), "", jt.Since(ph))
		// A job's run takes what it takes: only the steps up to RUNNING are judged late.
		if ph != Finished && Late(&jt, ph, r.opts.LateThreshold) {
			res.Eventf(corev1.EventTypeWarning, LateReason(ph), "StartPhase", "%s", lateNote(KindRayJob, &jt, ph, r.opts.LateThreshold, st.clusterPodLast[ph]))
		}
	}
	if jt.Has(Finished) && !st.summarized {
		st.summarized = true
		if !jt.At[Finished].Before(r.since()) {
			res.Eventf(corev1.EventTypeNormal, ReasonSummary, "StartPhase", "RayJob %s", Summary("finished", &jt, Finished))
		}
	}
	r.mu.Unlock()
	return res.Finish(r.recorder, j, nil, nil)
}

// clusterOwnPhases are the phases a RayCluster and its pods reach.
var clusterOwnPhases = [...]Phase{Scheduled, ImagePulled, ContainersStarted, RayReady}

// podMeta is what the recorder keeps of one of a cluster's pods beside its PodOf (same index in scratch.pods).
type podMeta struct {
	uid      types.UID
	nodeType string
	done     uint16
}

// scratch is one reconcile's working memory, reused through scratchPool: a cluster is reconciled at each change
// of any of its pods, and allocating the objects read and the pods' phases afresh each time made the recorder one
// of the operator's largest allocators (GC is most of its CPU).
type scratch struct {
	cluster rayv1.RayCluster
	job     rayv1.RayJob
	pods    []PodOf
	meta    []podMeta
	pulls   []Pull
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

// release zeroes what was read (a client decodes into a non-empty object by merging, and the pool must not keep
// the cache's objects alive) and returns the scratch to the pool.
func (s *scratch) release() {
	s.cluster, s.job = rayv1.RayCluster{}, rayv1.RayJob{}
	clear(s.pods)
	clear(s.meta)
	s.pods, s.meta, s.pulls = s.pods[:0], s.meta[:0], s.pulls[:0]
	scratchPool.Put(s)
}

// observePods reads a cluster's Ray pods (not being deleted) into s.pods and s.meta, with their Pulled events from
// the cache unless clusterPulled and podDone has the pod's pull recorded, and computes their phases. The cache's
// objects are read in place (no copies: a cluster's pods are listed at each of its reconciles).
func (r *Reconciler) observePods(ctx context.Context, s *scratch, c *rayv1.RayCluster, podDone map[types.UID]uint16, clusterPulled bool) error {
	pods, err := r.pods.List(ctx, c.Namespace, c.Name)
	if err != nil {
		return err
	}
	s.pods, s.meta = s.pods[:0], s.meta[:0]
	for _, p := range pods {
		nt := nodeType(p)
		if nt == "" || p.DeletionTimestamp != nil {
			continue
		}
		var pulls []Pull
		if !clusterPulled || podDone[p.UID]&bit(ImagePulled) == 0 {
			if s.pulls, err = r.pulls(ctx, p, s.pulls[:0]); err != nil {
				return err
			}
			pulls = s.pulls
		}
		s.pods = append(s.pods, PodOf{Name: p.Name, Times: PodTimes(p, pulls)})
		s.meta = append(s.meta, podMeta{uid: p.UID, nodeType: nt})
	}
	return nil
}

// pulls appends a pod's Pulled events from the cache to out.
func (r *Reconciler) pulls(ctx context.Context, p *corev1.Pod, out []Pull) ([]Pull, error) {
	evs, err := r.pulled.List(ctx, p.Namespace, string(p.UID))
	if err != nil {
		return out, err
	}
	for _, ev := range evs {
		out = append(out, PullFromEvent(ev))
	}
	return out, nil
}

// nodeType is a Ray pod's node type label value, bounded to head and worker (empty for any other pod).
func nodeType(p *corev1.Pod) string {
	switch t := p.Labels[rayv1.LabelNodeType]; t {
	case "head", "worker":
		return t
	}
	return ""
}
