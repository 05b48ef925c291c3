package operator

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/controller/raycronjob"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/controller/rayservice"
	"github.com/manta-dev/manta/internal/metawrite"
	"github.com/manta-dev/manta/internal/metrics"
)

// The API groups and controllers the operator runs. Each controller package exposes a constructor and
// SetupWithManager; this is the one list that wires them in.
func init() {
	schemeAdders = append(schemeAdders, rayv1.AddToScheme, mantav1alpha1.AddToScheme)
	setups = append(setups,
		func(mgr ctrl.Manager, o Options) error {
			pods, err := metawrite.NewPods(mgr.GetConfig(), mgr.GetHTTPClient())
			if err != nil {
				return fmt.Errorf("pod creator: %w", err)
			}
			status, err := metawrite.NewRayClusters(mgr.GetConfig(), mgr.GetHTTPClient())
			if err != nil {
				return fmt.Errorf("RayCluster status writer: %w", err)
			}
			return raycluster.NewReconciler(mgr, raycluster.Options{
				DefaultPodTemplate:      o.DefaultPodTemplate,
				ClusterDomain:           o.ClusterDomain,
				MaxConcurrentReconciles: o.ReconcileConcurrency,
				NoRedisCleanup:          o.NoRedisCleanup,
				PodCreator:              pods,
				StatusWriter:            status,
			}).SetupWithManager(mgr)
		},
		func(mgr ctrl.Manager, o Options) error {
			return rayjob.NewReconciler(mgr, o.RayClients, rayjob.Options{
				ClusterDomain:           o.ClusterDomain,
				MaxConcurrentReconciles: o.ReconcileConcurrency,
			}).SetupWithManager(mgr)
		},
		func(mgr ctrl.Manager, o Options) error {
			return raycronjob.NewReconciler(mgr, raycronjob.Options{MaxConcurrentReconciles: o.ReconcileConcurrency}).SetupWithManager(mgr)
		},
		func(mgr ctrl.Manager, o Options) error {
			r, err := rayservice.NewReconciler(mgr, rayservice.Options{
				RayClients:              o.RayClients,
				MaxConcurrentReconciles: o.ReconcileConcurrency,
			})
			if err != nil {
				return err
			}
			return r.SetupWithManager(mgr)
		},
		func(mgr ctrl.Manager, o Options) error {
			policy, err := o.imagePullPolicy()
			if err != nil {
				return err
			}
			r, err := imagepulljob.NewReconciler(mgr, imagepulljob.Options{
				PullerImage:             o.PullerImage,
				MaxConcurrentReconciles: o.ReconcileConcurrency,
				Policy:                  policy,
			})
			if err != nil {
				return err
			}
			if err := r.SetupWithManager(mgr); err != nil {
				return err
			}
			return imagepulljob.NewPrepullReconciler(mgr, r, imagepulljob.PrepullOptions{}).SetupWithManager(mgr)
		},
		// KubeRay's kuberay_*_info and kuberay_*_condition_* series of the kinds above, from the operator's cache.
		func(mgr ctrl.Manager, _ Options) error {
			return metrics.Setup(mgr, metrics.RayClusters, metrics.RayJobs, metrics.RayServices)
		},
	)
}
