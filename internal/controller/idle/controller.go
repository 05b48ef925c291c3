package idle

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/rayauth"
)

// Options configure the idle controller.
type Options struct {
	// CheckInterval is the least time between two checks of one head (--idle-check-interval); zero means
	// DefaultCheckInterval.
	CheckInterval time.Duration
	// HeadTarget says where a cluster's dashboard is (the RayJob controller's rayjob.HeadTarget).
	HeadTarget func(*rayv1.RayCluster) ray.Target
	// Clock is the controller's clock; nil means reconcile.RealClock.
	Clock reconcile.Clock
	// StatusWriter writes the IdleSuspended condition (reconcile.ClientStatus of the manager's client when nil).
	StatusWriter reconcile.StatusWriter
	// SkipNameValidation lets tests run several operators in one process.
	SkipNameValidation bool
}

// Validate refuses an interval the flag must not take, naming the flag.
func (o Options) Validate() error {
	if o.CheckInterval != 0 && o.CheckInterval < MinCheckInterval {
		return fmt.Errorf("--idle-check-interval %s: must be at least %s", o.CheckInterval, MinCheckInterval)
	}
	return nil
}

// Reconciler checks each opted-in, Ready RayCluster's head once per interval and suspends it once idle for its
// timeout.
type Reconciler struct {
	client   client.Client
	reader   client.Reader
	recorder events.EventRecorder
	rays     ray.ClientFactory
	opts     Options

	mu     sync.Mutex
	tracks map[types.UID]Track
}

// NewReconciler builds the idle controller; rays reaches heads as the RayJob and RayService controllers do.
func NewReconciler(mgr ctrl.Manager, rays ray.ClientFactory, opts Options) (*Reconciler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = DefaultCheckInterval
	}
	if opts.Clock == nil {
		opts.Clock = reconcile.RealClock
	}
	if opts.StatusWriter == nil {
		opts.StatusWriter = reconcile.ClientStatus(mgr.GetClient())
	}
	if opts.HeadTarget == nil {
		return nil, fmt.Errorf("idle controller: HeadTarget is required")
	}
	registerMetrics()
	return &Reconciler{client: mgr.GetClient(), reader: mgr.GetAPIReader(), recorder: mgr.GetEventRecorder("idle-controller"),
		rays: rays, opts: opts, tracks: map[types.UID]Track{}}, nil
}

// SetupWithManager watches RayClusters that carry (or carried) the annotation: a change of it, of the spec or of
// the state starts a reconcile; the periodic checks come from RequeueAfter.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	relevant := predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return optedIn(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return optedIn(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return optedIn(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			if !optedIn(e.ObjectOld) && !optedIn(e.ObjectNew) {
				return false
			}
			o, n := e.ObjectOld.(*rayv1.RayCluster), e.ObjectNew.(*rayv1.RayCluster)
			return o.Generation != n.Generation || o.Status.State != n.Status.State ||
				o.Annotations[AnnotationIdleTimeout] != n.Annotations[AnnotationIdleTimeout] ||
				o.Annotations[AnnotationIdleSuspendedAt] != n.Annotations[AnnotationIdleSuspendedAt]
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("raycluster-idle").
		For(&rayv1.RayCluster{}, builder.WithPredicates(relevant)).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(r.opts.SkipNameValidation)}).
		Complete(r)
}

func optedIn(o client.Object) bool {
	a := o.GetAnnotations()
	_, t := a[AnnotationIdleTimeout]
	_, s := a[AnnotationIdleSuspendedAt]
	return t || s
}

// +kubebuilder:rbac:groups=ray.io,resources=rayclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile checks one cluster's head when a check is due, suspends the cluster when it has been idle long
// enough, and keeps its IdleSuspended condition in step with the marker annotation.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &rayv1.RayCluster{}
	if err := r.client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if c.DeletionTimestamp != nil {
		r.forget(c.UID)
		return ctrl.Result{}, nil
	}
	var res reconcile.Result
	err := r.reconcile(ctx, c, &res)
	var statusErr error
	if err == nil {
		statusErr = r.writeCondition(ctx, c)
	}
	return res.Finish(r.recorder, c, err, statusErr)
}

