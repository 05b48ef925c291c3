package operator

import (
	"context"
	"fmt"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/idle"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/controller/raycronjob"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/controller/rayservice"
	"github.com/manta-dev/manta/internal/controller/shared/metawrite"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/controller/startphases"
	"github.com/manta-dev/manta/internal/features"
	"github.com/manta-dev/manta/internal/metrics"
	"github.com/manta-dev/manta/internal/ray"
)

// addTypes adds the API groups the operator serves to its scheme.
func addTypes(s *runtime.Scheme) error {
	if err := rayv1.AddToScheme(s); err != nil {
		return err
	}
	// cert-manager's Issuers and Certificates, of RayClusters with tlsOptions.
	if err := cmv1.AddToScheme(s); err != nil {
		return err
	}
	// The batch schedulers' PodGroups (--batch-scheduler volcano, scheduler-plugins).
	if err := volcanov1beta1.AddToScheme(s); err != nil {
		return err
	}
	if err := spv1alpha1.AddToScheme(s); err != nil {
		return err
	}
	// The Gateway API's Gateways and HTTPRoutes, of RayServices upgraded incrementally.
	if err := gwv1.Install(s); err != nil {
		return err
	}
	return mantav1alpha1.AddToScheme(s)
}

// Setup registers every controller with the manager, one after the other, as a kubebuilder main.go does: the one
// list of what the operator runs (`manta operator`, `manta dev` and the tests that run the operator in-process all
// come through here).
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.RayClients == nil {
		f, err := ray.NewFactory(ray.Options{UseKubernetesProxy: opts.UseKubernetesProxy, RESTConfig: mgr.GetConfig(), ClusterDomain: opts.ClusterDomain,
			Timeout: opts.RayTimeout})
		if err != nil {
			return fmt.Errorf("ray clients: %w", err)
		}
		opts.RayClients = f
	}
	scheduler, err := opts.batchScheduler()
	if err != nil {
		return err
	}
	// Every controller writes its status through one writer: the one that reads back only the new resourceVersion,
	// unless optimize.MetadataWrites is off.
	status := reconcile.ClientStatus(mgr.GetClient())
	if opts.Optimizations.On(optimize.MetadataWrites) {
		meta, err := metawrite.NewStatus(mgr.GetConfig(), mgr.GetHTTPClient())
		if err != nil {
			return fmt.Errorf("status writer: %w", err)
		}
		status = countedStatus{meta, opts.Optimizations}
	}
	if opts.Optimizations.On(optimize.StartupPagesRelease) {
		if err := mgr.Add(releaseStartupPages{mgr: mgr, sw: opts.Optimizations}); err != nil {
			return err
		}
	}
	// The RayCluster controller creates its Services, and the RayJob controller its RayCluster and head Service,
	// reading back only their metadata, unless optimize.MetadataWrites is off: through one creator, so that each
	// kind's creates share one token bucket, as the manager's client has one per kind.
	var creator reconcile.Creator
	if opts.Optimizations.On(optimize.MetadataWrites) {
		creates, err := metawrite.NewCreates(mgr.GetConfig(), mgr.GetHTTPClient())
		if err != nil {
			return fmt.Errorf("metadata-only creator: %w", err)
		}
		creator = countedCreates{creates, opts.Optimizations}
	}
	if err := setupRayCluster(mgr, opts, scheduler, status, creator); err != nil {
		return fmt.Errorf("RayCluster controller: %w", err)
	}
	if err := rayjob.NewReconciler(mgr, opts.RayClients, rayjob.Options{
		Creator:                      creator,
		BatchScheduler:               scheduler,
		ClusterDomain:                opts.ClusterDomain,
		MaxConcurrentReconciles:      opts.ReconcileConcurrency,
		StatusWriter:                 status,
		StatusCheckTimeout:           opts.RayJobStatusCheckTimeout,
		TransitionGracePeriod:        opts.RayJobTransitionGracePeriod,
		DeleteRayJobAfterJobFinishes: opts.DeleteRayJobAfterJobFinishes,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("RayJob controller: %w", err)
	}
	// KubeRay's RayCronJob gate off: no controller, as KubeRay (the CRD and its objects stay).
	if features.Enabled(features.RayCronJob) {
		if err := raycronjob.NewReconciler(mgr, raycronjob.Options{
			MaxConcurrentReconciles: opts.ReconcileConcurrency,
			StatusWriter:            status,
		}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("RayCronJob controller: %w", err)
		}
	}
	rs, err := rayservice.NewReconciler(mgr, rayservice.Options{
		RayClients:              opts.RayClients,
		MaxConcurrentReconciles: opts.ReconcileConcurrency,
		StatusWriter:            status,
		Namespaces:              opts.WatchNamespaces,
		NoZeroDowntime:          opts.NoZeroDowntime,
	})
	if err == nil {
		err = rs.SetupWithManager(mgr)
	}
	if err != nil {
		return fmt.Errorf("RayService controller: %w", err)
	}
	idleCtl, err := idle.NewReconciler(mgr, opts.RayClients, idle.Options{CheckInterval: opts.IdleCheckInterval, StatusWriter: status,
		HeadTarget: rayjob.HeadTarget, SkipNameValidation: opts.SkipNameValidation})
	if err == nil {
		err = idleCtl.SetupWithManager(mgr)
	}
	if err != nil {
		return fmt.Errorf("RayCluster idle controller: %w", err)
	}
	if err := setupImagePullJob(mgr, opts, status); err != nil {
		return fmt.Errorf("ImagePullJob controllers: %w", err)
	}
	if err := startphases.NewReconciler(mgr, startphases.Options{LateThreshold: opts.StartPhaseLateThreshold, Optimizations: opts.Optimizations}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("start phases controllers: %w", err)
	}
	// KubeRay's kuberay_*_info and kuberay_*_condition_* series of the kinds above, from the operator's cache;
	// --enable-metrics=false (KubeRay's switch for them) leaves them out.
	metrics.SetKubeRay(!opts.NoKubeRayMetrics)
	if opts.NoKubeRayMetrics {
		metrics.Register()
		return nil
	}
	return metrics.Setup(mgr, metrics.RayClusters, metrics.RayJobs, metrics.RayServices)
}

