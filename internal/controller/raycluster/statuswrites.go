package raycluster

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// cacheLagRequeue is when a reconcile that read a cluster older than the controller's own last status write looks
// again: the cache shows a write within milliseconds, and the change that reconcile found must not wait long.
const cacheLagRequeue = 200 * time.Millisecond

// statusWrites remembers, per cluster, the resourceVersion the controller's last status write replaced, until the
// cache shows a newer one. A reconcile that reads the cluster at that version holds a status older than the stored
// one: a status computed from it may equal that old status and yet differ from the stored one, and the change would
// be dropped (no watch event brings the cluster back: the controller does not watch its own status updates); a
// status that differs would be written over the older version and conflict. It keeps the controller correct, so it
// is on whatever the performance switches say.
type statusWrites struct {
	mu        sync.Mutex
	wroteOver map[types.NamespacedName]string
}

func newStatusWrites() *statusWrites {
	return &statusWrites{wroteOver: map[types.NamespacedName]string{}}
}

// wrote records a successful status write over resourceVersion rv.
func (w *statusWrites) wrote(key types.NamespacedName, rv string) {
	w.mu.Lock()
	w.wroteOver[key] = rv
	w.mu.Unlock()
}

// behind says whether the cluster read at resourceVersion rv is older than the controller's last status write of
// it. Versions are only compared for equality: the write was made over rv, so any other version the cache shows
// later holds it.
func (w *statusWrites) behind(key types.NamespacedName, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	old, ok := w.wroteOver[key]
	if ok && old != rv {
		delete(w.wroteOver, key) // the cache has caught up
		return false
	}
	return ok
}

// forget drops what is remembered of a cluster that is gone.
func (w *statusWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	delete(w.wroteOver, key)
	w.mu.Unlock()
}
