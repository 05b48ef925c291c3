package raycluster

import (
	"context"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	crevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
)

// progressPriority is the work-queue priority of a reconcile caused by a change to one of a cluster's own pods or
// Services. It is above the default (0) of a RayCluster's own events, so a cluster whose pods just turned Ready is
// reported ready without waiting behind the first reconcile of every cluster created since: with 1,000 clusters
// queued, FIFO order would make every cluster's second reconcile wait for the whole queue.
const progressPriority = 10

// withProgressPriority wraps an owner handler so that what it enqueues jumps ahead of RayCluster events. Events from
// an informer's initial list keep their low priority (an operator restart should not starve new clusters).
func withProgressPriority(h handler.EventHandler, sw *optimize.Switches) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e crevent.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, e, prioritized(q, sw))
		},
		UpdateFunc: func(ctx context.Context, e crevent.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, e, prioritized(q, sw))
		},
		DeleteFunc: func(ctx context.Context, e crevent.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(ctx, e, prioritized(q, sw))
		},
		GenericFunc: func(ctx context.Context, e crevent.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Generic(ctx, e, prioritized(q, sw))
		},
	}
}

// prioritized returns q with adds at progressPriority, when q is a priority queue (controller-runtime's default).
func prioritized(q workqueue.TypedRateLimitingInterface[reconcile.Request], sw *optimize.Switches) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok {
		return q
	}
	sw.Acted(optimize.ProgressPriority)
	return progressQueue{pq}
}

type progressQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
}

func (q progressQueue) Add(item reconcile.Request) {
	q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(progressPriority)}, item)
}

// AddWithOpts raises the default priority; an explicit one (handler.LowPriority for the initial list and for
// updates that change nothing) is kept.
func (q progressQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	if o.Priority == nil {
		o.Priority = ptr.To(progressPriority)
	}
	q.PriorityQueue.AddWithOpts(o, items...)
}

// podBatch is how long a cluster's reconcile waits after a pod event that only reports progress (a pod created, or
// given an IP, initialised, turned Running or Ready): a cluster's pods go through those steps within a second or
// so of each other, and waiting gathers them into one reconcile (docs/benchmarks.md). An event that asks for action
// (a pod deleted, failed, exited, restarted or relabelled) is reconciled at once, and a reconcile already due is
// never put off.
const podBatch = time.Second

