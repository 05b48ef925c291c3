// Package raycluster is the RayCluster controller: it keeps a head pod, the worker pods of every group and the
// head Service in line with a ray.io/v1 RayCluster, and reports what it sees in the status. The objects it writes
// are built by internal/clusterbuild; this package only reads, diffs, writes and reports.
package raycluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/cacheread"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/controller/shared/createbackoff"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/features"
	"github.com/manta-dev/manta/internal/metrics"
	"github.com/manta-dev/manta/internal/validation"
)

// Options configure the controller.
type Options struct {
	// DefaultPodTemplate names a core/v1 PodTemplate (<namespace>/<name>) merged under every Ray pod.
	DefaultPodTemplate string
	// PodDefaults are added to every head and worker pod (the operator's configuration file; nil: none).
	PodDefaults *clusterbuild.PodDefaults
	// NoRedisCleanup turns the Redis cleanup of deleted clusters off, as KubeRay's ENABLE_GCS_FT_REDIS_CLEANUP=false
	// does: clusters with a Redis-backed GCS get no cleanup finalizer, and one that carries it already is released
	// on deletion without a cleanup Job (reported in an event naming the storage namespace left in Redis).
	NoRedisCleanup bool
	// ClusterDomain is the Services' DNS domain; empty means cluster.local.
	ClusterDomain string
	// MaxConcurrentReconciles is how many RayClusters reconcile at once (1 when zero).
	MaxConcurrentReconciles int
	// MaxParallelWrites caps the pods created or deleted at once for one cluster (50 when zero).
	MaxParallelWrites int
	// ResyncPeriod is how often a settled cluster is looked at again (5 minutes when zero).
	ResyncPeriod time.Duration
	// StatusCoalesceWindow bounds how long a progress-only status change may wait to be written with the next one
	// under a burst (DefaultStatusCoalesceWindow when zero, none when negative); see coalesce.go.
	StatusCoalesceWindow time.Duration
	// Clock is the controller's time (reconcile.RealClock when nil).
	Clock reconcile.Clock
	// CreateBackoffBase and CreateBackoffMax time the retries of refused pod creates: the first waits Base, each
	// next one twice as long, up to Max (defaults 1 s and 5 minutes); see backoff.go.
	CreateBackoffBase, CreateBackoffMax time.Duration
	// PodCreator, when set, creates the Ray pods instead of the manager's client: the operator passes a
	// metawrite.Pods, which reads back only the created pods' metadata (all the controller reads of them).
	PodCreator interface {
		Create(context.Context, *corev1.Pod) error
	}
	// ServiceCreator, when set, creates the cluster's Services instead of the manager's client: the operator passes
	// a metawrite.Creates, which reads back only their metadata. A head Service created so holds what was sent, not
	// the cluster IP and node ports the API server gave it: the status takes them from the cache at the next
	// reconcile, which the Service's watch event brings.
	ServiceCreator reconcile.Creator
	// StatusWriter writes the RayClusters' status (reconcile.ClientStatus of the manager's client when nil): the
	// operator passes a metawrite.Status, which reads back only the cluster's new resourceVersion.
	StatusWriter reconcile.StatusWriter
	// Optimizations switches the controller's performance mechanisms (nil: all on); see
	// internal/controller/shared/optimize and mechanisms.go.
	Optimizations *optimize.Switches
	// BatchScheduler is the operator's batch scheduler (one of clusterbuild.BatchSchedulers; empty: none): every
	// cluster's pods are handed to it, with the PodGroup it needs (batchscheduler.go).
	BatchScheduler string
	// FeatureEnabled says whether a feature gate is on (features.Enabled, the process's --feature-gates, when nil):
	// read at each reconcile, so tests give a controller its own gates without touching the process's.
	FeatureEnabled func(features.Gate) bool
}

