package operator

import (
	"reflect"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
)

// Most watch events of a RayCluster, RayJob or RayService are status writes, finalizers and labels: their spec,
// most of their bytes (a RayJob's holds a whole RayClusterSpec), is the one the cache already holds. The API server
// raises metadata.generation with every change of a custom resource's spec, so an update with the cached object's
// UID and generation has its spec. crWatchDecoder then decodes the event's object with its spec left out and takes
// the spec from the cached object (cr-spec-sharing): the two objects share the spec's maps, slices and pointers,
// which nothing writes into (the controllers read the cache's objects in place or copy them). The cache's
// transform, which interns strings in place, leaves a shared spec alone: it was interned with the object it came
// from, and a reconcile may be reading it.

// specOps decode a kind's spec alone, and share one object's spec with another.
type specOps struct {
	decode func(obj runtime.Object, spec []byte) error
	share  func(dst, src runtime.Object) bool
}

// crSpecOps are the kinds whose updates share their spec: those whose spec is large.
var crSpecOps = map[schema.GroupVersionKind]specOps{
	rayv1.GroupVersion.WithKind("RayCluster"): opsFor(func(c *rayv1.RayCluster) *rayv1.RayClusterSpec { return &c.Spec }),
	rayv1.GroupVersion.WithKind("RayJob"):     opsFor(func(j *rayv1.RayJob) *rayv1.RayJobSpec { return &j.Spec }),
	rayv1.GroupVersion.WithKind("RayService"): opsFor(func(s *rayv1.RayService) *rayv1.RayServiceSpec { return &s.Spec }),
}

// opsFor are the specOps of the kind O, whose spec spec returns.
func opsFor[O runtime.Object, S any](spec func(O) *S) specOps {
	return specOps{
		decode: func(o runtime.Object, b []byte) error {
			return kjson.UnmarshalCaseSensitivePreserveInts(b, spec(o.(O)))
		},
		share: func(dst, src runtime.Object) bool {
			s, ok := src.(O)
			if ok {
				*spec(dst.(O)) = *spec(s)
			}
			return ok
		},
	}
}

// decodeSharingSpec decodes ev's object (with exactly one spec) into obj: all of it but its spec, then the spec,
// from the cached object when that has obj's UID and generation, else from ev. A null spec decodes to nothing, as
// a missing one does, so leaving the spec out is writing null in its place.
func (d *crWatchDecoder) decodeSharingSpec(ev *crEvent, obj runtime.Object) bool {
	start := ev.specAt - ev.objectAt
	d.buf = append(append(append(d.buf[:0], ev.object[:start]...), "null"...), ev.object[start+len(ev.spec):]...)
	err := kjson.UnmarshalCaseSensitivePreserveInts(d.buf, obj)
	if cap(d.buf) > 1<<20 { // one large object does not keep its buffer for the rest of the watch
		d.buf = nil
	}
	if err != nil {
		return false
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return false
	}
	if gen := m.GetGeneration(); gen > 0 {
		if c, found := d.cached(m.GetNamespace() + "/" + m.GetName()); found {
			if cm, ok := c.(metav1.Object); ok && cm.GetUID() == m.GetUID() && cm.GetGeneration() == gen {
				if src, ok := c.(runtime.Object); ok && d.spec.share(obj, src) {
					markSpecShared(obj)
					d.sw.Acted(optimize.CRSpecSharing)
					return true
				}
			}
		}
	}
	return d.spec.decode(obj, ev.spec) == nil
}

// specShared marks, by address, the decoded objects whose spec is shared, for the cache's transform (cacheObject)
// to leave alone. The transform takes each mark as it transforms the object; a mark is left only when a watch is
// stopped with an event decoded but not yet taken, and holds no object: a later object at that address would have
// its spec's strings not interned, nothing worse.
var specShared = struct {
	sync.Mutex
	m map[uintptr]struct{}
}{m: map[uintptr]struct{}{}}

func markSpecShared(obj runtime.Object) {
	p := reflect.ValueOf(obj).Pointer()
	specShared.Lock()
	specShared.m[p] = struct{}{}
	specShared.Unlock()
}

// takeSpecShared says whether obj's spec is shared, and forgets it.
func takeSpecShared(obj any) bool {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return false
	}
	p := v.Pointer()
	specShared.Lock()
	defer specShared.Unlock()
	if _, ok := specShared.m[p]; !ok {
		return false
	}
	delete(specShared.m, p)
	return true
}
