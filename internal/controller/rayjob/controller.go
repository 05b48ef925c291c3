package rayjob

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/controller/shared/ownerqueue"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/metrics"
	"github.com/manta-dev/manta/internal/ray"
)

// Options configure the controller.
type Options struct {
	// ClusterDomain is the Services' DNS domain (status.dashboardURL, the submitter's address); empty means cluster.local.
	ClusterDomain string
	// MaxConcurrentReconciles is how many RayJobs reconcile at once (1 when zero).
	MaxConcurrentReconciles int
	// StatusWriter writes the RayJobs' status (reconcile.ClientStatus of the manager's client when nil).
	StatusWriter reconcile.StatusWriter
	// Creator, when set, creates the children of the kinds it handles (the RayCluster, the head Service) in place
	// of the manager's client: nothing of a create's answer but the metadata is read.
	Creator reconcile.Creator
	// StatusCheckTimeout, TransitionGracePeriod, SubmitterFinishedTimeout and PollInterval default to the Default*
	// constants.
	StatusCheckTimeout       time.Duration
	TransitionGracePeriod    time.Duration
	SubmitterFinishedTimeout time.Duration
	PollInterval             time.Duration
	// DeleteRayJobAfterJobFinishes makes shutdownAfterJobFinishes delete the RayJob itself, its cluster with it, once
	// ttlSecondsAfterFinished has passed (KubeRay's DELETE_RAYJOB_CR_AFTER_JOB_FINISHES=true).
	DeleteRayJobAfterJobFinishes bool
	// StopOnDeleteTimeout bounds how long deleting a RayJob waits for Ray to stop its job (30 s when zero); after
	// it the finalizer goes anyway with a warning event, so an unreachable head cannot block deletion forever.
	StopOnDeleteTimeout time.Duration
	// BatchScheduler is the operator's batch scheduler (one of clusterbuild.BatchSchedulers; empty: none): the RayJob's
	// cluster and submitter are handed to it (batchscheduler.go).
	BatchScheduler string
	// MissingConfigGrace is how long a Secret or ConfigMap a pod needs may be missing before a RayJob annotated
	// AnnotationFailOnPermanentStartError fails (DefaultMissingConfigGrace when zero).
	MissingConfigGrace time.Duration
	// Clock is the controller's time (reconcile.RealClock when nil); Rand is injectable for tests.
	Clock reconcile.Clock
	Rand  func(n int) int
}

// Reconciler reconciles RayJobs.
type Reconciler struct {
	client client.Client
	// reader reads what the manager's cache does not hold: the job's head Service carries no ray.io/cluster label.
	reader   client.Reader
	recorder events.EventRecorder
	rays     ray.ClientFactory
	opts     Options
	// writes remembers the controller's own status writes: it does not watch them (SetupWithManager), and a
	// RayJob that waits on no poll (initializing, finished) mirrors its cluster's status (see reconcile.StatusWrites).
	writes reconcile.StatusWrites
	life   *reconcile.Lifecycle[*rayv1.RayJob, rayv1.RayJobStatus]
	// headServices remembers, per RayJob, that its <job>-head-svc was read pointing at its cluster: the Service is
	// not in the cache, and a running job's poll read it from the API server every few seconds.
	headServices headServiceMemo
}