// Reconciler reconciles RayClusters.
type Reconciler struct {
	client client.Client
	reader client.Reader // uncached: the default PodTemplate, and the cluster before its first pod create (clusterLive)
	// clusterMeta reads RayClusters' metadata uncached (clusterLive); nil falls back to reader.
	clusterMeta metadata.Getter
	recorder    events.EventRecorder
	opts        Options
	exp         *reconcile.Expectations[types.NamespacedName, struct{}]
	pending     *pendingStatus
	status      statusPolicy
	backoff     *createbackoff.Backoff
	// writes remembers the controller's own status writes (see reconcile.StatusWrites).
	writes reconcile.StatusWrites

	// observeStaleness receives, at each status write, how long its oldest change was held back (metrics' by
	// default; tests record it).
	observeStaleness func(time.Duration)

	// pods lists a cluster's pods from the informer's index, lent, not copied (completesCluster, reconcilePods).
	pods *cacheread.Index[*corev1.Pod]
	// clusters and services get RayClusters (completesCluster) and Services (deleteUnwantedServices) lent by the
	// cache, not copied.
	clusters *cacheread.Store[*rayv1.RayCluster]
	services *cacheread.Store[*corev1.Service]

	// hashes caches each cluster's template hashes (see templateHashes), by cluster key.
	hashes sync.Map
	// madePods has, by cluster key, the UID of the cluster this process has created pods for (clusterLive).
	madePods sync.Map

	life *reconcile.Lifecycle[*rayv1.RayCluster, rayv1.RayClusterStatus]
}

// expectationTTL bounds how long the controller waits for the cache to show its own pod writes.
const expectationTTL = time.Minute

// newExpectations remembers the pods created and deleted for each cluster until the cache shows them.
func newExpectations(clk reconcile.Clock) *reconcile.Expectations[types.NamespacedName, struct{}] {
	return reconcile.NewExpectations[types.NamespacedName, struct{}](clk.Now, expectationTTL)
}

// newClusterAge: see clusterLive.
const newClusterAge = time.Minute

// NewReconciler builds the controller from the manager's cached client and event recorder.
func NewReconciler(mgr ctrl.Manager, opts Options) *Reconciler {
	r := newReconciler(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("raycluster-controller"), opts)
	r.pods = newPodIndex(mgr.GetCache(), mgr.GetClient())
	r.clusters, r.services = newStores(mgr.GetCache(), mgr.GetClient())
	if md, err := metadata.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient()); err == nil {
		r.clusterMeta = md.Resource(rayv1.GroupVersion.WithResource("rayclusters"))
	} // else the uncached reader serves (readClusterMeta)
	metrics.SetStatusesHeld(func() int { return r.pending.held() })
	return r
}

// newReconciler builds the controller on the given cached client, uncached reader and recorder, every default of
// opts applied: NewReconciler's, and the tests' with a fake client.
func newReconciler(cl client.Client, reader client.Reader, recorder events.EventRecorder, opts Options) *Reconciler {
	if opts.MaxParallelWrites <= 0 {
		opts.MaxParallelWrites = 50
	}
	if opts.ResyncPeriod <= 0 {
		opts.ResyncPeriod = 5 * time.Minute
	}
	if opts.StatusCoalesceWindow == 0 {
		opts.StatusCoalesceWindow = DefaultStatusCoalesceWindow
	}
	if opts.Clock == nil {
		opts.Clock = reconcile.RealClock
	}
	if opts.StatusWriter == nil {
		opts.StatusWriter = reconcile.ClientStatus(cl)
	}
	r := &Reconciler{client: cl, reader: reader, recorder: recorder, opts: opts, exp: newExpectations(opts.Clock),
		pending: newPendingStatus(), backoff: createbackoff.New(opts.CreateBackoffBase, opts.CreateBackoffMax),
		pods: newPodIndex(nil, cl)}
	r.clusters, r.services = newStores(nil, cl)
	r.status = writeAtOnce{}
	if opts.Optimizations.On(optimize.StatusCoalescing) {
		r.status = coalescing{p: r.pending, window: opts.StatusCoalesceWindow, sw: opts.Optimizations}
	}
	r.life = &reconcile.Lifecycle[*rayv1.RayCluster, rayv1.RayClusterStatus]{
		Client:         cl,
		Recorder:       recorder,
		New:            func() *rayv1.RayCluster { return &rayv1.RayCluster{} },
		Unalias:        unalias(opts.StatusWriter),
		ManagedBy:      func(c *rayv1.RayCluster) *string { return c.Spec.ManagedBy },
		Forget:         r.forget,
		Finalizer:      clusterbuild.FinalizerGCSFTRedisCleanup,
		WantsFinalizer: r.wantsCleanupFinalizer,
		Finalize:       r.finalize,
		Live:           r.live,
		Status:         func(c *rayv1.RayCluster) *rayv1.RayClusterStatus { return &c.Status },
		CopyStatus:     (*rayv1.RayClusterStatus).DeepCopy,
		StatusEqual:    statusEqual,
		StatusWriter:   opts.StatusWriter,
		Writes:         &r.writes,
	}
	return r
}

