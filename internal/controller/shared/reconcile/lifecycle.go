package reconcile

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// Lifecycle is the one reconcile of every controller of a Manta kind, from the first read to the last write. Its
// Reconcile reads the object; forgets one that is gone; leaves one another controller manages alone
// (spec.managedBy); takes one being deleted through Finalize and then off the controller's finalizer; puts the
// finalizer on a live one; runs Live (observe, a pure plan, the writes it decides); writes the status once when it
// changed; and returns Result.Finish. A kind supplies only what differs: T is the object, S its status type.
type Lifecycle[T client.Object, S any] struct {
	// Client reads the object (the manager's cache), and writes its finalizer unless StatusWriter does.
	Client client.Client
	// Recorder records the events Finish is asked for.
	Recorder events.EventRecorder
	// New returns an empty T to read into.
	New func() T
	// Unalias, when set, turns obj, a shallow copy of the cached object (its maps, slices and pointers the
	// cache's), into a deep copy of it, TypeMeta set to the kind's as the cache sets it, without allocating a second
	// T: Reconcile then reads with client.UnsafeDisableDeepCopy and calls it before anything else sees obj. The
	// cache's own copy makes a new T and Get copies that into New's, a T too many per reconcile (7.5 MB of a
	// 1,000-cluster trial's RayClusters). Nil: the cache copies. See UnaliasRayCluster.
	Unalias func(obj T)
	// ManagedBy returns the object's spec.managedBy; an object managed by another controller than KubeRay's (whose
	// name Manta answers to) is left alone. Nil: every object is this controller's.
	ManagedBy func(T) *string
	// Forget drops what the controller remembers of an object that is gone. Nil: nothing is remembered.
	Forget func(types.NamespacedName)

	// Finalizer is the controller's own finalizer: put on a live object (when WantsFinalizer says so) before Live
	// runs, and taken off a deleted one once Finalize says its deletion is done. Empty: the kind has none, and a
	// deleted object needs nothing of the controller (its children go with it through their owner references).
	Finalizer string
	// WantsFinalizer says whether a live object is to carry Finalizer; nil: every live object.
	WantsFinalizer func(T) bool
	// Finalize is the next step of the deletion of an object that carries Finalizer. done says it may go: the
	// finalizer is then taken off. Its events go to res: Eventf ones are recorded whatever happens, StatusEventf ones
	// (a release, reported as the object's own change) only once the finalizer is off.
	Finalize func(ctx context.Context, obj T, res *Result) (done bool, err error)

	// Live makes a live object's children match its spec and leaves the new status in obj. read is a copy of the
	// status as read, not to be changed. The StatusStep it returns adds what the kind needs to the status write;
	// its error is the reconcile's own.
	Live func(ctx context.Context, obj T, read *S, res *Result) (StatusStep, error)
	// Status is obj's status, for the comparison.
	Status func(obj T) *S
	// CopyStatus deep-copies a status (the API type's DeepCopy).
	CopyStatus func(*S) *S
	// StatusEqual compares the status read with the new one; nil: equality.Semantic.DeepEqual.
	StatusEqual func(read, updated *S) bool
	// StatusWriter writes the status (see StatusWriter), and the finalizer when it is a MetadataPatcher.
	StatusWriter StatusWriter
	// Writes, when set, keeps a status from being decided on an object read before the cache showed the
	// controller's last status write of it (StatusWrites): for a controller that does not watch its own status
	// updates.
	Writes *StatusWrites

	// Regarding, when set, is what the events regard instead of the object itself.
	Regarding func(T) runtime.Object
}

// unaliasedRead reads the cached object itself, for Unalias to copy.
var unaliasedRead = []client.GetOption{client.UnsafeDisableDeepCopy}

// UnaliasRayCluster is a RayCluster's Lifecycle.Unalias: c's fields are copied from a value on the stack that
// holds what c held (the cache's), so only c's maps, slices and pointers are new.
func UnaliasRayCluster(c *rayv1.RayCluster) {
	cached := *c
	cached.DeepCopyInto(c)
	c.TypeMeta = rayClusterType
}

// UnaliasRayClusterSharingSpec is UnaliasRayCluster but for the spec, whose maps, slices and pointers stay the
// cache's: only the metadata and status are copied. The same conditions as UnaliasRayJobSharingSpec hold: the
// controller changes no part of the spec it was handed (it copies the spec first where it writes one), and its
// writes of the object go through a SpecPreserving StatusWriter.
func UnaliasRayClusterSharingSpec(c *rayv1.RayCluster) {
	cached := *c
	cached.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	cached.Status.DeepCopyInto(&c.Status)
	c.TypeMeta = rayClusterType
}

// UnaliasRayJob is UnaliasRayCluster for a RayJob (whose spec holds a whole RayClusterSpec).
func UnaliasRayJob(j *rayv1.RayJob) {
	cached := *j
	cached.DeepCopyInto(j)
	j.TypeMeta = rayJobType
}

// UnaliasRayJobSharingSpec is UnaliasRayJob but for the spec, whose maps, slices and pointers stay the cache's:
// its metadata and status are copied, the spec (a whole RayClusterSpec, most of what UnaliasRayJob copies) is read
// in place. Only for a controller that changes no part of a RayJob's spec, and whose writes of it leave the spec
// alone (a SpecPreserving StatusWriter): a write that decodes the API server's answer into the object would write
// into the cache's spec.
func UnaliasRayJobSharingSpec(j *rayv1.RayJob) {
	cached := *j
	cached.ObjectMeta.DeepCopyInto(&j.ObjectMeta)
	cached.Status.DeepCopyInto(&j.Status)
	j.TypeMeta = rayJobType
}

