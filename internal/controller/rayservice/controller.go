package rayservice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/controller/shared/ownerqueue"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/rayauth"
)

// Options configure the controller.
type Options struct {
	// RayClients builds the dashboard and Serve proxy clients (honouring --use-kubernetes-proxy). Required.
	RayClients ray.ClientFactory
	// MaxConcurrentReconciles is how many RayServices reconcile at once (1 when zero).
	MaxConcurrentReconciles int
	// StatusWriter writes the RayServices' status (reconcile.ClientStatus of the manager's client when nil).
	StatusWriter reconcile.StatusWriter
	// RequeueInterval is how often a RayService is looked at again to follow Ray's application statuses and proxy
	// health (2 seconds when zero, as KubeRay).
	RequeueInterval time.Duration
	// RayCallTimeout bounds each call to a Ray head (10 seconds when zero).
	RayCallTimeout time.Duration
	// Namespaces, when set, are the only namespaces watched (the operator's --watch-namespace): the cache of the
	// RayServices' Services is scoped like the manager's.
	Namespaces []string
	// NoZeroDowntime: a RayService that sets no upgradeStrategy.type does not move to a new cluster when its
	// cluster spec changes, as upgrade type None (KubeRay's ENABLE_ZERO_DOWNTIME=false). An explicit type wins.
	NoZeroDowntime bool
	// Clock is the controller's time (reconcile.RealClock when nil); Rand the random source of cluster names.
	Clock reconcile.Clock
	Rand  func(n int) int
}

// Reconciler reconciles RayServices.
type Reconciler struct {
	client client.Client
	// apiReader reads past the caches.
	apiReader client.Reader
	// services caches the Services RayServices own: they carry KubeRay's labels for a RayService
	// (ray.io/originated-from-crd=RayService), not ray.io/cluster, so the manager's cache does not hold them.
	services cache.Cache
	recorder events.EventRecorder
	opts     Options
	// gatewayAPI: the API server serves Gateways and HTTPRoutes (found when the controller is set up), so the
	// incremental upgrade can run.
	gatewayAPI bool
	// applied remembers, per RayCluster UID, the Serve config this process applied to which head, until the cached
	// cluster carries the annotations that record it: a reconcile reading the cluster from a cache that has not
	// seen the patch yet, or after the patch failed, does not send the same config again.
	applied sync.Map // types.UID -> appliedRecord
	life    *reconcile.Lifecycle[*rayv1.RayService, rayv1.RayServiceStatuses]
}

// NewReconciler builds the controller from the manager's cached client and event recorder.
func NewReconciler(mgr ctrl.Manager, opts Options) (*Reconciler, error) {
	if opts.RayClients == nil {
		return nil, errors.New("rayservice controller: Options.RayClients is required")
	}
	if opts.RequeueInterval <= 0 {
		opts.RequeueInterval = 2 * time.Second
	}
	if opts.RayCallTimeout <= 0 {
		opts.RayCallTimeout = 10 * time.Second
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
	services, err := newServiceCache(mgr, opts.Namespaces)
	if err != nil {
		return nil, fmt.Errorf("rayservice controller: Service cache: %w", err)
	}
	r := &Reconciler{client: mgr.GetClient(), apiReader: mgr.GetAPIReader(), services: services,
		recorder: mgr.GetEventRecorder("rayservice-controller"), opts: opts}
	r.life = r.lifecycle()
	return r, nil
}

func newServiceCache(mgr ctrl.Manager, namespaces []string) (cache.Cache, error) {
	opts := cache.Options{
		Scheme: mgr.GetScheme(),
		Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Service{}: {
				Label:     labels.SelectorFromSet(labels.Set{rayv1.LabelOriginCRD: clusterbuild.KindRayService}),
				Transform: cache.TransformStripManagedFields(),
			},
		},
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return cache.New(mgr.GetConfig(), opts)
}

// SetupWithManager watches RayServices, the RayClusters and Services they own, and the pods of their clusters (a
// pod's readiness moves the serve endpoints).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := clusterpods.Register(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := mgr.Add(r.services); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&rayv1.RayService{}).
		// ownerqueue: controller-runtime's Owns asks the REST mapper on every event of every owned object.
		Watches(&rayv1.RayCluster{}, ownerqueue.Controller(rayServiceKind)).
		WatchesRawSource(source.Kind(r.services, &corev1.Service{}, ownerqueue.TypedController[*corev1.Service](rayServiceKind))).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.serviceOfPod))
	// Gateways and HTTPRoutes are watched only where the Gateway API is installed (a watch of a kind the API server
	// does not serve would stop the manager); elsewhere an incremental upgrade is refused.
	r.gatewayAPI = gatewayAPIServed(mgr)
	if r.gatewayAPI {
		b = b.Watches(&gwv1.Gateway{}, ownerqueue.Controller(rayServiceKind)).Watches(&gwv1.HTTPRoute{}, ownerqueue.Controller(rayServiceKind))
	}
	return b.
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.opts.MaxConcurrentReconciles)}).
		Named("rayservice").
		Complete(r)
}

// gatewayAPIServed says whether the scheme knows and the API server serves gateway.networking.k8s.io/v1 Gateways
// and HTTPRoutes.
func gatewayAPIServed(mgr ctrl.Manager) bool {
	for _, kind := range []string{"Gateway", "HTTPRoute"} {
		gvk := schema.GroupVersionKind{Group: gwv1.GroupVersion.Group, Version: gwv1.GroupVersion.Version, Kind: kind}
		if !mgr.GetScheme().Recognizes(gvk) {
			return false
		}
		if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return false
		}
	}
	return true
}

