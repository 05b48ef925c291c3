package reconcile

import (
	"errors"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// Expectations remember, per owner (a RayCluster, an ImagePullJob), the pods a controller created that its informer
// cache does not show yet and the pods it deleted that the cache still shows alive. A reconcile on a stale cache
// would otherwise create a pod with a generated name twice, see a free slot that a create in flight took, or count
// a deleted pod as alive. It is the Kubernetes Job controller's pattern, keyed by pod name (creates) and UID
// (deletes) instead of counts. Each expectation lapses ttl after it was made, so a watch that lost an event cannot
// wedge an owner forever.
//
// K identifies the owner; V is what a controller keeps about each create in flight (struct{} when nothing).
type Expectations[K comparable, V any] struct {
	now func() time.Time
	ttl time.Duration

	mu     sync.Mutex
	owners map[K]*owned[V]
}

type owned[V any] struct {
	creates map[string]expected[V]
	deletes map[types.UID]time.Time
	// unsure is when a create of a pod whose name the API server generates failed without saying whether it was
	// applied; zero when none did.
	unsure time.Time
}

type expected[V any] struct {
	value V
	at    time.Time
}

// NewExpectations makes empty expectations that read the time from now and lapse after ttl.
func NewExpectations[K comparable, V any](now func() time.Time, ttl time.Duration) *Expectations[K, V] {
	return &Expectations[K, V]{now: now, ttl: ttl, owners: map[K]*owned[V]{}}
}

func (e *Expectations[K, V]) get(owner K) *owned[V] {
	o := e.owners[owner]
	if o == nil {
		o = &owned[V]{creates: map[string]expected[V]{}, deletes: map[types.UID]time.Time{}}
		e.owners[owner] = o
	}
	return o
}

// ExpectCreate remembers that the pod named name was created for owner, with what the controller keeps about it.
func (e *Expectations[K, V]) ExpectCreate(owner K, name string, v V) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(owner).creates[name] = expected[V]{value: v, at: e.now()}
}

// ExpectDelete remembers that the pod with this UID is being deleted for owner. It reports whether the delete is
// new: false means an earlier reconcile sent it and the cache does not show it yet, so it need not be sent again.
func (e *Expectations[K, V]) ExpectDelete(owner K, uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	o := e.get(owner)
	if _, sent := o.deletes[uid]; sent {
		return false
	}
	o.deletes[uid] = e.now()
	return true
}

// CreateUnsure remembers that a create for owner of a pod whose name the API server generates failed without
// saying whether it was applied (a timeout, a lost answer: CreateOutcomeUnknown): no name can be expected, and a
// reconcile that trusted the cache could create the pod a second time. Until Resolve, Observe reports owner
// unsatisfied and Unsure reports true.
func (e *Expectations[K, V]) CreateUnsure(owner K) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(owner).unsure = e.now()
}

// Unsure says whether a create of owner failed without saying whether it was applied and was not resolved since.
func (e *Expectations[K, V]) Unsure(owner K) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	o := e.owners[owner]
	return o != nil && !o.unsure.IsZero()
}

// Resolve ends owner's unsure creates with its pods as the API server lists them now (not the cache): each is
// expected as created, so Observe waits until the cache shows them too. Terminating pods are left out: the
// controller counts them as gone anyway, and one may leave before the cache ever shows it.
func (e *Expectations[K, V]) Resolve(owner K, live []corev1.Pod, v V) {
	e.mu.Lock()
	defer e.mu.Unlock()
	o := e.get(owner)
	o.unsure = time.Time{}
	now := e.now()
	for i := range live {
		if live[i].DeletionTimestamp == nil {
			o.creates[live[i].Name] = expected[V]{value: v, at: now}
		}
	}
}

// CreateOutcomeUnknown says whether a failed create may still have been applied: the request may have reached the
// API server and its answer does not say it was refused (a transport error, a timeout, a server error). A 4xx
// answer other than 408 is a refusal.
func CreateOutcomeUnknown(err error) bool {
	var st apierrors.APIStatus
	if err == nil || !errors.As(err, &st) {
		return err != nil
	}
	code := st.Status().Code
	return code >= http.StatusInternalServerError || code == http.StatusRequestTimeout
}

// DeleteFailed forgets a delete that did not go through, so the next reconcile sends it again.
func (e *Expectations[K, V]) DeleteFailed(owner K, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if o := e.owners[owner]; o != nil {
		delete(o.deletes, uid)
	}
}

// Observe drops what the cached pods of owner (terminating ones included) show done: a create once its pod is
// cached, a delete once its pod is gone or terminating; and what lapsed. It returns what the controller kept about
// the creates still in flight, and whether nothing at all is outstanding.
func (e *Expectations[K, V]) Observe(owner K, cached []corev1.Pod) (pending []V, satisfied bool) {
	return observe(e, owner, cached)
}

// ObserveRefs is Observe of pods the cache lends (cacheread): they are only read.
func (e *Expectations[K, V]) ObserveRefs(owner K, cached []*corev1.Pod) (pending []V, satisfied bool) {
	return observe(e, owner, cached)
}

func observe[K comparable, V any, P corev1.Pod | *corev1.Pod](e *Expectations[K, V], owner K, cached []P) (pending []V, satisfied bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	o := e.owners[owner]
	if o == nil {
		return nil, true
	}
	now := e.now()
	if !o.unsure.IsZero() && now.Sub(o.unsure) > e.ttl {
		o.unsure = time.Time{}
	}
	alive := make(map[types.UID]bool, len(cached))
	for i := range cached {
		var p *corev1.Pod
		switch q := any(&cached[i]).(type) {
		case *corev1.Pod:
			p = q
		case **corev1.Pod:
			p = *q
		}
		alive[p.UID] = p.DeletionTimestamp == nil
		delete(o.creates, p.Name)
	}
	for name, c := range o.creates {
		if now.Sub(c.at) > e.ttl {
			delete(o.creates, name)
			continue
		}
		pending = append(pending, c.value)
	}
	for uid, at := range o.deletes {
		if !alive[uid] || now.Sub(at) > e.ttl {
			delete(o.deletes, uid)
		}
	}
	if len(o.creates) == 0 && len(o.deletes) == 0 && o.unsure.IsZero() {
		delete(e.owners, owner)
		return pending, true
	}
	return pending, false
}

// Outstanding says whether anything of owner is still expected. An expectation lapses only when Observe reads it:
// a controller with one outstanding looks again within the ttl, lest it wait for an event that never comes.
func (e *Expectations[K, V]) Outstanding(owner K) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	o := e.owners[owner]
	return o != nil && (len(o.creates) > 0 || len(o.deletes) > 0 || !o.unsure.IsZero())
}

// Forget drops everything about owner (it was deleted).
func (e *Expectations[K, V]) Forget(owner K) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.owners, owner)
}