// UnaliasRayService is UnaliasRayCluster for a RayService.
func UnaliasRayService(s *rayv1.RayService) {
	cached := *s
	cached.DeepCopyInto(s)
	s.TypeMeta = rayServiceType
}

// The TypeMeta the cache's Get sets on each kind, built once.
var (
	rayClusterType = metav1.TypeMeta{APIVersion: rayv1.GroupVersion.String(), Kind: "RayCluster"}
	rayJobType     = metav1.TypeMeta{APIVersion: rayv1.GroupVersion.String(), Kind: "RayJob"}
	rayServiceType = metav1.TypeMeta{APIVersion: rayv1.GroupVersion.String(), Kind: "RayService"}
)

// StatusStep is what a live reconcile adds to the status write. Every field is optional.
type StatusStep struct {
	// Changed, when set, replaces the comparison with the status read: for a reconcile that decided on a newer copy
	// of the object than the one the skeleton read.
	Changed func() bool
	// Unchanged runs when the status read is still right.
	Unchanged func()
	// Hold, when it returns more than zero, keeps a changed status back that long (the controller's status policy):
	// nothing is written, the reconcile looks again then, and the status events wait for the write.
	Hold func() time.Duration
	// Write runs just before the write: the last touches (lastUpdateTime) and the change's events.
	Write func()
	// Stored runs once the status is stored.
	Stored func()
}

// Reconcile is the controller's Reconcile (see Lifecycle).
func (l *Lifecycle[T, S]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := l.New()
	var opts []client.GetOption
	if l.Unalias != nil {
		opts = unaliasedRead
	}
	if err := l.Client.Get(ctx, req.NamespacedName, obj, opts...); err != nil {
		if apierrors.IsNotFound(err) && l.Forget != nil {
			l.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if l.Unalias != nil {
		l.Unalias(obj)
	}
	if l.ManagedBy != nil {
		if m := l.ManagedBy(obj); m != nil && *m != "" && *m != rayv1.KubeRayController {
			return ctrl.Result{}, nil
		}
	}
	if obj.GetDeletionTimestamp() != nil {
		return l.finalize(ctx, obj)
	}
	if l.Finalizer != "" && !controllerutil.ContainsFinalizer(obj, l.Finalizer) && (l.WantsFinalizer == nil || l.WantsFinalizer(obj)) {
		if err := patchFinalizer(ctx, l.finalizers(), obj, l.Finalizer, controllerutil.AddFinalizer); err != nil {
			return (&Result{}).Finish(l.Recorder, l.regarding(obj), err, nil)
		}
	}
	var res Result
	read := l.CopyStatus(l.Status(obj))
	step, reconcileErr := l.Live(ctx, obj, read, &res)
	statusErr := l.WriteStatus(ctx, obj, read, step, &res)
	return res.Finish(l.Recorder, l.regarding(obj), reconcileErr, statusErr)
}

// finalizers writes the controller's finalizer: through the StatusWriter when it is a MetadataPatcher, which reads
// back the metadata alone, else through Client.
func (l *Lifecycle[T, S]) finalizers() MetadataPatcher {
	if p, ok := l.StatusWriter.(MetadataPatcher); ok {
		return p
	}
	return clientPatcher{l.Client}
}

func (l *Lifecycle[T, S]) finalize(ctx context.Context, obj T) (ctrl.Result, error) {
	var res Result
	if l.Finalizer == "" || !controllerutil.ContainsFinalizer(obj, l.Finalizer) {
		return res.Finish(l.Recorder, l.regarding(obj), nil, nil)
	}
	done, err := l.Finalize(ctx, obj, &res)
	if done && err == nil {
		err = patchFinalizer(ctx, l.finalizers(), obj, l.Finalizer, controllerutil.RemoveFinalizer)
	}
	if !done || err != nil {
		res.dropStatusEvents()
	}
	return res.Finish(l.Recorder, l.regarding(obj), err, nil)
}

// WriteStatus is Reconcile's status write: obj's status, once, when it differs from the status read and step does
// not hold it back. It returns the write's error, or ErrCacheBehind (see Writes).
func (l *Lifecycle[T, S]) WriteStatus(ctx context.Context, obj T, read *S, step StatusStep, res *Result) error {
	if l.Writes != nil {
		// Checked before the comparison: a status computed from a copy older than the stored one may equal it and
		// still differ from the stored one.
		if err := l.Writes.Check(obj); err != nil {
			return err
		}
	}
	var changed bool
	switch {
	case step.Changed != nil:
		changed = step.Changed()
	case l.StatusEqual != nil:
		changed = !l.StatusEqual(read, l.Status(obj))
	default:
		changed = !equality.Semantic.DeepEqual(read, l.Status(obj))
	}
	if !changed {
		if step.Unchanged != nil {
			step.Unchanged()
		}
		return nil
	}
	if step.Hold != nil {
		if d := step.Hold(); d > 0 {
			res.dropStatusEvents()
			res.Requeue(d)
			return nil
		}
	}
	if step.Write != nil {
		step.Write()
	}
	var err error
	if l.Writes != nil {
		err = l.Writes.Update(ctx, l.StatusWriter, obj)
	} else {
		err = l.StatusWriter.UpdateStatus(ctx, obj)
	}
	if err == nil && step.Stored != nil {
		step.Stored()
	}
	return err
}

func (l *Lifecycle[T, S]) regarding(obj T) runtime.Object {
	if l.Regarding != nil {
		return l.Regarding(obj)
	}
	return obj
}

// dropStatusEvents forgets the status events asked so far: the change they report was not stored, and the reconcile
// that stores it finds it again.
func (r *Result) dropStatusEvents() {
	kept := r.Events[:0]
	for _, e := range r.Events {
		if !e.StatusChange {
			kept = append(kept, e)
		}
	}
	r.Events = kept
}
