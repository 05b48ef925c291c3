package envtest

import (
	"testing"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// startNamespaced runs a RayCluster controller of its own, with opts, that sees namespace ns only. It stops when t
// ends.
func startNamespaced(t *testing.T, cfg *rest.Config, ns string, opts raycluster.Options) {
	t.Helper()
	mgr := testutil.NewManager(t, cfg, rayPodsOnly, func(o *ctrl.Options) {
		o.Cache.DefaultNamespaces = map[string]cache.Config{ns: {}}
	})
	if err := raycluster.NewReconciler(mgr, opts).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testutil.RunManager(t, mgr)
}
