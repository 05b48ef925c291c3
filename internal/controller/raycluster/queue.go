package raycluster

import (
	"context"

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
	"github.com/manta-dev/manta/internal/builder"
)

// progressPriority is the work-queue priority of a reconcile caused by a change to one of a cluster's own pods or
// Services. It is above the default (0) of a RayCluster's own events, so a cluster whose pods just turned Ready is
// reported ready without waiting behind the first reconcile of every cluster created since: with 1,000 clusters
// queued, FIFO order would make every cluster's second reconcile wait for the whole queue.
const progressPriority = 10

// withProgressPriority wraps an owner handler so that what it enqueues jumps ahead of RayCluster events. Events from
// an informer's initial list keep their low priority (an operator restart should not starve new clusters).
func withProgressPriority(h handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e crevent.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, e, prioritized(q))
		},
		UpdateFunc: func(ctx context.Context, e crevent.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, e, prioritized(q))
		},
		DeleteFunc: func(ctx context.Context, e crevent.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(ctx, e, prioritized(q))
		},
		GenericFunc: func(ctx context.Context, e crevent.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Generic(ctx, e, prioritized(q))
		},
	}
}

// prioritized returns q with adds at progressPriority, when q is a priority queue (controller-runtime's default).
func prioritized(q workqueue.TypedRateLimitingInterface[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok {
		return q
	}
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

// ownerHandler enqueues the RayCluster that controls the object, at progressPriority (low for the initial list and
// for updates that change nothing, as controller-runtime's owner handler does). It reads the controller reference
// itself: controller-runtime's owner handler looks up the owner's REST mapping on every event, which allocated more
// per pod event than the reconcile it caused.
func ownerHandler() handler.EventHandler {
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		var seen reconcile.Request
		for i, o := range objs {
			if r, ok := clusterOf(o); ok && (i == 0 || r != seen) {
				q.Add(r)
				seen = r
			}
		}
	}
	return withProgressPriority(handler.WithLowPriorityWhenUnchanged(handler.Funcs{
		CreateFunc: func(_ context.Context, e crevent.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e crevent.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e crevent.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
		GenericFunc: func(_ context.Context, e crevent.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
	}))
}

// clusterOf is the RayCluster (ray.io, any version) that controls o, in o's namespace.
func clusterOf(o client.Object) (reconcile.Request, bool) {
	if o == nil {
		return reconcile.Request{}, false
	}
	ref := metav1.GetControllerOfNoCopy(o)
	if ref == nil || ref.Kind != builder.KindRayCluster {
		return reconcile.Request{}, false
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != rayv1.GroupVersion.Group {
		return reconcile.Request{}, false
	}
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}, true
}

// podUpdateMatters filters the pod updates the controller reconciles: a pod's binding to a node (spec.nodeName and
// the PodScheduled condition) changes nothing the controller reads, and was a reconcile of every new pod.
var podUpdateMatters = predicate.Funcs{
	UpdateFunc: func(e crevent.UpdateEvent) bool {
		a, ok1 := e.ObjectOld.(*corev1.Pod)
		b, ok2 := e.ObjectNew.(*corev1.Pod)
		return !ok1 || !ok2 || !onlyScheduled(a, b)
	},
}

// onlyScheduled says whether two versions of a pod differ at most in resourceVersion, managedFields, spec.nodeName
// and the PodScheduled condition.
func onlyScheduled(a, b *corev1.Pod) bool {
	x, y := *a, *b // shallow copies: only their top-level fields are changed below
	x.ResourceVersion, y.ResourceVersion = "", ""
	x.ManagedFields, y.ManagedFields = nil, nil
	x.Spec.NodeName, y.Spec.NodeName = "", ""
	x.Status.Conditions, y.Status.Conditions = withoutScheduled(a.Status.Conditions), withoutScheduled(b.Status.Conditions)
	return equality.Semantic.DeepEqual(&x, &y)
}

func withoutScheduled(cs []corev1.PodCondition) []corev1.PodCondition {
	out := make([]corev1.PodCondition, 0, len(cs))
	for _, c := range cs {
		if c.Type != corev1.PodScheduled {
			out = append(out, c)
		}
	}
	return out
}
