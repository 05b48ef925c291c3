package envtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// informerEvent is what an informer's handler saw.
type informerEvent struct {
	Op  string
	Obj *rayv1.RayCluster
}

// recordClusters records every RayCluster event of mgr's cache (the operator's real one).
func recordClusters(t *testing.T, ctx context.Context, c cache.Cache) (func() []informerEvent, toolscache.ResourceEventHandlerRegistration) {
	t.Helper()
	inf, err := c.GetInformer(ctx, &rayv1.RayCluster{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []informerEvent
	add := func(op string, obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, informerEvent{op, obj.(*rayv1.RayCluster).DeepCopy()})
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { add("add", obj) },
		UpdateFunc: func(_, obj any) { add("update", obj) },
		DeleteFunc: func(obj any) { add("delete", obj) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() []informerEvent {
		mu.Lock()
		defer mu.Unlock()
		return append([]informerEvent(nil), seen...)
	}, reg
}

// Against a real API server: the operator's RayCluster informer (its manager's cache) sees each create, update and
// delete the same with cr-watch-decoding on as with it off, and with it on the watch's events were decoded by
// crWatchDecoder.
func TestRayClusterInformerDecoded(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	ns := "crdecode"
	if err := cl.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	on, off := optimize.Off(), optimize.Off(optimize.CRWatchDecoding)
	var seen [2]func() []informerEvent
	for i, sw := range []*optimize.Switches{on, off} {
		mgr, err := operator.NewManager(cfg, operator.Options{WatchNamespaces: []string{ns}, SkipNameValidation: true, Optimizations: sw})
		if err != nil {
			t.Fatal(err)
		}
		ctx := testutil.RunManager(t, mgr)
		seen[i], _ = recordClusters(t, ctx, mgr.GetCache())
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			t.Fatal("cache not synced")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 3
	for i := range n {
		rc := testutil.MakeRayCluster(ns, fmt.Sprintf("rc-%d", i)).Workers("small", 1).Label("a", "b").Obj()
		rc.Annotations = map[string]string{"note": "héllo \"q\" ☃"}
		if err := cl.Create(ctx, rc); err != nil {
			t.Fatal(err)
		}
		rc.Status.State = rayv1.Ready
		rc.Status.DesiredWorkerReplicas = 1
		if err := cl.Status().Update(ctx, rc); err != nil {
			t.Fatal(err)
		}
		// A spec change raises the generation: its spec is decoded, not shared.
		rc.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](2)
		if err := cl.Update(ctx, rc); err != nil {
			t.Fatal(err)
		}
		if err := cl.Delete(ctx, rc); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, time.Minute, "both informers saw every delete", func() (bool, string) {
		a, b := seen[0](), seen[1]()
		return count(a, "delete") == n && count(b, "delete") == n, fmt.Sprintf("%d and %d events", len(a), len(b))
	})
	got, want := seen[0](), seen[1]()
	if len(got) != 4*n {
		t.Errorf("%d events, want %d", len(got), 4*n)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("informer events (-off +on):\n%s", diff)
	}
	if on.Count(optimize.CRWatchDecoding) < 4*n {
		t.Errorf("cr-watch-decoding on decoded %d events, want at least %d", on.Count(optimize.CRWatchDecoding), 4*n)
	}
	if c := off.Count(optimize.CRWatchDecoding); c != 0 {
		t.Errorf("cr-watch-decoding off decoded %d events", c)
	}
	// The status write and the delete took the cached spec; the spec change did not.
	if c := on.Count(optimize.CRSpecSharing); c != 2*n {
		t.Errorf("cr-spec-sharing shared %d specs, want %d", c, 2*n)
	}
}

func count(evs []informerEvent, op string) int {
	n := 0
	for _, e := range evs {
		if e.Op == op {
			n++
		}
	}
	return n
}
