package testutil

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// PodWatcher follows the pods matching a label selector with a watch and records, per value of a grouping label,
// the most pods that existed at once. A pod exists from its ADDED to its DELETED event, so terminating pods count;
// watch events come in the API server's order, so no overlap is missed, however short.
type PodWatcher struct {
	mu       sync.Mutex
	existing map[string]sets.Set[types.UID]
	max      map[string]int
}

// WatchPods starts a PodWatcher for the pods matching selector, grouped by the value of the groupBy label. It stops
// with ctx.
func WatchPods(t *testing.T, ctx context.Context, cfg *rest.Config, selector labels.Set, groupBy string) *PodWatcher {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultLabelSelector: labels.SelectorFromSet(selector)})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	w := &PodWatcher{existing: map[string]sets.Set[types.UID]{}, max: map[string]int{}}
	update := func(obj any, exists bool) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		group := p.Labels[groupBy]
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.existing[group] == nil {
			w.existing[group] = sets.New[types.UID]()
		}
		if exists {
			w.existing[group].Insert(p.UID)
			w.max[group] = max(w.max[group], w.existing[group].Len())
		} else {
			w.existing[group].Delete(p.UID)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { update(obj, true) },
		UpdateFunc: func(_, obj any) { update(obj, true) },
		DeleteFunc: func(obj any) { update(obj, false) },
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("pod watch did not sync")
	}
	return w
}

// Max is the most pods of the group that existed at once.
func (w *PodWatcher) Max(group string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max[group]
}