// setupRayCluster gives the RayCluster controller status, the status writer all controllers share, and the pod
// creator that reads back only metadata (internal/controller/shared/metawrite) unless optimize.MetadataWrites is off.
func setupRayCluster(mgr ctrl.Manager, o Options, scheduler string, status reconcile.StatusWriter, services reconcile.Creator) error {
	opts := raycluster.Options{
		BatchScheduler:          scheduler,
		DefaultPodTemplate:      o.DefaultPodTemplate,
		PodDefaults:             o.PodDefaults,
		ClusterDomain:           o.ClusterDomain,
		MaxConcurrentReconciles: o.ReconcileConcurrency,
		NoRedisCleanup:          o.NoRedisCleanup,
		ResyncPeriod:            o.RayClusterResyncPeriod,
		StatusCoalesceWindow:    coalesceWindow(o.StatusCoalesceWindow),
		Optimizations:           o.Optimizations,
		StatusWriter:            status,
		ServiceCreator:          services,
	}
	if o.Optimizations.On(optimize.MetadataWrites) {
		pods, err := metawrite.NewPods(mgr.GetConfig(), mgr.GetHTTPClient())
		if err != nil {
			return fmt.Errorf("pod creator: %w", err)
		}
		opts.PodCreator = countedPods{pods, o.Optimizations}
	}
	return raycluster.NewReconciler(mgr, opts).SetupWithManager(mgr)
}

// countedPods, countedCreates and countedStatus are the metadata-only writers, counted as optimize.MetadataWrites acting.
type countedPods struct {
	pods *metawrite.Pods
	sw   *optimize.Switches
}

func (w countedPods) Create(ctx context.Context, p *corev1.Pod) error {
	w.sw.Acted(optimize.MetadataWrites)
	return w.pods.Create(ctx, p)
}

type countedCreates struct {
	creates *metawrite.Creates
	sw      *optimize.Switches
}

func (w countedCreates) Handles(obj client.Object) bool { return w.creates.Handles(obj) }

func (w countedCreates) Create(ctx context.Context, obj client.Object) error {
	w.sw.Acted(optimize.MetadataWrites)
	return w.creates.Create(ctx, obj)
}

func (w countedCreates) Delete(ctx context.Context, obj client.Object, opts *metav1.DeleteOptions) error {
	w.sw.Acted(optimize.MetadataWrites)
	return w.creates.Delete(ctx, obj, opts)
}

type countedStatus struct {
	status *metawrite.Status
	sw     *optimize.Switches
}

func (w countedStatus) UpdateStatus(ctx context.Context, obj client.Object) error {
	w.sw.Acted(optimize.MetadataWrites)
	return w.status.UpdateStatus(ctx, obj)
}

// PatchMetadata makes countedStatus a reconcile.MetadataPatcher: the controllers' finalizers are written through it.
func (w countedStatus) PatchMetadata(ctx context.Context, obj client.Object, patch []byte) error {
	w.sw.Acted(optimize.MetadataWrites)
	return w.status.PatchMetadata(ctx, obj, patch)
}

// PreservesSpec makes countedStatus a reconcile.SpecPreserving writer, as the metawrite.Status it counts.
func (w countedStatus) PreservesSpec() {}

// The RayJob controller reads a RayJob's spec in place only behind a SpecPreserving writer.
var _ reconcile.SpecPreserving = countedStatus{}

// coalesceWindow maps --status-coalesce-window onto raycluster.Options, where 0 means the default and a negative
// window none.
func coalesceWindow(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// setupImagePullJob registers the ImagePullJob controller and the RayCluster prepull controller that creates jobs.
func setupImagePullJob(mgr ctrl.Manager, o Options, status reconcile.StatusWriter) error {
	policy, err := o.imagePullPolicy()
	if err != nil {
		return err
	}
	r, err := imagepulljob.NewReconciler(mgr, imagepulljob.Options{
		PullerImage:             o.PullerImage,
		MaxConcurrentReconciles: o.ReconcileConcurrency,
		StatusWriter:            status,
		Policy:                  policy,
	})
	if err != nil {
		return err
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	return imagepulljob.NewRayClusterPrepullReconciler(mgr, r, imagepulljob.RayClusterPrepullOptions{}).SetupWithManager(mgr)
}