// NewReconciler builds the controller; rays reaches the heads (directly or through the API server's proxy).
func NewReconciler(mgr ctrl.Manager, rays ray.ClientFactory, opts Options) *Reconciler {
	if opts.StatusCheckTimeout <= 0 {
		opts.StatusCheckTimeout = DefaultStatusCheckTimeout
	}
	if opts.TransitionGracePeriod <= 0 {
		opts.TransitionGracePeriod = DefaultTransitionGracePeriod
	}
	if opts.SubmitterFinishedTimeout <= 0 {
		opts.SubmitterFinishedTimeout = DefaultSubmitterFinishedTimeout
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.MissingConfigGrace <= 0 {
		opts.MissingConfigGrace = DefaultMissingConfigGrace
	}
	if opts.StopOnDeleteTimeout <= 0 {
		opts.StopOnDeleteTimeout = 30 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = reconcile.RealClock
	}
	if opts.Rand == nil {
		opts.Rand = rand.IntN
	}
	if opts.StatusWriter == nil {
		opts.StatusWriter = reconcile.ClientStatus(mgr.GetClient())
	}
	r := &Reconciler{client: reconcile.WithCreator(mgr.GetClient(), opts.Creator), reader: mgr.GetAPIReader(), recorder: mgr.GetEventRecorder("rayjob-controller"), rays: rays, opts: opts}
	r.life = r.lifecycle()
	return r
}

// SetupWithManager watches RayJobs (not the status the controller writes itself), and the RayClusters and
// submitter Jobs they own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := clusterpods.Register(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	deleting := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectNew.GetDeletionTimestamp() != nil && e.ObjectOld.GetDeletionTimestamp() == nil
	}}
	return ctrl.NewControllerManagedBy(mgr).
		For(&rayv1.RayJob{}, ctrlbuilder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}, deleting))).
		// ownerqueue: controller-runtime's Owns asks the REST mapper on every event of every owned object.
		Watches(&rayv1.RayCluster{}, ownerqueue.Controller(rayJobKind)).
		Watches(&batchv1.Job{}, ownerqueue.Controller(rayJobKind)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.opts.MaxConcurrentReconciles)}).
		Named("rayjob").
		Complete(r)
}

// +kubebuilder:rbac:groups=ray.io,resources=rayjobs,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=ray.io,resources=rayjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ray.io,resources=rayjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile runs the shared skeleton (reconcile.Lifecycle) with the RayJob's parts: live, finalize.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.life.Reconcile(ctx, req)
}

func (r *Reconciler) lifecycle() *reconcile.Lifecycle[*rayv1.RayJob, rayv1.RayJobStatus] {
	return &reconcile.Lifecycle[*rayv1.RayJob, rayv1.RayJobStatus]{
		Client:    r.client,
		Recorder:  r.recorder,
		New:       func() *rayv1.RayJob { return &rayv1.RayJob{} },
		Unalias:   r.unalias(),
		ManagedBy: func(j *rayv1.RayJob) *string { return j.Spec.ManagedBy },
		Forget: func(key types.NamespacedName) {
			metrics.ForgetJob(key)
			r.writes.Forget(key)
			r.headServices.forget(key)
		},
		Finalizer:    Finalizer,
		Finalize:     r.finalize,
		Live:         r.live,
		Status:       func(j *rayv1.RayJob) *rayv1.RayJobStatus { return &j.Status },
		CopyStatus:   (*rayv1.RayJobStatus).DeepCopy,
		StatusWriter: r.opts.StatusWriter,
		Writes:       &r.writes,
	}
}

// unalias is how a reconcile makes its own copy of the cached RayJob: all but the spec when the status writer is
// spec-preserving (metawrite's), since this controller changes no part of a RayJob's spec and then no write of the
// RayJob decodes into it; the whole RayJob otherwise. A RayJob's spec holds a whole RayClusterSpec: copying it was
// about 6 % of what the operator allocated over 1,000 RayJobs, at seven reconciles a job.
func (r *Reconciler) unalias() func(*rayv1.RayJob) {
	if _, ok := r.opts.StatusWriter.(reconcile.SpecPreserving); ok {
		return reconcile.UnaliasRayJobSharingSpec
	}
	return reconcile.UnaliasRayJob
}

