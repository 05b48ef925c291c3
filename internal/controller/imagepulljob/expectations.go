package imagepulljob

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// expectations remember, per job, the pods this controller created that the informer has not delivered yet and the
// pods it deleted that are still in the cache. Without them a reconcile right after a create would see a free
// parallelism slot and start a pod on another node.
type expectations struct {
	mu      sync.Mutex
	creates map[types.UID]map[string]pendingPod
	deletes map[types.UID]sets.Set[types.UID]
}

func newExpectations() *expectations {
	return &expectations{creates: map[types.UID]map[string]pendingPod{}, deletes: map[types.UID]sets.Set[types.UID]{}}
}

// observe drops what the cache now shows and returns the creates still pending.
func (e *expectations) observe(job types.UID, pods []corev1.Pod, now time.Time) []pendingPod {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := sets.New[string]()
	uids := sets.New[types.UID]()
	for i := range pods {
		names.Insert(pods[i].Name)
		uids.Insert(pods[i].UID)
	}
	var out []pendingPod
	for name, pc := range e.creates[job] {
		if names.Has(name) || now.Sub(pc.created) > expectationsTimeout {
			delete(e.creates[job], name)
			continue
		}
		out = append(out, pc)
	}
	if d := e.deletes[job]; d != nil {
		for uid := range d {
			if !uids.Has(uid) {
				d.Delete(uid)
			}
		}
	}
	return out
}

func (e *expectations) created(job types.UID, pc pendingPod) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.creates[job] == nil {
		e.creates[job] = map[string]pendingPod{}
	}
	e.creates[job][pc.name] = pc
}

// shouldDelete reports whether a delete for the pod is still to be sent, and marks it sent.
func (e *expectations) shouldDelete(job types.UID, pod types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.deletes[job] == nil {
		e.deletes[job] = sets.New[types.UID]()
	}
	if e.deletes[job].Has(pod) {
		return false
	}
	e.deletes[job].Insert(pod)
	return true
}

func (e *expectations) deleteFailed(job types.UID, pod types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.deletes[job] != nil {
		e.deletes[job].Delete(pod)
	}
}

func (e *expectations) forget(job types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.creates, job)
	delete(e.deletes, job)
}