// unalias is how a reconcile makes its own copy of the cached RayCluster: all but the spec when the status writer
// is spec-preserving (metawrite's), since the controller changes the spec of no cluster it was handed
// (clearWorkersToDelete copies it first) and no write then decodes into it; the whole cluster otherwise.
func unalias(w reconcile.StatusWriter) func(*rayv1.RayCluster) {
	if _, ok := w.(reconcile.SpecPreserving); ok {
		return reconcile.UnaliasRayClusterSharingSpec
	}
	return reconcile.UnaliasRayCluster
}

// newPodIndex lists pods by clusterpods' index from informers' indexer, or through cl where informers is nil (the
// tests' fake client).
func newPodIndex(informers cache.Informers, cl client.Reader) *cacheread.Index[*corev1.Pod] {
	return cacheread.NewIndex(informers, cl, &corev1.Pod{}, func() client.ObjectList { return &corev1.PodList{} }, clusterpods.Index)
}

// newStores reads RayClusters and Services from informers' stores, or through cl where informers is nil.
func newStores(informers cache.Informers, cl client.Reader) (*cacheread.Store[*rayv1.RayCluster], *cacheread.Store[*corev1.Service]) {
	return cacheread.NewStore(informers, cl, func() *rayv1.RayCluster { return &rayv1.RayCluster{} }),
		cacheread.NewStore(informers, cl, func() *corev1.Service { return &corev1.Service{} })
}

// SetupWithManager watches RayClusters (spec, label and annotation changes, not the status it writes itself) and
// the pods, Services, Redis cleanup Jobs, NetworkPolicies, Ingresses, GCS storage claims, Certificates and Volcano
// PodGroups they own; changes to those are reconciled first (see progressPriority).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := clusterpods.Register(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	sw := r.opts.Optimizations
	b := ctrl.NewControllerManagedBy(mgr).
		For(&rayv1.RayCluster{}, ctrlbuilder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Pod{}, ownerHandler(true, sw, r.completesCluster, r.clusterCached), ctrlbuilder.WithPredicates(podUpdateMatters(sw))).
		Watches(&corev1.Service{}, ownerHandler(false, sw, nil, r.clusterCached)).
		Watches(&batchv1.Job{}, ownerHandler(false, sw, nil, r.clusterCached)).
		Watches(&networkingv1.NetworkPolicy{}, ownerHandler(false, sw, nil, r.clusterCached)).
		Watches(&networkingv1.Ingress{}, ownerHandler(false, sw, nil, r.clusterCached)).
		Watches(&corev1.PersistentVolumeClaim{}, ownerHandler(false, sw, nil, r.clusterCached))
	// Certificates are watched only where cert-manager is installed (a watch of a kind the API server does not
	// serve would stop the manager); elsewhere a cluster whose pods wait for certificates polls (tlsPoll).
	if _, err := mgr.GetRESTMapper().RESTMapping(cmv1.SchemeGroupVersion.WithKind(cmv1.CertificateKind).GroupKind(), cmv1.SchemeGroupVersion.Version); err == nil {
		b = b.Watches(&cmv1.Certificate{}, ownerHandler(false, sw, nil, r.clusterCached))
	}
	// Volcano's PodGroups, as KubeRay watches them, where Volcano is installed.
	if r.opts.BatchScheduler == clusterbuild.SchedulerVolcano {
		if _, err := mgr.GetRESTMapper().RESTMapping(volcanov1beta1.SchemeGroupVersion.WithKind("PodGroup").GroupKind(), volcanov1beta1.SchemeGroupVersion.Version); err == nil {
			b = b.Watches(&volcanov1beta1.PodGroup{}, ownerHandler(false, sw, nil, r.clusterCached))
		}
	}
	return b.
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.opts.MaxConcurrentReconciles)}).
		Named("raycluster").
		Complete(r)
}

