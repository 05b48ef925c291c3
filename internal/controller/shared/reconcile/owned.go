package reconcile

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Op is what EnsureOwned did, or found, about one child object. Every Op but Unchanged is reported.
type Op int

const (
	// Unchanged: the child is as desired (or is going away, or is used as it is): nothing was written.
	Unchanged Op = iota
	// Created: the child was created (with an error: the create failed).
	Created
	// Exists: the create found the name taken by the owner's own object (ExistsCheck), or one taken to be (ExistsPending),
	// that the cache has not shown yet; nothing more is written.
	Exists
	// Taken: the create found the name taken by an object the owner does not control (ExistsCheck, ExistsSync).
	Taken
	// Foreign: the child's name is held by an object the owner does not control; it is never written.
	Foreign
	// Updated: the child was brought back to what the owner writes (with an error: the write failed).
	Updated
	// Deleted: the child was deleted because a field that differs cannot change in place (with an error: the delete
	// failed). Without Owned.RecreateNow it is created again by a later reconcile.
	Deleted
)

// ExistsPolicy is what a create answered AlreadyExists means. The sites differ because their caches differ: a
// cache that holds every object of the kind the owner could own shows the owner's own object soon, while one
// that selects on a label never shows an object that lacks it.
type ExistsPolicy int

const (
	// ExistsPending takes the object to be the owner's, not in the cache yet: the next reconcile compares it.
	ExistsPending ExistsPolicy = iota
	// ExistsCheck reads the object from Writer.Live only to tell whose it is: Taken when another's, Exists (and
	// nothing more written) when the owner's, which the next reconcile compares.
	ExistsCheck
	// ExistsSync reads the object from Writer.Live and goes on as with an object found: Taken when another's, or
	// brought to what the owner writes now, for a cache that will not show it until it is (a label it selects on).
	ExistsSync
	// ExistsFail reports the create as failed (KubeRay's autoscaler RBAC does): the next reconcile reads whose it is.
	ExistsFail
)

// Owned says how a controller writes the child objects of one kind. Its zero value (with Kind and New) creates a
// child and never changes an existing one.
type Owned[T client.Object] struct {
	// Kind names the kind in errors.
	Kind string
	// New makes an empty object of the kind to read into.
	New func() T
	// Sync returns a copy of existing carrying what the owner writes from desired, whether anything differs, and
	// whether the difference cannot be written in place (an immutable field: the child is deleted). It must not
	// change existing, which may be the cache's own. nil: an existing child is never changed.
	Sync func(existing, desired T) (updated T, changed, recreate bool)
	// Patch writes a change as a merge patch from the existing object rather than an Update, so that fields others
	// set meanwhile (users and controllers annotate Services) are not overwritten; OptimisticLock guards the patch
	// with the resourceVersion read.
	Patch, OptimisticLock bool
	// RecreateNow creates a child deleted for an immutable field in the same call; otherwise the caller waits for
	// the delete to be seen (a Service's cluster IP is released asynchronously).
	RecreateNow bool
	// OnExists is what a create answered AlreadyExists means.
	OnExists ExistsPolicy
	// Adopt lets an existing object without a controller through to Sync, which may take it over (or let it go):
	// a claim that outlives its cluster is picked up by the next cluster of that name. One with another
	// controller is still Foreign.
	Adopt bool
	// AnyController passes every existing object to Sync, whoever controls it: for objects that are the user's to
	// bring (a ServiceAccount they name) or that KubeRay never checks (a RayJob's head Service).
	AnyController bool
}

// Writer is what EnsureOwned writes with and reads from, and the owner of the children.
type Writer struct {
	Client client.Client
	// Reader reads the existing child for EnsureOwned (the cache, usually; WriteOwned reads nothing); ReadOptions
	// go with each read.
	Reader      client.Reader
	ReadOptions []client.GetOption
	// Live is read after a create found the name taken (ExistsCheck, ExistsSync): the API server itself, past a
	// cache that may leave the object out.
	Live client.Reader
	// Owner is the controller the children must have; unused with Owned.AnyController.
	Owner metav1.Object
}

// Report is told each write EnsureOwned made or tried (err: it failed) and each name it found taken; it records the
// call site's events.
type Report[T client.Object] func(op Op, obj T, err error)

// Step is what one child needs: PlanOwned's decision, which WriteOwned carries out.
type Step[T client.Object] struct {
	// Op is Created (create Desired), Updated (write Object), Deleted (delete Existing), Foreign or Unchanged.
	Op                        Op
	Desired, Existing, Object T
}

// EnsureOwned reads the child desired names and makes it what the owner writes: created when absent, brought back
// when it differs, never written when another controls it. It returns the child as stored (Desired after a create,
// the written copy after an update, the existing object otherwise: nothing was written, or the write failed; none
// after a failed create) and what it did.
func EnsureOwned[T client.Object](ctx context.Context, w Writer, k *Owned[T], desired T, report Report[T]) (T, Op, error) {
	existing := k.New()
	err := w.Reader.Get(ctx, client.ObjectKeyFromObject(desired), existing, w.ReadOptions...)
	if apierrors.IsNotFound(err) {
		var none T
		existing = none
	} else if err != nil {
		var none T
		return none, Unchanged, fmt.Errorf("read %s %s: %w", k.Kind, desired.GetName(), err)
	}
	return WriteOwned(ctx, w, k, PlanOwned(w.Owner, k, desired, existing), report)
}

