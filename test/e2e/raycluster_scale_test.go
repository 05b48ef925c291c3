package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestRayCluster100Workers measures how long a RayCluster with 100 workers takes from creation to state ready
// with every pod Running and Ready on the dev cluster, then deletes it and waits for garbage collection.
func TestRayCluster100Workers(t *testing.T) {
	_, cl := devCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := "scale-100"
	if err := testutil.CreateNamespace(ctx, cl, ns); err != nil {
		t.Fatal(err)
	}
	rc := testutil.MakeRayCluster(ns, "big").Workers("workers", 100).Obj()
	rc.Spec.WorkerGroupSpecs[0].MaxReplicas = ptr.To[int32](200)
	rc.Spec.WorkerGroupSpecs[0].Template = testutil.RayPodTemplate("ray-worker", "100m", "128Mi")

	start := time.Now()
	if err := cl.Create(ctx, rc); err != nil {
		t.Fatal(err)
	}
	var created, podsReady time.Duration
	for {
		got := &rayv1.RayCluster{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(rc), got); err != nil {
			t.Fatal(err)
		}
		pods := &corev1.PodList{}
		if err := cl.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelCluster: rc.Name}); err != nil {
			t.Fatal(err)
		}
		if created == 0 && len(pods.Items) == 101 {
			created = time.Since(start)
		}
		ready := 0
		for _, p := range pods.Items {
			if podReady(&p) {
				ready++
			}
		}
		if podsReady == 0 && ready == 101 {
			podsReady = time.Since(start)
		}
		if got.Status.State == rayv1.Ready && ready == 101 && len(pods.Items) == 101 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("not ready: state %q, %d pods, %d ready", got.Status.State, len(pods.Items), ready)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("100-worker RayCluster: all 101 pods created after %s, all Running/Ready after %s, state ready after %s",
		created.Round(time.Millisecond), podsReady.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	if err := cl.Delete(ctx, rc); err != nil {
		t.Fatal(err)
	}
	for {
		pods := &corev1.PodList{}
		if err := cl.List(ctx, pods, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d pods left after deleting the RayCluster", len(pods.Items))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
