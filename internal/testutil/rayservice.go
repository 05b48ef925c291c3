package testutil

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// RayServiceWrapper builds RayServices for tests: MakeRayService("ns", "name").ServeConfig(cfg).Obj().
type RayServiceWrapper struct{ rayv1.RayService }

// MakeRayService is a RayService whose cluster is MakeRayCluster's with one worker group "small" of one replica,
// and no Serve config.
func MakeRayService(ns, name string) *RayServiceWrapper {
	return &RayServiceWrapper{rayv1.RayService{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       rayv1.RayServiceSpec{RayClusterSpec: MakeRayCluster(ns, name).Workers("small", 1).Obj().Spec},
	}}
}

// ServeConfig sets the Serve config (serveConfigV2).
func (w *RayServiceWrapper) ServeConfig(yaml string) *RayServiceWrapper {
	w.Spec.ServeConfigV2 = yaml
	return w
}

// ClusterDeletionDelay sets how long an old cluster lives on after an upgrade (rayClusterDeletionDelaySeconds).
func (w *RayServiceWrapper) ClusterDeletionDelay(seconds int32) *RayServiceWrapper {
	w.Spec.RayClusterDeletionDelaySeconds = ptr.To(seconds)
	return w
}

// UpgradeStrategy sets the upgrade strategy's type.
func (w *RayServiceWrapper) UpgradeStrategy(t rayv1.RayServiceUpgradeType) *RayServiceWrapper {
	w.Spec.UpgradeStrategy = &rayv1.RayServiceUpgradeStrategy{Type: ptr.To(t)}
	return w
}

// Cluster edits the cluster spec.
func (w *RayServiceWrapper) Cluster(f func(*rayv1.RayClusterSpec)) *RayServiceWrapper {
	f(&w.Spec.RayClusterSpec)
	return w
}

// Label sets a label on the RayService.
func (w *RayServiceWrapper) Label(k, v string) *RayServiceWrapper {
	metav1.SetMetaDataLabel(&w.ObjectMeta, k, v)
	return w
}

// With applies f, for what no other method sets.
func (w *RayServiceWrapper) With(f func(*rayv1.RayService)) *RayServiceWrapper {
	if f != nil {
		f(&w.RayService)
	}
	return w
}

// Obj returns the RayService.
func (w *RayServiceWrapper) Obj() *rayv1.RayService { return w.RayService.DeepCopy() }