// live observes the RayJob, plans (computePlan, pure), carries out the plan's writes (the Ray calls among them) and
// leaves the planned status in j.
func (r *Reconciler) live(ctx context.Context, j *rayv1.RayJob, old *rayv1.RayJobStatus, res *reconcile.Result) (reconcile.StatusStep, error) {
	p := computePlan(r.observe(ctx, j), r.opts.planConfig())
	recErr := r.write(ctx, p)
	j.Status = p.j.Status
	j.Status.ObservedGeneration = j.Generation
	res.Merge(&p.Result, len(res.Events))
	return reconcile.StatusStep{
		Write: func() {
			// Every job's first status is Initializing (the events that follow say what it does): only a change
			// after the first, or a first status that is not Initializing (ValidationFailed, Suspended), is news.
			deployment := old.JobDeploymentStatus != j.Status.JobDeploymentStatus &&
				(old.JobDeploymentStatus != "" || j.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing)
			job := old.JobStatus != j.Status.JobStatus && j.Status.JobStatus != ""
			// Both changed in one status write (a job ending as Ray reports its end) are one event: each event is a
			// write to the API server, and the note says both.
			switch {
			case deployment && job:
				res.StatusEventf(corev1.EventTypeNormal, ReasonStatusChanged, "Reconcile", "jobDeploymentStatus %q -> %q%s; Ray job %s is %s", old.JobDeploymentStatus, j.Status.JobDeploymentStatus, reasonSuffix(&j.Status), j.Status.JobId, j.Status.JobStatus)
			case deployment:
				res.StatusEventf(corev1.EventTypeNormal, ReasonStatusChanged, "Reconcile", "jobDeploymentStatus %q -> %q%s", old.JobDeploymentStatus, j.Status.JobDeploymentStatus, reasonSuffix(&j.Status))
			case job:
				res.StatusEventf(corev1.EventTypeNormal, ReasonJobStatusChanged, "Reconcile", "Ray job %s is %s", j.Status.JobId, j.Status.JobStatus)
			}
		},
		Stored: func() { metrics.ObserveJob(j, old, r.opts.Clock.Now()) },
	}, recErr
}

func reasonSuffix(s *rayv1.RayJobStatus) string {
	if s.Reason != "" && (s.JobDeploymentStatus == rayv1.JobDeploymentStatusFailed || s.JobDeploymentStatus == rayv1.JobDeploymentStatusValidationFailed) {
		return fmt.Sprintf(" (%s: %s)", s.Reason, s.Message)
	}
	return ""
}

// finalize stops the Ray job of a RayJob deleted while its job may still run; then the deletion may proceed.
func (r *Reconciler) finalize(ctx context.Context, j *rayv1.RayJob, res *reconcile.Result) (bool, error) {
	if err := r.stopRayJob(ctx, j, res); err != nil {
		if r.opts.Clock.Since(j.DeletionTimestamp.Time) < r.opts.StopOnDeleteTimeout {
			return false, err
		}
		res.Eventf(corev1.EventTypeWarning, ReasonFailedStopJob, "Delete", "could not stop Ray job %s before deleting the RayJob; giving up after %s: %v", j.Status.JobId, r.opts.StopOnDeleteTimeout, err)
	}
	return true, nil
}

// stopRayJob asks Ray to stop the RayJob's job when it may be running. A job Ray does not know, a finished one or a
// cluster that is gone need nothing.
func (r *Reconciler) stopRayJob(ctx context.Context, j *rayv1.RayJob, res *reconcile.Result) error {
	s := &j.Status
	if s.JobId == "" || s.RayClusterName == "" || rayv1.IsJobTerminal(s.JobStatus) {
		return nil
	}
	switch s.JobDeploymentStatus {
	case rayv1.JobDeploymentStatusRunning, rayv1.JobDeploymentStatusWaiting, rayv1.JobDeploymentStatusInitializing:
	default:
		return nil
	}
	cluster := &rayv1.RayCluster{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: j.Namespace, Name: s.RayClusterName}, cluster); err != nil {
		return client.IgnoreNotFound(err)
	}
	dash, err := r.dashboard(ctx, cluster)
	if err != nil {
		return err
	}
	stopped, err := dash.StopJob(ctx, s.JobId)
	switch {
	case errors.Is(err, ray.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	if stopped {
		res.Eventf(corev1.EventTypeNormal, ReasonStoppedJob, "Delete", "stopped Ray job %s", s.JobId)
	}
	return nil
}

// rayJobKind is the owner kind of a RayJob's cluster and submitter Job.
var rayJobKind = schema.GroupKind{Group: rayv1.GroupVersion.Group, Kind: "RayJob"}