func (r *Reconciler) reconcile(ctx context.Context, c *rayv1.RayCluster, res *reconcile.Result) error {
	suspended := ptr.Deref(c.Spec.Suspend, false)
	if _, marked := c.Annotations[AnnotationIdleSuspendedAt]; marked && !suspended {
		// A user or a RayJob resumed it: drop the marker, so a later manual suspension is not taken for ours.
		base := c.DeepCopy()
		delete(c.Annotations, AnnotationIdleSuspendedAt)
		return r.client.Patch(ctx, c, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}
	timeout, ok, err := ParseTimeout(c.Annotations)
	if !ok || suspended || c.Status.State != rayv1.Ready {
		// Idle time counts only while the cluster runs: a resumed cluster starts a new stretch.
		r.forget(c.UID)
		return nil
	}
	if err != nil {
		r.forget(c.UID)
		res.Eventf(corev1.EventTypeWarning, ReasonInvalidIdleTimeout, "IdleCheck", "%v; the cluster is not suspended when idle", err)
		return nil // a new value of the annotation starts a reconcile
	}
	now := r.opts.Clock.Now()
	track := r.track(c.UID)
	if due, wait := Due(track, now, r.opts.CheckInterval); !due {
		res.Requeue(wait)
		return nil
	}
	activity, checkErr := r.check(ctx, c)
	track, suspend := Observe(track, now, activity, checkErr != nil, timeout)
	r.setTrack(c.UID, track)
	if checkErr != nil {
		log.FromContext(ctx).V(1).Info("idle check failed", "error", checkErr.Error())
		res.Eventf(corev1.EventTypeWarning, ReasonIdleCheckFailed, "IdleCheck", "could not read the Ray head's activity: %v", checkErr)
	}
	if !suspend {
		res.Requeue(r.opts.CheckInterval)
		return nil
	}
	// spec.suspend and the marker in one write that fails if the cluster changed since it was read (a user who
	// resumed or edited it meanwhile wins).
	base := c.DeepCopy()
	c.Spec.Suspend = ptr.To(true)
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[AnnotationIdleSuspendedAt] = now.UTC().Format(time.RFC3339)
	if err := r.client.Patch(ctx, c, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	r.forget(c.UID)
	res.Eventf(corev1.EventTypeNormal, ReasonIdleSuspended, "Suspend", "suspended after %s idle (%s: %s): no Ray job, Serve application, actor or task",
		now.Sub(track.IdleSince).Round(time.Second), AnnotationIdleTimeout, timeout)
	return nil
}

// writeCondition writes IdleSuspended as the cluster's marker and spec say it is: True while it is suspended with
// the marker, False (Resumed) once a cluster that had it True is not. It is derived anew at every reconcile, so a
// write that conflicted with the RayCluster controller's is made by the reconcile Finish requeues.
func (r *Reconciler) writeCondition(ctx context.Context, c *rayv1.RayCluster) error {
	at, marked := c.Annotations[AnnotationIdleSuspendedAt]
	cur := meta.FindStatusCondition(c.Status.Conditions, ConditionIdleSuspended)
	want := metav1.Condition{Type: ConditionIdleSuspended, ObservedGeneration: c.Generation}
	switch {
	case marked && ptr.Deref(c.Spec.Suspend, false):
		when, err := time.Parse(time.RFC3339, at)
		if err != nil {
			when = r.opts.Clock.Now()
		}
		timeout := c.Annotations[AnnotationIdleTimeout]
		want.Status, want.Reason, want.LastTransitionTime = metav1.ConditionTrue, ReasonIdleSuspended, metav1.NewTime(when)
		want.Message = fmt.Sprintf("suspended at %s: no Ray job, Serve application, actor or task for %s (%s)", at, timeout, AnnotationIdleTimeout)
	case cur != nil && cur.Status == metav1.ConditionTrue:
		want.Status, want.Reason, want.LastTransitionTime = metav1.ConditionFalse, ReasonResumed, metav1.NewTime(r.opts.Clock.Now())
		want.Message = "spec.suspend is false or the cluster is no longer marked " + AnnotationIdleSuspendedAt + ": it is not suspended for idleness"
	default:
		return nil
	}
	if cur != nil && cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message && cur.ObservedGeneration == want.ObservedGeneration {
		return nil
	}
	meta.SetStatusCondition(&c.Status.Conditions, want)
	return r.opts.StatusWriter.UpdateStatus(ctx, c)
}

func (r *Reconciler) check(ctx context.Context, c *rayv1.RayCluster) (Activity, error) {
	d, err := rayauth.Dashboard(ctx, r.reader, r.rays, c, r.opts.HeadTarget(c))
	if err != nil {
		return Activity{}, err
	}
	return ReadActivity(ctx, d)
}

func (r *Reconciler) track(uid types.UID) Track {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tracks[uid]
}

func (r *Reconciler) setTrack(uid types.UID, t Track) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tracks[uid] = t
}

func (r *Reconciler) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tracks, uid)
}
