package raycluster

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestCreateAppliedThenTimedOut: the head pod's create is applied by the API server, then answered 504 (the fault
// proxy's lostAfterCommit), and the cache does not show the pod for a while (its watch was cut). The name was
// generated, so no expectation can name it: a controller that trusts the cache creates a second head on its next
// reconcile. It must instead read the cluster's pods from the API server, wait for the cache, and create the head
// once; the workers follow.
func TestCreateAppliedThenTimedOut(t *testing.T) {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	rc := testutil.MakeRayCluster("ns", "rc").Workers("small", 2).Obj()
	rc.UID = "uid-rc"
	var mu sync.Mutex
	lost := false
	// unseen are the pods the cache does not show yet.
	unseen := map[string]bool{}
	raw := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&corev1.Pod{}, clusterpods.Index, clusterpods.IndexValue).
		WithObjects(rc).WithStatusSubresource(rc).Build()
	cached := interceptor.NewClient(raw, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if _, pod := obj.(*corev1.Pod); pod && !lost {
				lost = true
				unseen[obj.GetName()] = true
				return apierrors.NewTimeoutError("injected: the write may have happened", 0)
			}
			return nil
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if pods, ok := list.(*corev1.PodList); ok {
				mu.Lock()
				defer mu.Unlock()
				kept := pods.Items[:0]
				for _, p := range pods.Items {
					if !unseen[p.Name] {
						kept = append(kept, p)
					}
				}
				pods.Items = kept
			}
			return nil
		},
	})
	r := newReconciler(cached, raw, events.NewFakeRecorder(100), Options{MaxParallelWrites: 4, ResyncPeriod: time.Minute,
		StatusWriter: reconcile.ClientStatus(raw), CreateBackoffBase: time.Nanosecond, CreateBackoffMax: time.Nanosecond})
	heads := func() int {
		list := &corev1.PodList{}
		if err := raw.List(context.Background(), list, client.MatchingLabels{rayv1.LabelNodeType: rayv1.NodeTypeHead}); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	step := func() {
		t.Helper()
		// Errors are the injected ones; what counts is what exists afterwards.
		_, _ = r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "rc"}})
	}
	// The head create is lost, then two reconciles run while the cache still misses its pod.
	for i := range 3 {
		step()
		if n := heads(); n != 1 {
			t.Fatalf("after reconcile %d with the head's create answered 504 and unseen by the cache: %d head pods; want 1", i+1, n)
		}
	}
	mu.Lock()
	clear(unseen) // the watch catches up
	mu.Unlock()
	for range 3 {
		step()
	}
	list := &corev1.PodList{}
	if err := raw.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	if n := heads(); n != 1 || len(list.Items) != 3 {
		t.Fatalf("%d pods, %d heads once the cache caught up; want a head and 2 workers", len(list.Items), n)
	}
}
