package ownerqueue

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// recordingQueue records what a handler adds.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	added []string
}

func (q *recordingQueue) Add(r reconcile.Request) { q.added = append(q.added, r.String()) }

// TestControllerMatchesControllerRuntime: on every kind of event, over objects controlled by the owner kind (any
// version), by another kind or group, owned but not controlled, or not owned, and updates that change the
// controller, Controller enqueues what controller-runtime's EnqueueRequestForOwner with OnlyControllerOwner does
// (with a REST mapper that knows the owner as namespaced), each request once.
func TestControllerMatchesControllerRuntime(t *testing.T) {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	owner := schema.GroupKind{Group: rayv1.GroupVersion.Group, Kind: "RayJob"}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(rayv1.GroupVersion.WithKind("RayJob"), meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "ray.io", Version: "v1alpha1", Kind: "RayJob"}, meta.RESTScopeNamespace)
	theirs := handler.EnqueueRequestForOwner(scheme, mapper, &rayv1.RayJob{}, handler.OnlyControllerOwner())
	ours := Controller(owner)

	ref := func(apiVersion, kind, name string, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID("u-" + name), Controller: ptr.To(controller)}
	}
	objs := map[string]client.Object{}
	for name, refs := range map[string][]metav1.OwnerReference{
		"controlled":         {ref("ray.io/v1", "RayJob", "job-a", true)},
		"controlled-alpha":   {ref("ray.io/v1alpha1", "RayJob", "job-b", true)},
		"controlled-other":   {ref("ray.io/v1", "RayJob", "job-c", true)},
		"other-kind":         {ref("ray.io/v1", "RayService", "svc", true)},
		"other-group":        {ref("example.com/v1", "RayJob", "job-a", true)},
		"owned-only":         {ref("ray.io/v1", "RayJob", "job-a", false)},
		"second-controls":    {ref("ray.io/v1", "RayService", "svc", false), ref("ray.io/v1", "RayJob", "job-d", true)},
		"not-owned":          nil,
		"bad-version-string": {ref("ray.io/v1/x", "RayJob", "job-a", true)},
	} {
		objs[name] = &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, OwnerReferences: refs}}
	}
	names := make([]string, 0, len(objs))
	for n := range objs {
		names = append(names, n)
	}
	slices.Sort(names)

	run := func(h handler.EventHandler, ev func(handler.EventHandler, *recordingQueue)) []string {
		q := &recordingQueue{}
		ev(h, q)
		slices.Sort(q.added) // controller-runtime's order is a map's
		return q.added
	}
	ctx := context.Background()
	check := func(what string, ev func(handler.EventHandler, *recordingQueue)) {
		t.Helper()
		if got, want := run(ours, ev), run(theirs, ev); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: enqueued %v, controller-runtime %v", what, got, want)
		}
	}
	for _, n := range names {
		o := objs[n]
		check("create "+n, func(h handler.EventHandler, q *recordingQueue) { h.Create(ctx, event.CreateEvent{Object: o}, q) })
		check("delete "+n, func(h handler.EventHandler, q *recordingQueue) { h.Delete(ctx, event.DeleteEvent{Object: o}, q) })
		check("generic "+n, func(h handler.EventHandler, q *recordingQueue) { h.Generic(ctx, event.GenericEvent{Object: o}, q) })
		for _, m := range names {
			o2 := objs[m]
			check(fmt.Sprintf("update %s -> %s", n, m), func(h handler.EventHandler, q *recordingQueue) {
				h.Update(ctx, event.UpdateEvent{ObjectOld: o, ObjectNew: o2}, q)
			})
		}
	}
	// A sanity check that the comparison compares something: the controlled object enqueues its job.
	if got := run(ours, func(h handler.EventHandler, q *recordingQueue) {
		h.Create(ctx, event.CreateEvent{Object: objs["controlled"]}, q)
	}); len(got) != 1 || got[0] != "ns/job-a" {
		t.Errorf("create of a controlled cluster enqueued %v, want [ns/job-a]", got)
	}
	// Typed, for a watch of Services.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", OwnerReferences: []metav1.OwnerReference{ref("ray.io/v1", "RayJob", "job-e", true)}}}
	q := &recordingQueue{}
	TypedController[*corev1.Service](owner).Create(ctx, event.TypedCreateEvent[*corev1.Service]{Object: svc}, q)
	if len(q.added) != 1 || q.added[0] != "ns/job-e" {
		t.Errorf("typed create enqueued %v, want [ns/job-e]", q.added)
	}
}