// +kubebuilder:rbac:groups=ray.io,resources=rayclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods/resize,verbs=patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups="",resources=podtemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=cert-manager.io,resources=issuers,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;update
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// run is the state of one reconcile; its Result gathers the events and the requeue (see
// internal/controller/shared/reconcile).
type run struct {
	reconcile.Result
	c   *rayv1.RayCluster
	key types.NamespacedName
	obs observed
	// liveChecked says clusterLive has asked the API server in this reconcile, live what it found.
	liveChecked, live bool
	// clearWorkers says reconcilePods went through every group: workersToDelete may be cleared.
	clearWorkers bool
	// created and refused say a pod create of this reconcile went through, or was refused: only a reconcile whose
	// creates all went through ends the create backoff (a head let in by a freed quota slot, then its workers
	// refused, continues the streak instead of starting it again at the base delay).
	created, refused bool
	// tlsWait, when set, holds back pod creates: the mTLS certificates are not issued (reconcileTLS).
	tlsWait error
}

// newRun starts the state of one reconcile (or of a part of one that runs beside the rest).
func newRun(c *rayv1.RayCluster, key types.NamespacedName) *run { return &run{c: c, key: key} }

// Reconcile runs the shared skeleton (reconcile.Lifecycle) with the RayCluster's parts: live (observe, plan and write
// its objects, then the status step) and finalize (the Redis cleanup). The performance mechanisms sit behind
// mechanisms.go: read it as if they were all off.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.life.Reconcile(ctx, req)
}

// live makes the cluster's objects match the spec (reconcile), then computes the status from what it observed
// (statusStep).
func (r *Reconciler) live(ctx context.Context, c *rayv1.RayCluster, read *rayv1.RayClusterStatus, res *reconcile.Result) (reconcile.StatusStep, error) {
	run := newRun(c, client.ObjectKeyFromObject(c))
	run.obs.noConditions = !r.enabled(features.RayClusterStatusConditions)
	run.obs.noIndexing = !r.enabled(features.RayMultiHostIndexing)
	run.Requeue(r.opts.ResyncPeriod)
	recErr := r.reconcile(ctx, run)
	run.obs.reconcileOK = recErr == nil
	if run.created && !run.refused {
		r.backoff.Succeeded(run.key)
	}
	res.Merge(&run.Result, len(res.Events))
	if onlyBackedOff(recErr) {
		// Refused pod creates: the retry is scheduled (run.Requeue) by createBackoff, not the work queue's limiter.
		recErr = nil
	}
	return r.statusStep(run, read, res), recErr
}

// forget drops what the controller remembers of a cluster that is gone.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.exp.Forget(key)
	r.backoff.Succeeded(key)
	r.status.forget(key)
	r.writes.Forget(key)
	r.hashes.Delete(key)
	r.madePods.Delete(key)
	metrics.ForgetCluster(key)
}

// statusStep computes the status from what the reconcile observed into the cluster, and says how it is written: a
// change the status policy holds back waits (the skeleton requeues for when it is due); a written one reports the
// pods' start trouble it names and feeds the staleness and state metrics.
func (r *Reconciler) statusStep(run *run, read *rayv1.RayClusterStatus, res *reconcile.Result) reconcile.StatusStep {
	c, key, policy := run.c, run.key, r.status
	now := metav1.NewTime(r.opts.Clock.Now())
	c.Status = computeStatus(c, run.obs, now)
	return reconcile.StatusStep{
		Unchanged: func() { policy.settled(key) },
		Hold:      func() time.Duration { return policy.hold(key, read, &c.Status, r.opts.Clock.Now()) },
		Write: func() {
			reportStartTrouble(res, run, read.Reason)
			c.Status.LastUpdateTime = &now
		},
		Stored: func() {
			r.staleness(policy.wrote(key, r.opts.Clock.Now()))
			metrics.ObserveCluster(c, read, now.Time)
		},
	}
}

// clusterLive confirms with the API server, before the first pod create of a reconcile, that the cluster still
// exists and is not being deleted. The cache can still hold a cluster that was just deleted while the garbage
// collector's deletions of its pods have already arrived (watches of different kinds are not ordered): pods made
// then would only be collected again, a second head and workers for a cluster that is gone.
//
// A new cluster's first pods may skip the read (skipLiveCheck, in mechanisms.go).
func (r *Reconciler) clusterLive(ctx context.Context, run *run) (bool, error) {
	if run.liveChecked {
		return run.live, nil
	}
	if r.skipLiveCheck(run) {
		run.liveChecked, run.live = true, true
		return true, nil
	}
	live, err := r.readClusterMeta(ctx, run.key)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("read RayCluster %s: %w", run.key, err)
	}
	run.liveChecked, run.live = true, live.UID == run.c.UID && live.DeletionTimestamp == nil
	return run.live, nil
}

