package operator

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/sys/ownpages"
)

// releaseStartupPages gives back, once the caches have synced, the pages of the binary that starting touched
// (startup-pages-release). It runs on every replica, leader or not: a standby holds its caches too.
type releaseStartupPages struct {
	mgr manager.Manager
	sw  *optimize.Switches
}

func (r releaseStartupPages) NeedLeaderElection() bool { return false }

func (r releaseStartupPages) Start(ctx context.Context) error {
	if !r.mgr.GetCache().WaitForCacheSync(ctx) {
		return nil
	}
	log := ctrl.Log.WithName("startup-pages-release")
	n, err := ownpages.Release()
	if err != nil {
		// An older kernel (before 5.4) or a seccomp profile refusing madvise: the pages stay, nothing else changes.
		log.Info("the binary's pages touched while starting stay resident", "error", err.Error())
		return nil
	}
	r.sw.Acted(optimize.StartupPagesRelease)
	log.V(1).Info("released the binary's pages touched while starting", "mappedBytes", n)
	return nil
}