// serviceOfPod maps a Ray pod to the RayService that controls its cluster.
func (r *Reconciler) serviceOfPod(ctx context.Context, o client.Object) []ctrlreconcile.Request {
	name := o.GetLabels()[rayv1.LabelCluster]
	if _, serve := o.GetLabels()[rayv1.LabelServe]; name == "" || !serve {
		// Every pod of a RayService's cluster carries ray.io/serve (KubeRay's and Manta's builders set it
		// from the cluster's originated-from-crd label); a plain RayCluster's pods are not looked up, which
		// cost a copy of their cluster from the cache on every pod event.
		return nil
	}
	c := &rayv1.RayCluster{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: name}, c); err != nil {
		return nil
	}
	ref := metav1.GetControllerOf(c)
	if ref == nil || ref.Kind != clusterbuild.KindRayService || ref.APIVersion != rayv1.GroupVersion.String() {
		return nil
	}
	return []ctrlreconcile.Request{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: ref.Name}}}
}

// +kubebuilder:rbac:groups=ray.io,resources=rayservices,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=ray.io,resources=rayservices/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ray.io,resources=rayservices/finalizers,verbs=update
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gateways,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=get;list;watch;create;update;delete

// Reconcile runs the shared skeleton (reconcile.Lifecycle) with the RayService's parts: live, finalize.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.life.Reconcile(ctx, req)
}

func (r *Reconciler) lifecycle() *reconcile.Lifecycle[*rayv1.RayService, rayv1.RayServiceStatuses] {
	return &reconcile.Lifecycle[*rayv1.RayService, rayv1.RayServiceStatuses]{
		Client:       r.client,
		Recorder:     r.recorder,
		New:          func() *rayv1.RayService { return &rayv1.RayService{} },
		Unalias:      reconcile.UnaliasRayService,
		ManagedBy:    func(rs *rayv1.RayService) *string { return rs.Spec.ManagedBy },
		Finalizer:    Finalizer,
		Finalize:     r.finalize,
		Live:         r.live,
		Status:       func(rs *rayv1.RayService) *rayv1.RayServiceStatuses { return &rs.Status },
		CopyStatus:   (*rayv1.RayServiceStatuses).DeepCopy,
		StatusEqual:  statusEqual,
		StatusWriter: r.opts.StatusWriter,
		// The events regard the RayService without its resourceVersion, which every status write moves: the
		// recorder aggregates repeats of one event (a retried Serve config, say) by what they regard, so they count
		// in one series instead of one Event object per retry.
		Regarding: func(rs *rayv1.RayService) runtime.Object {
			regarding := *rs
			regarding.ResourceVersion = ""
			return &regarding
		},
	}
}

// live observes the RayService, plans (computePlan, pure), carries out the plan's writes and leaves the planned
// status in rs.
func (r *Reconciler) live(ctx context.Context, rs *rayv1.RayService, _ *rayv1.RayServiceStatuses, res *reconcile.Result) (reconcile.StatusStep, error) {
	o, err := r.observe(ctx, rs)
	if err != nil {
		return reconcile.StatusStep{}, err
	}
	p := computePlan(o)
	writeErr := r.write(ctx, p)
	rs.Status = p.status
	p.Requeue(r.opts.RequeueInterval)
	res.Merge(&p.Result, len(res.Events))
	return reconcile.StatusStep{Write: func() {
		now := metav1.NewTime(r.opts.Clock.Now())
		rs.Status.LastUpdateTime = &now
	}}, writeErr
}

func statusEqual(a, b *rayv1.RayServiceStatuses) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	a.LastUpdateTime, b.LastUpdateTime = nil, nil
	return equality.Semantic.DeepEqual(a, b)
}

// dashboardFor is the client of c's dashboard at t, with the cluster's Ray auth token when it uses one.
func (r *Reconciler) dashboardFor(ctx context.Context, c *rayv1.RayCluster, t ray.Target) (ray.Dashboard, error) {
	return rayauth.Dashboard(ctx, r.apiReader, r.opts.RayClients, c, t)
}

// finalize deletes every RayCluster of a deleted RayService (KubeRay's association: the originated-from labels),
// with no deletion delay; the deletion may proceed once none is left.
func (r *Reconciler) finalize(ctx context.Context, rs *rayv1.RayService, res *reconcile.Result) (bool, error) {
	var list rayv1.RayClusterList
	if err := r.client.List(ctx, &list, client.InNamespace(rs.Namespace),
		client.MatchingLabels{rayv1.LabelOriginCRName: rs.Name, rayv1.LabelOriginCRD: clusterbuild.KindRayService}); err != nil {
		return false, fmt.Errorf("list RayClusters: %w", err)
	}
	if len(list.Items) == 0 {
		return true, nil
	}
	var errs []error
	for i := range list.Items {
		c := &list.Items[i]
		if c.DeletionTimestamp != nil {
			continue
		}
		err := r.client.Delete(ctx, c, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &c.UID})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			res.Eventf(corev1.EventTypeWarning, EventFailedToDeleteRayCluster, "Delete", "failed to delete RayCluster %s: %v", c.Name, err)
			errs = append(errs, fmt.Errorf("delete RayCluster %s: %w", c.Name, err))
		default:
			res.Eventf(corev1.EventTypeNormal, EventDeletedRayCluster, "Delete", "deleted RayCluster %s: the RayService is being deleted", c.Name)
		}
	}
	// The clusters' own deletions bring the RayService back; the requeue covers a cluster held by its finalizer.
	res.Requeue(r.opts.RequeueInterval)
	return false, errors.Join(errs...)
}

// rayServiceKind is the owner kind of a RayService's clusters, Services, Gateway and HTTPRoute.
var rayServiceKind = schema.GroupKind{Group: rayv1.GroupVersion.Group, Kind: "RayService"}