// readClusterMeta reads the cluster's metadata from the API server: through the metadata client for the one
// resource when there is one (controller-runtime's client looks up the REST mapping on every uncached metadata read,
// which allocated more than the rest of a new cluster's reconcile), else through the uncached reader.
func (r *Reconciler) readClusterMeta(ctx context.Context, key types.NamespacedName) (*metav1.PartialObjectMetadata, error) {
	if r.clusterMeta != nil {
		return r.clusterMeta.Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	}
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(rayv1.GroupVersion.WithKind("RayCluster"))
	return live, r.reader.Get(ctx, key, live)
}

// enabled says whether feature gate f is on for this controller (Options.FeatureEnabled).
func (r *Reconciler) enabled(f features.Gate) bool {
	if r.opts.FeatureEnabled != nil {
		return r.opts.FeatureEnabled(f)
	}
	return features.Enabled(f)
}

func (r *Reconciler) staleness(d time.Duration) {
	if r.observeStaleness != nil {
		r.observeStaleness(d)
		return
	}
	metrics.ObserveStatusStaleness(d)
}

// statusEqual compares two statuses but for lastUpdateTime (on shallow copies: nothing is changed below the top).
func statusEqual(a, b *rayv1.RayClusterStatus) bool {
	x, y := *a, *b
	x.LastUpdateTime, y.LastUpdateTime = nil, nil
	return equality.Semantic.DeepEqual(&x, &y)
}

// reconcile makes the cluster's objects match the spec and fills run.obs for the status.
func (r *Reconciler) reconcile(ctx context.Context, run *run) error {
	c := run.c
	if f := validate(c); f != nil {
		run.obs.invalid = f
		if !conditionMessageIs(c, ConditionInvalidSpec, f.message) {
			run.StatusEventf(corev1.EventTypeWarning, ConditionInvalidSpec, "Validate", "%s", f.message)
		}
		return nil
	}
	if w := validation.AutoscalerV1RestartPolicy(&c.Spec, field.NewPath("spec")); w != "" && c.Status.ObservedGeneration != c.Generation {
		// Once per generation: nothing in the status says it was told.
		run.StatusEventf(corev1.EventTypeWarning, ConditionInvalidSpec, "Validate", "%s", w)
	}
	run.obs.unsupported = append(clusterbuild.UnsupportedFields(c), clusterbuild.IgnoredSchedulerFields(c, r.opts.BatchScheduler)...)
	if len(run.obs.unsupported) > 0 && !conditionMessageIs(c, ConditionUnsupportedFeature, clusterbuild.UnsupportedMessage(run.obs.unsupported)) {
		run.StatusEventf(corev1.EventTypeWarning, ConditionUnsupportedFeature, "Validate", "%s", clusterbuild.UnsupportedMessage(run.obs.unsupported))
	}
	if err := r.ensureAuthSecret(ctx, run); err != nil {
		return err
	}
	defTmpl := r.defaultTemplate(ctx, run)

	// The Services and the pods do not depend on each other (pods reach the head by its Service's name, which is
	// fixed): writing them at the same time saves a round trip per new cluster, which is most of a reconcile's
	// time when the API server is busy. The Services work on their own run, merged afterwards; both only read the
	// cluster until they are done (clearWorkersToDelete, which writes it, comes after).
	svc := newRun(c, run.key)
	before := len(run.Events) // validation and template events stay first
	var svcErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		svcErr = errors.Join(r.reconcileServices(ctx, svc), r.reconcileNetworkPolicies(ctx, svc), r.reconcileHeadIngress(ctx, svc))
	}()
	// The head mounts the embedded GCS backend's claim: it comes first, as in KubeRay.
	podErr := r.reconcileGCSStorage(ctx, run)
	if podErr == nil {
		podErr = r.reconcilePods(ctx, run, defTmpl)
	}
	<-done
	if run.clearWorkers {
		podErr = errors.Join(podErr, r.clearWorkersToDelete(ctx, run))
	}
	run.obs.headService = svc.obs.headService
	run.Merge(&svc.Result, before)
	return errors.Join(svcErr, podErr)
}

