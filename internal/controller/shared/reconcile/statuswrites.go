package reconcile

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheLagRequeue is when a reconcile that read an object older than the controller's own last status write of it
// looks again: the cache shows a write within milliseconds, and the change that reconcile found must not wait long.
const CacheLagRequeue = 200 * time.Millisecond

// ErrCacheBehind is StatusWrites.Check's answer for an object read before the cache showed the controller's last
// status write of it. Finish reads it as a stale cache: the status events wait, and the reconcile is looked at again
// after CacheLagRequeue.
var ErrCacheBehind = errors.New("the cache does not show the controller's last status write yet")

// StatusWrites remembers, per object, the resourceVersion the controller's last status write replaced, until the
// cache shows another one. A reconcile that reads the object at that version holds a status older than the stored
// one: a status computed from it may equal that old status and yet differ from the stored one, and the change would
// be dropped, with nothing to bring the object back when the controller does not watch its own status updates; a
// status that differs would be written over the older version and conflict. It keeps a controller correct, so no
// performance switch turns it off. The zero value is ready to use.
type StatusWrites struct {
	mu        sync.Mutex
	wroteOver map[types.NamespacedName]string
}

// Check returns ErrCacheBehind when obj was read at the resourceVersion the controller's last status write of it
// replaced; then its status is not the stored one, and no status is to be decided from it. Versions are only
// compared for equality (they are opaque): the write was made over that version, so any other the cache shows
// later holds it.
func (w *StatusWrites) Check(obj client.Object) error {
	key := client.ObjectKeyFromObject(obj)
	w.mu.Lock()
	defer w.mu.Unlock()
	old, ok := w.wroteOver[key]
	switch {
	case !ok:
		return nil
	case old != obj.GetResourceVersion():
		delete(w.wroteOver, key) // the cache has caught up
		return nil
	}
	return ErrCacheBehind
}

// Update writes obj's status through sw and, once it is stored, remembers the resourceVersion it replaced.
//
// A write the API server answers with the resourceVersion it was made at replaced nothing: the API server stores
// nothing for a status that, serialized, equals the stored one (a controller's status can differ from its cached
// copy in what serialization drops, such as a time's fraction of a second). Remembering that version would hold
// every later reconcile behind a version the cache already shows, and, with no write, no other would come.
func (w *StatusWrites) Update(ctx context.Context, sw StatusWriter, obj client.Object) error {
	key, rv := client.ObjectKeyFromObject(obj), obj.GetResourceVersion()
	if err := sw.UpdateStatus(ctx, obj); err != nil {
		return err
	}
	if obj.GetResourceVersion() == rv {
		return nil
	}
	w.mu.Lock()
	if w.wroteOver == nil {
		w.wroteOver = map[types.NamespacedName]string{}
	}
	w.wroteOver[key] = rv
	w.mu.Unlock()
	return nil
}

// Forget drops what is remembered of an object that is gone.
func (w *StatusWrites) Forget(key types.NamespacedName) {
	w.mu.Lock()
	delete(w.wroteOver, key)
	w.mu.Unlock()
}