// PlanOwned decides, without writing, what the child desired needs given the object of its name (nil: none).
func PlanOwned[T client.Object](owner metav1.Object, k *Owned[T], desired, existing T) Step[T] {
	s := Step[T]{Desired: desired, Existing: existing, Object: existing}
	switch {
	case isNil(existing):
		s.Op, s.Object = Created, desired
		return s
	case !k.AnyController && !metav1.IsControlledBy(existing, owner) &&
		!(k.Adopt && metav1.GetControllerOfNoCopy(existing) == nil):
		s.Op = Foreign
		return s
	case existing.GetDeletionTimestamp() != nil || k.Sync == nil:
		// Going away: created again once it is gone.
		return s
	}
	updated, changed, recreate := k.Sync(existing, desired)
	switch {
	case !changed:
	case recreate:
		s.Op = Deleted
	default:
		s.Op, s.Object = Updated, updated
	}
	return s
}

// WriteOwned carries out s and reports each write; see EnsureOwned.
func WriteOwned[T client.Object](ctx context.Context, w Writer, k *Owned[T], s Step[T], report Report[T]) (T, Op, error) {
	if report == nil {
		report = func(Op, T, error) {}
	}
	switch s.Op {
	case Created:
		return createOwned(ctx, w, k, s.Desired, report)
	case Foreign:
		report(Foreign, s.Existing, nil)
		return s.Existing, Foreign, nil
	case Updated:
		var err error
		switch {
		case !k.Patch:
			err = w.Client.Update(ctx, s.Object)
		case k.OptimisticLock:
			err = w.Client.Patch(ctx, s.Object, client.MergeFromWithOptions(s.Existing, client.MergeFromWithOptimisticLock{}))
		default:
			err = w.Client.Patch(ctx, s.Object, client.MergeFrom(s.Existing))
		}
		report(Updated, s.Object, err)
		if err != nil {
			return s.Existing, Updated, fmt.Errorf("update %s %s: %w", k.Kind, s.Object.GetName(), err)
		}
		return s.Object, Updated, nil
	case Deleted:
		uid := s.Existing.GetUID()
		err := w.Client.Delete(ctx, s.Existing, client.Preconditions{UID: &uid})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		report(Deleted, s.Existing, err)
		if err != nil {
			return s.Existing, Deleted, fmt.Errorf("delete %s %s: %w", k.Kind, s.Existing.GetName(), err)
		}
		if k.RecreateNow {
			return createOwned(ctx, w, k, s.Desired, report)
		}
		return s.Existing, Deleted, nil
	}
	return s.Object, Unchanged, nil
}

func createOwned[T client.Object](ctx context.Context, w Writer, k *Owned[T], desired T, report Report[T]) (T, Op, error) {
	var none T
	err := w.Client.Create(ctx, desired)
	switch {
	case err == nil:
		report(Created, desired, nil)
		return desired, Created, nil
	case !apierrors.IsAlreadyExists(err) || k.OnExists == ExistsFail:
		report(Created, desired, err)
		return none, Created, fmt.Errorf("create %s %s: %w", k.Kind, desired.GetName(), err)
	case k.OnExists == ExistsPending:
		report(Exists, desired, nil)
		return desired, Exists, nil
	}
	live := k.New()
	if err := w.Live.Get(ctx, client.ObjectKeyFromObject(desired), live); err != nil {
		return none, Exists, fmt.Errorf("read %s %s, which exists: %w", k.Kind, desired.GetName(), err)
	}
	s := PlanOwned(w.Owner, k, desired, live)
	switch {
	case s.Op == Foreign:
		report(Taken, live, nil)
		return live, Taken, nil
	case k.OnExists == ExistsCheck:
		report(Exists, live, nil)
		return live, Exists, nil
	}
	return WriteOwned(ctx, w, k, s, report)
}

// isNil says whether o is no object: an untyped nil, or a typed nil pointer.
func isNil(o client.Object) bool {
	if o == nil {
		return true
	}
	v := reflect.ValueOf(o)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Creator creates objects of the kinds it Handles some other way than a client's Create: reading back only their
// metadata (metawrite.Creates), for a controller that reads nothing else of the answer.
type Creator interface {
	Handles(obj client.Object) bool
	Create(ctx context.Context, obj client.Object) error
}

// Deleter is a Creator that deletes the objects of the kinds it Handles too, reading nothing back
// (metawrite.Creates): the manager's client decodes a deleted object whole, and then encodes and decodes it again.
type Deleter interface {
	Delete(ctx context.Context, obj client.Object, opts *metav1.DeleteOptions) error
}

// WithCreator is c with its creates of cr's kinds made by cr, and its deletes of them too when cr is a Deleter; a
// create with options (a dry run, a field manager) stays c's own.
func WithCreator(c client.Client, cr Creator) client.Client {
	if cr == nil {
		return c
	}
	return creatorClient{Client: c, cr: cr}
}

type creatorClient struct {
	client.Client
	cr Creator
}

func (c creatorClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if len(opts) == 0 && c.cr.Handles(obj) {
		return c.cr.Create(ctx, obj)
	}
	return c.Client.Create(ctx, obj, opts...)
}

func (c creatorClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if d, ok := c.cr.(Deleter); ok && c.cr.Handles(obj) {
		var o client.DeleteOptions
		o.ApplyOptions(opts)
		return d.Delete(ctx, obj, o.AsDeleteOptions())
	}
	return c.Client.Delete(ctx, obj, opts...)
}