// validate finds what stops the cluster from being reconciled at all: a parent's upgradeStrategy, then the
// RayCluster rules (internal/validation), reported by the first error.
func validate(c *rayv1.RayCluster) *failure {
	if c.Spec.UpgradeStrategy != nil && c.Spec.UpgradeStrategy.Type != nil {
		if owner := parentKind(c); owner != "" {
			return &failure{ReasonUpgradeStrategyNotAllowed, fmt.Sprintf("upgradeStrategy cannot be set when RayCluster is created by %s", owner)}
		}
	}
	if errs := validation.RayCluster(c); len(errs) > 0 {
		return &failure{ReasonInvalidSpec, validation.Message(errs)}
	}
	return nil
}

// parentKind is RayJob or RayService when one of them created the cluster.
func parentKind(c *rayv1.RayCluster) string {
	for _, o := range c.OwnerReferences {
		if o.APIVersion == rayv1.GroupVersion.String() && (o.Kind == clusterbuild.KindRayJob || o.Kind == clusterbuild.KindRayService) {
			return o.Kind
		}
	}
	if k := c.Labels[rayv1.LabelOriginCRD]; k == clusterbuild.KindRayJob || k == clusterbuild.KindRayService {
		return k
	}
	return ""
}

func conditionMessageIs(c *rayv1.RayCluster, t, msg string) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == t {
			return cond.Status == metav1.ConditionTrue && cond.Message == msg
		}
	}
	return false
}

// defaultTemplate reads the operator's default PodTemplate. A missing or invalid one is reported, and the pods are
// built from the user's template alone.
func (r *Reconciler) defaultTemplate(ctx context.Context, run *run) *corev1.PodTemplateSpec {
	ref := r.opts.DefaultPodTemplate
	if ref == "" {
		return nil
	}
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		ns, name = run.c.Namespace, ref
	}
	var f *failure
	tmpl := &corev1.PodTemplate{}
	// A direct read, not the cache: with --watch-namespace the cache does not see the operator's own namespace.
	if err := r.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, tmpl); err != nil {
		f = &failure{ReasonDefaultTemplateNotFound, fmt.Sprintf("default PodTemplate %s/%s: %v", ns, name, err)}
	} else if err := clusterbuild.ValidateDefaultPodTemplate(tmpl); err != nil {
		f = &failure{ReasonDefaultTemplateInvalid, fmt.Sprintf("default PodTemplate %s/%s is invalid: %v", ns, name, err)}
	} else if err := clusterbuild.CheckDefaultTemplate(run.c, &tmpl.Template); err != nil {
		f = &failure{ReasonDefaultTemplateInvalid, fmt.Sprintf("default PodTemplate %s/%s cannot be merged under %v", ns, name, err)}
	}
	if f != nil {
		run.obs.templateErr = f
		if !conditionMessageIs(run.c, ConditionDefaultPodTemplateFailure, f.message) {
			run.StatusEventf(corev1.EventTypeWarning, f.reason, "GetDefaultPodTemplate", "%s", f.message)
		}
		return nil
	}
	return &tmpl.Template
}

// readOnly reads an object from the cache without copying it: shallow, its maps and slices are the cache's, so it
// must not be changed (nor decoded into).
var readOnly = &client.GetOptions{UnsafeDisableDeepCopy: ptr.To(true)}

// reconcileServices creates the head Service and, when asked for, the serve and headless worker Services, and keeps
// the fields Manta owns (ports, selector, type, its labels and annotations) in line with the spec. Only those fields
// are patched: users and other controllers annotate the Services too.
func (r *Reconciler) reconcileServices(ctx context.Context, run *run) error {
	c := run.c
	want := []*corev1.Service{clusterbuild.HeadService(c)}
	var unwanted []string // names only: a Service built to learn its name was garbage on every reconcile
	if clusterbuild.WantsServeService(c) {
		want = append(want, clusterbuild.ServeService(c))
	} else {
		unwanted = append(unwanted, clusterbuild.ServeServiceName(c))
	}
	if clusterbuild.WantsHeadlessWorkerService(c) {
		want = append(want, clusterbuild.HeadlessWorkerService(c))
	} else {
		unwanted = append(unwanted, clusterbuild.HeadlessWorkerServiceName(c))
	}
	if err := r.deleteUnwantedServices(ctx, run, unwanted); err != nil {
		return err
	}
	// The cache's own Services, not copies (readOnly): they are only read here and by computeStatus, and
	// UpdateService copies one before changing anything.
	w := reconcile.Writer{Client: reconcile.WithCreator(r.client, r.opts.ServiceCreator), Reader: r.client, ReadOptions: []client.GetOption{readOnly}, Owner: c}
	for i, svc := range want {
		existing, op, err := reconcile.EnsureOwned(ctx, w, &serviceKind, svc, func(op reconcile.Op, o *corev1.Service, err error) {
			r.reportService(run, op, o, err)
		})
		if err != nil {
			return err
		}
		if i == 0 {
			run.obs.headService = existing
			if op == reconcile.Created && r.opts.ServiceCreator != nil {
				run.obs.headService = nil // its cluster IP and node ports not read back: see Options.ServiceCreator
			}
		}
	}
	return nil
}