// ownerHandler enqueues the RayCluster that controls the object, at progressPriority (low for the initial list and
// for updates that change nothing, as controller-runtime's owner handler does). A pod turning Ready that completes
// its cluster (completes, nil for other kinds) is reconciled at once: the batch would hold the one change a user
// waits for, with nothing left to gather into it. It reads the controller reference itself: controller-runtime's
// owner handler looks up the owner's REST mapping on every event, which costs more per pod event than the reconcile
// it causes. With pods set, progress-only pod events wait podBatch. A Service that appears waits podBatch too: a
// cluster's Services are created by its first reconcile, just before its pods, so reconciled at once each would
// cost a reconcile of its own right before the one its pods' events batch into; what it brings to the status (the
// head Service's name and IP) is progress. The batching and the priority are switched by sw
// (optimize.PodEventBatching, optimize.ProgressPriority).
//
// cached, when set, says whether a cluster is in the cache: an event of an object whose cluster is not is dropped
// (gone-cluster-filter). Its reconcile would find nothing and forget what the cluster's own delete already made it
// forget, and a cluster that comes later is reconciled at its own create, its objects listed then. When a burst of
// jobs ends, their clusters' pods and Services are deleted after the clusters, four or five events each.
func ownerHandler(pods bool, sw *optimize.Switches, completes func(context.Context, *corev1.Pod) bool, cached func(context.Context, reconcile.Request) bool) handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], after time.Duration, objs ...client.Object) {
		var seen reconcile.Request
		for i, o := range objs {
			if r, ok := clusterOf(o); ok && (i == 0 || r != seen) {
				seen = r
				if cached != nil && sw.On(optimize.GoneClusterFilter) && !cached(ctx, r) {
					sw.Acted(optimize.GoneClusterFilter)
					continue
				}
				if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok && after > 0 {
					pq.AddWithOpts(priorityqueue.AddOpts{After: after}, r)
				} else {
					q.Add(r)
				}
			}
		}
	}
	batch := func(progress bool) time.Duration {
		if progress && sw.On(optimize.PodEventBatching) {
			sw.Acted(optimize.PodEventBatching)
			return podBatch
		}
		return 0
	}
	h := handler.WithLowPriorityWhenUnchanged(handler.Funcs{
		CreateFunc: func(ctx context.Context, e crevent.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if _, ok := e.Object.(*corev1.Service); ok {
				enqueue(ctx, q, batch(true), e.Object)
				return
			}
			p, ok := e.Object.(*corev1.Pod)
			enqueue(ctx, q, batch(pods && ok && podProgress(nil, p)), e.Object)
		},
		UpdateFunc: func(ctx context.Context, e crevent.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			a, ok1 := e.ObjectOld.(*corev1.Pod)
			b, ok2 := e.ObjectNew.(*corev1.Pod)
			progress := pods && ok1 && ok2 && podProgress(a, b)
			// Asked only where the batch would apply: completes reads the cache.
			if progress && completes != nil && sw.On(optimize.PodEventBatching) &&
				!clusterbuild.PodRunningAndReady(a) && clusterbuild.PodRunningAndReady(b) && completes(ctx, b) {
				progress = false
			}
			enqueue(ctx, q, batch(progress), e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e crevent.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, 0, e.Object)
		},
		GenericFunc: func(ctx context.Context, e crevent.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, 0, e.Object)
		},
	})
	if !sw.On(optimize.ProgressPriority) {
		return h
	}
	return withProgressPriority(h, sw)
}

// clusterOf is the RayCluster (ray.io, any version) that controls o, in o's namespace.
func clusterOf(o client.Object) (reconcile.Request, bool) {
	if o == nil {
		return reconcile.Request{}, false
	}
	ref := metav1.GetControllerOfNoCopy(o)
	if ref == nil || ref.Kind != clusterbuild.KindRayCluster {
		return reconcile.Request{}, false
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != rayv1.GroupVersion.Group {
		return reconcile.Request{}, false
	}
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}, true
}

// podProgress says whether a pod's change from old (nil for a new pod) to p only reports progress: it is not being
// deleted, has not failed or exited, no container of it exited or restarted, and its labels, annotations, owners
// and readiness did not go back. Anything else may call for action (a pod to replace, a head restarted).
func podProgress(old, p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated != nil || cs.RestartCount > 0 || cs.LastTerminationState.Terminated != nil {
			return false
		}
	}
	for _, cs := range p.Status.InitContainerStatuses {
		if (cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0) || cs.RestartCount > 0 {
			return false
		}
	}
	if old == nil {
		return true
	}
	return maps.Equal(old.Labels, p.Labels) && maps.Equal(old.Annotations, p.Annotations) &&
		slices.EqualFunc(old.OwnerReferences, p.OwnerReferences, ownerRefEqual) &&
		!(clusterbuild.PodRunningAndReady(old) && !clusterbuild.PodRunningAndReady(p))
}

// podUpdateMatters filters the pod updates the controller reconciles (optimize.PodUpdateFilter): it reads a pod's
// labels, annotations, owners, deletion, phase, reason, message, IP, conditions (the cache keeps Ready and
// PodScheduled: the operator's podConditionsRead) and container statuses. A pod's
// binding to a node (spec.nodeName and the PodScheduled condition) changes none of them, and was a reconcile of
// every new pod; the scheduler's refusal (PodScheduled False) does change status.reason (starttrouble.go).
func podUpdateMatters(sw *optimize.Switches) predicate.Predicate {
	if !sw.On(optimize.PodUpdateFilter) {
		return predicate.Funcs{}
	}
	return predicate.Funcs{
		UpdateFunc: func(e crevent.UpdateEvent) bool {
			a, ok1 := e.ObjectOld.(*corev1.Pod)
			b, ok2 := e.ObjectNew.(*corev1.Pod)
			if ok1 && ok2 && onlyScheduled(a, b) {
				sw.Acted(optimize.PodUpdateFilter)
				return false
			}
			return true
		},
	}
}

