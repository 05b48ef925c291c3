package envtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// Against a real API server: a RayCluster watch through the operator's transport (the manager's config) receives
// each event a plain watch does, without managedFields and otherwise equal, and the events were pruned on the way.
func TestRayClusterWatchPruned(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	sw := optimize.Off()
	mgr, err := operator.NewManager(cfg, operator.Options{Optimizations: sw})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watchClusters := func(cfg *rest.Config) watch.Interface {
		c, err := client.NewWithWatch(cfg, client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			t.Fatal(err)
		}
		w, err := c.Watch(ctx, &rayv1.RayClusterList{}, client.InNamespace("default"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w
	}
	pruned, plain := watchClusters(mgr.GetConfig()), watchClusters(cfg)
	before := sw.Count(optimize.CRWatchPruning)

	// Three creates and a status update of each: six events.
	const n = 3
	for i := range n {
		rc := testutil.MakeRayCluster("default", fmt.Sprintf("rc-%d", i)).Workers("small", 1).Label("a", "b").Obj()
		if err := cl.Create(ctx, rc); err != nil {
			t.Fatal(err)
		}
		rc.Status.State = rayv1.Ready
		rc.Status.DesiredWorkerReplicas = 1
		if err := cl.Status().Update(ctx, rc); err != nil {
			t.Fatal(err)
		}
	}
	next := func(w watch.Interface, which string) (watch.EventType, *rayv1.RayCluster) {
		t.Helper()
		select {
		case ev := <-w.ResultChan():
			rc, ok := ev.Object.(*rayv1.RayCluster)
			if !ok {
				t.Fatalf("%s watch: %s event of %T: %v", which, ev.Type, ev.Object, ev.Object)
			}
			return ev.Type, rc
		case <-ctx.Done():
			t.Fatalf("%s watch: no event: %v", which, ctx.Err())
		}
		return "", nil
	}
	for i := range 2 * n {
		wantType, want := next(plain, "plain")
		gotType, got := next(pruned, "pruned")
		if len(want.ManagedFields) == 0 {
			t.Fatalf("event %d: the plain watch's %s has no managedFields: nothing to prune", i, want.Name)
		}
		want.ManagedFields = nil
		if gotType != wantType {
			t.Errorf("event %d: %s, want %s", i, gotType, wantType)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("event %d (-plain without managedFields +pruned):\n%s", i, diff)
		}
	}
	if got := sw.Count(optimize.CRWatchPruning) - before; got != 2*n {
		t.Errorf("%d events pruned, want %d", got, 2*n)
	}
}