// serviceKind writes the cluster's Services: the fields Manta owns (ports, selector, type, its labels and
// annotations) are patched, since users and other controllers annotate the Services too. Someone else's Service
// under a name the cluster wants is left alone, unreported, as KubeRay does; one that must switch between headless
// and not cannot change in place: it is deleted, and created again once the cache shows it gone.
var serviceKind = reconcile.Owned[*corev1.Service]{
	Kind: "service", New: func() *corev1.Service { return &corev1.Service{} },
	Sync: clusterbuild.UpdateService, Patch: true,
	// Not in the cache yet: the watch event brings it to the next reconcile.
	OnExists: reconcile.ExistsPending,
}

// reportService records the events of a write of one of the cluster's Services, KubeRay's on a create.
func (r *Reconciler) reportService(run *run, op reconcile.Op, svc *corev1.Service, err error) {
	switch {
	case op == reconcile.Created && err != nil:
		run.RelatedEventf(svc, corev1.EventTypeWarning, EventFailedToCreateService, "Create", "Failed creating service %s/%s, %v", svc.Namespace, svc.Name, err)
	case op == reconcile.Created:
		run.RelatedEventf(svc, corev1.EventTypeNormal, EventCreatedService, "Create", "Created service %s/%s", svc.Namespace, svc.Name)
	case op == reconcile.Deleted && err != nil:
		run.Eventf(corev1.EventTypeWarning, EventFailedToDeleteService, "Delete", "failed to delete Service %s to recreate it: %v", svc.Name, err)
	case op == reconcile.Deleted:
		run.Eventf(corev1.EventTypeNormal, EventDeletedService, "Delete", "deleted Service %s to recreate it: it cannot switch between headless and not in place", svc.Name)
		run.Requeue(time.Second)
	case op == reconcile.Updated && err != nil:
		run.Eventf(corev1.EventTypeWarning, EventFailedToUpdateService, "Update", "failed to update Service %s: %v", svc.Name, err)
	case op == reconcile.Updated:
		run.Eventf(corev1.EventTypeNormal, EventUpdatedService, "Update", "updated Service %s to match the spec", svc.Name)
	}
}

// deleteUnwantedServices deletes the optional Services (serve, headless worker) the cluster made and no longer asks
// for; a Service of that name that the cluster does not control is left alone.
func (r *Reconciler) deleteUnwantedServices(ctx context.Context, run *run, unwanted []string) error {
	for _, name := range unwanted {
		// The cache's own Service, read in place: most reconciles find none of them.
		existing, found, err := r.services.Get(ctx, run.c.Namespace, name)
		if err != nil {
			return fmt.Errorf("get service %s: %w", name, err)
		}
		if !found || !metav1.IsControlledBy(existing, run.c) || existing.DeletionTimestamp != nil {
			continue
		}
		// Deleted through an object of its own: the cache's is not handed to a client.
		uid := existing.UID
		del := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: existing.Namespace, Name: existing.Name}}
		if err := r.client.Delete(ctx, del, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			run.Eventf(corev1.EventTypeWarning, EventFailedToDeleteService, "Delete", "failed to delete Service %s: %v", name, err)
			return fmt.Errorf("delete service %s: %w", name, err)
		}
		run.Eventf(corev1.EventTypeNormal, EventDeletedService, "Delete", "deleted Service %s: the cluster no longer asks for it", name)
	}
	return nil
}