// onlyScheduled says whether two versions of a pod are the same in everything the controller reads (field by
// field: a reflective comparison of whole pods cost more than the reconciles it saved).
func onlyScheduled(a, b *corev1.Pod) bool {
	switch {
	case !maps.Equal(a.Labels, b.Labels), !maps.Equal(a.Annotations, b.Annotations),
		!a.DeletionTimestamp.Equal(b.DeletionTimestamp), !slices.EqualFunc(a.OwnerReferences, b.OwnerReferences, ownerRefEqual),
		a.Status.Phase != b.Status.Phase, a.Status.Reason != b.Status.Reason, a.Status.Message != b.Status.Message,
		a.Status.PodIP != b.Status.PodIP:
		return false
	}
	if !conditionsEqual(a.Status.Conditions, b.Status.Conditions) || unschedulable(a) != unschedulable(b) {
		return false
	}
	return equality.Semantic.DeepEqual(a.Status.ContainerStatuses, b.Status.ContainerStatuses) &&
		equality.Semantic.DeepEqual(a.Status.InitContainerStatuses, b.Status.InitContainerStatuses)
}

// unschedulable is the scheduler's message on a pod it could not place (PodScheduled False), which the status
// reports (starttrouble.go); empty otherwise.
func unschedulable(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

func ownerRefEqual(x, y metav1.OwnerReference) bool {
	return x.UID == y.UID && x.Kind == y.Kind && x.Name == y.Name && ptr.Deref(x.Controller, false) == ptr.Deref(y.Controller, false)
}

// conditionsEqual compares pod conditions but PodScheduled, ignoring probe and transition times.
func conditionsEqual(x, y []corev1.PodCondition) bool {
	type cond struct {
		status          corev1.ConditionStatus
		reason, message string
	}
	index := func(cs []corev1.PodCondition) map[corev1.PodConditionType]cond {
		m := make(map[corev1.PodConditionType]cond, len(cs))
		for _, c := range cs {
			if c.Type != corev1.PodScheduled {
				m[c.Type] = cond{c.Status, c.Reason, c.Message}
			}
		}
		return m
	}
	return maps.Equal(index(x), index(y))
}

// clusterCached says whether the cluster req is in the cache; a read that fails says yes (the event is kept).
func (r *Reconciler) clusterCached(ctx context.Context, req reconcile.Request) bool {
	_, found, err := r.clusters.Get(ctx, req.Namespace, req.Name)
	return found || err != nil
}

// completesCluster says whether p, a pod that just turned Ready, completes its cluster: every pod the cluster wants
// (its head and the desired workers) is in the cache, Running and Ready, and its status does not say so yet. Read
// from the informer cache (the pods through their index), which has p's update before its handlers run.
func (r *Reconciler) completesCluster(ctx context.Context, p *corev1.Pod) bool {
	req, ok := clusterOf(p)
	if !ok {
		return false
	}
	// Read in place, not copied: this runs at every change of every Ray pod.
	c, found, err := r.clusters.Get(ctx, req.Namespace, req.Name)
	if err != nil || !found || c.DeletionTimestamp != nil {
		return false
	}
	desired, _, _ := workerReplicaCounts(c)
	if c.Status.State == rayv1.Ready && c.Status.ReadyWorkerReplicas == desired {
		return false
	}
	pods, err := r.pods.List(ctx, c.Namespace, c.Name)
	if err != nil {
		return false
	}
	n := 0
	for _, q := range pods {
		if q.DeletionTimestamp != nil {
			continue
		}
		if !clusterbuild.PodRunningAndReady(q) {
			return false
		}
		n++
	}
	return n == int(desired)+1
}
