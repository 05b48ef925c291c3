// Package ownerqueue enqueues the namespaced object that controls the object of a watch event, as
// controller-runtime's EnqueueRequestForOwner with OnlyControllerOwner (what the builder's Owns uses) does, but
// without asking the REST mapper whether the owner is namespaced on every event: that lookup allocated about 3 KB
// per owned object's event (a RayJob's RayCluster is updated several times on its way to ready), 5% of the
// operator's allocations in a burst of RayJobs. The owners here are all namespaced kinds.
package ownerqueue

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// Controller enqueues, for each event, the object of kind owner (a namespaced kind, any version of its group) that
// controls the event's object (for an update, the old object's and the new one's, once if they are the same), in
// the object's namespace. Like controller-runtime's owner handler, it lowers the priority of events that changed
// nothing (the initial list, a resync).
func Controller(owner schema.GroupKind) handler.EventHandler {
	return TypedController[client.Object](owner)
}

// TypedController is Controller for a watch of one type.
func TypedController[T client.Object](owner schema.GroupKind) handler.TypedEventHandler[T, reconcile.Request] {
	of := func(o T) (reconcile.Request, bool) { return controllerOf(o, owner) }
	return handler.WithLowPriorityWhenUnchanged(handler.TypedFuncs[T, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[T], q queue) {
			if r, ok := of(e.Object); ok {
				q.Add(r)
			}
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[T], q queue) {
			old, okOld := of(e.ObjectOld)
			cur, okNew := of(e.ObjectNew)
			if okOld {
				q.Add(old)
			}
			if okNew && (!okOld || cur != old) {
				q.Add(cur)
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[T], q queue) {
			if r, ok := of(e.Object); ok {
				q.Add(r)
			}
		},
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[T], q queue) {
			if r, ok := of(e.Object); ok {
				q.Add(r)
			}
		},
	})
}

// controllerOf is the request for o's controller if it is of kind owner (group and kind; the version is not
// compared), in o's namespace.
func controllerOf(o metav1.Object, owner schema.GroupKind) (reconcile.Request, bool) {
	if o == nil {
		return reconcile.Request{}, false
	}
	ref := metav1.GetControllerOfNoCopy(o)
	if ref == nil || ref.Kind != owner.Kind || groupOf(ref.APIVersion) != owner.Group {
		return reconcile.Request{}, false
	}
	return reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}}, true
}

// groupOf is the group of an apiVersion ("ray.io/v1" -> "ray.io", "v1" -> "").
func groupOf(apiVersion string) string {
	if i := strings.LastIndexByte(apiVersion, '/'); i >= 0 {
		return apiVersion[:i]
	}
	return ""
}
