package raycronjob

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// Options configure the controller.
type Options struct {
	// MaxConcurrentReconciles is how many RayCronJobs reconcile at once (1 when zero).
	MaxConcurrentReconciles int
	// StatusWriter writes the RayCronJobs' status (reconcile.ClientStatus of the manager's client when nil).
	StatusWriter reconcile.StatusWriter
	// Clock is the controller's time, which the schedules are held to (reconcile.RealClock when nil).
	Clock reconcile.Clock
	// Local is the time zone of schedules without spec.timeZone (time.Local when nil), as KubeRay uses its
	// operator's zone.
	Local *time.Location
}

// Reconciler reconciles RayCronJobs.
type Reconciler struct {
	client client.Client
	// reader reads past the cache before a create: a cached RayCronJob may not show the last run yet.
	reader   client.Reader
	recorder events.EventRecorder
	opts     Options
	life     *reconcile.Lifecycle[*rayv1.RayCronJob, rayv1.RayCronJobStatus]
}

// NewReconciler builds the controller.
func NewReconciler(mgr ctrl.Manager, opts Options) *Reconciler {
	if opts.Clock == nil {
		opts.Clock = reconcile.RealClock
	}
	if opts.Local == nil {
		opts.Local = time.Local
	}
	if opts.StatusWriter == nil {
		opts.StatusWriter = reconcile.ClientStatus(mgr.GetClient())
	}
	r := &Reconciler{client: mgr.GetClient(), reader: mgr.GetAPIReader(), recorder: mgr.GetEventRecorder("raycronjob-controller"), opts: opts}
	r.life = r.lifecycle()
	return r
}

// SetupWithManager watches RayCronJobs, not the status the controller writes itself: the next run is a requeue.
// The RayJobs it creates are not watched, since no decision here depends on them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&rayv1.RayCronJob{}, ctrlbuilder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.opts.MaxConcurrentReconciles)}).
		Named("raycronjob").
		Complete(r)
}

// +kubebuilder:rbac:groups=ray.io,resources=raycronjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=ray.io,resources=raycronjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ray.io,resources=raycronjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=ray.io,resources=rayjobs,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile runs the shared skeleton (reconcile.Lifecycle) with the RayCronJob's live part; a deleted RayCronJob
// needs nothing (its RayJobs go with it through their owner reference).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.life.Reconcile(ctx, req)
}

func (r *Reconciler) lifecycle() *reconcile.Lifecycle[*rayv1.RayCronJob, rayv1.RayCronJobStatus] {
	return &reconcile.Lifecycle[*rayv1.RayCronJob, rayv1.RayCronJobStatus]{
		Client:       r.client,
		Recorder:     r.recorder,
		New:          func() *rayv1.RayCronJob { return &rayv1.RayCronJob{} },
		Live:         r.live,
		Status:       func(cj *rayv1.RayCronJob) *rayv1.RayCronJobStatus { return &cj.Status },
		CopyStatus:   (*rayv1.RayCronJobStatus).DeepCopy,
		StatusWriter: r.opts.StatusWriter,
	}
}

// live plans (computePlan, pure), creates the due run's RayJob and leaves the new status in cj.
func (r *Reconciler) live(ctx context.Context, cj *rayv1.RayCronJob, _ *rayv1.RayCronJobStatus, res *reconcile.Result) (reconcile.StatusStep, error) {
	now := r.opts.Clock.Now()
	p := computePlan(cj, now, r.opts.Local)
	var step reconcile.StatusStep
	if !p.run.IsZero() {
		// Decide a create on the object as stored: a cache that lags the last status write would repeat a run
		// whose RayJob may already have finished and been deleted.
		stored := &rayv1.RayCronJob{}
		if err := r.reader.Get(ctx, client.ObjectKeyFromObject(cj), stored); err != nil {
			return step, client.IgnoreNotFound(err)
		}
		*cj = *stored
		p = computePlan(cj, now, r.opts.Local)
		// The status is compared with the stored one, which the write replaces.
		read := cj.Status.DeepCopy()
		step.Changed = func() bool { return !equality.Semantic.DeepEqual(read, &cj.Status) }
	}

	if len(p.errs) > 0 {
		msg := p.errs.ToAggregate().Error()
		meta.SetStatusCondition(&cj.Status.Conditions, metav1.Condition{Type: string(rayv1.InvalidRayCronJobSpec),
			Status: metav1.ConditionTrue, Reason: "ValidationFailed", Message: msg, ObservedGeneration: cj.Generation})
		res.StatusEventf(corev1.EventTypeWarning, ReasonInvalidSpec, actionValidate, "%s", msg)
	} else {
		meta.RemoveStatusCondition(&cj.Status.Conditions, string(rayv1.InvalidRayCronJobSpec))
	}
	if p.suspended {
		res.StatusEventf(corev1.EventTypeNormal, ReasonSuspended, actionSuspend, "RayCronJob suspended, no new RayJobs will be created")
	}
	var createErr error
	if !p.run.IsZero() {
		createErr = r.createRun(ctx, cj, p.run, res)
		if createErr == nil {
			cj.Status.LastScheduleTime = &metav1.Time{Time: p.run}
		}
	}
	cj.Status.ObservedGeneration = cj.Generation

	if p.requeueAfter > 0 {
		res.Requeue(p.requeueAfter)
	}
	// A conflicting status write is retried by reconcile.Result's rule: the run's RayJob exists under its fixed
	// name, so the retry finds it and only records the run.
	return step, createErr
}

// createRun creates the RayJob of the run scheduled at run. A RayJob of that name that this RayCronJob controls
// is an earlier attempt's, and the run is done; one it does not control holds the name, and the run is skipped
// with a warning rather than retried forever.
func (r *Reconciler) createRun(ctx context.Context, cj *rayv1.RayCronJob, run time.Time, res *reconcile.Result) error {
	job := buildRayJob(cj, run)
	at := run.Format(time.RFC3339)
	// Created without a read first: the name is new for each run, and a RayJob of that name is asked about only
	// when the create finds it.
	w := reconcile.Writer{Client: r.client, Live: r.reader, Owner: cj}
	_, _, err := reconcile.WriteOwned(ctx, w, &runKind, reconcile.PlanOwned(cj, &runKind, job, nil), func(op reconcile.Op, _ *rayv1.RayJob, err error) {
		switch {
		case op == reconcile.Created && err != nil:
			res.Eventf(corev1.EventTypeWarning, ReasonFailedCreateJob, actionCreate, "failed to create RayJob %s for the run scheduled at %s: %v", job.Name, at, err)
		case op == reconcile.Created:
			res.Eventf(corev1.EventTypeNormal, ReasonCreatedJob, actionCreate, "created RayJob %s for the run scheduled at %s", job.Name, at)
		case op == reconcile.Taken:
			res.Eventf(corev1.EventTypeWarning, ReasonNameTaken, actionCreate, "RayJob %s exists and is not this RayCronJob's: the run scheduled at %s is skipped", job.Name, at)
		}
	})
	return err
}

// runKind writes a run's RayJob: created once, never changed.
var runKind = reconcile.Owned[*rayv1.RayJob]{
	Kind: "RayJob", New: func() *rayv1.RayJob { return &rayv1.RayJob{} }, OnExists: reconcile.ExistsCheck,
}
