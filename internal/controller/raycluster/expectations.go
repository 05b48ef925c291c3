package raycluster

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// expectationTTL bounds how long the controller waits for the cache to show its own writes; a watch that lost an
// event must not wedge a cluster forever.
const expectationTTL = time.Minute

// expectations remembers the pods a reconcile created and deleted until the informer cache shows them, so that a
// reconcile that runs on a stale cache does not create the same pods twice (pod names are generated) or count a
// deleted pod as alive. It is the Job controller's pattern, keyed by name instead of counts.
type expectations struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*clusterExpectations
}

type clusterExpectations struct {
	creates map[string]bool // pod names that must appear in the cache
	deletes map[string]bool // pod names that must disappear (or be terminating) in the cache
	since   time.Time
}

func newExpectations() *expectations {
	return &expectations{m: map[types.NamespacedName]*clusterExpectations{}}
}

func (e *expectations) get(key types.NamespacedName) *clusterExpectations {
	ce := e.m[key]
	if ce == nil {
		ce = &clusterExpectations{creates: map[string]bool{}, deletes: map[string]bool{}}
		e.m[key] = ce
	}
	if len(ce.creates) == 0 && len(ce.deletes) == 0 {
		ce.since = time.Now()
	}
	return ce
}

func (e *expectations) expectCreate(key types.NamespacedName, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(key).creates[name] = true
}

func (e *expectations) expectDelete(key types.NamespacedName, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(key).deletes[name] = true
}

// satisfied drops what the cached pods show done and reports whether nothing is outstanding.
func (e *expectations) satisfied(key types.NamespacedName, cached []corev1.Pod) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ce := e.m[key]
	if ce == nil {
		return true
	}
	alive := make(map[string]bool, len(cached))
	for i := range cached {
		alive[cached[i].Name] = cached[i].DeletionTimestamp == nil
		delete(ce.creates, cached[i].Name)
	}
	for name := range ce.deletes {
		if !alive[name] {
			delete(ce.deletes, name)
		}
	}
	if len(ce.creates) == 0 && len(ce.deletes) == 0 {
		delete(e.m, key)
		return true
	}
	if time.Since(ce.since) > expectationTTL {
		delete(e.m, key)
		return true
	}
	return false
}

func (e *expectations) forget(key types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}
