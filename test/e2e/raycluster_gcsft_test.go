package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestRedisCleanupOnDevCluster deletes a cluster with a Redis-backed GCS on the dev cluster, where the Job
// controller runs the cleanup Job (kwok completes its pod): the operator deletes the pods, runs the Job, and the
// cluster goes once the Job has completed. It reports how long each part took.
func TestRedisCleanupOnDevCluster(t *testing.T) {
	_, cl := devCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := "gcs-ft-redis"
	if err := testutil.CreateNamespace(ctx, cl, ns); err != nil {
		t.Fatal(err)
	}
	rc := testutil.MakeRayCluster(ns, "ft").Workers("small", 1).Obj()
	rc.Spec.WorkerGroupSpecs[0].Template = testutil.RayPodTemplate("ray-worker", "100m", "128Mi")
	rc.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{RedisAddress: "redis:6379"}
	if err := cl.Create(ctx, rc); err != nil {
		t.Fatal(err)
	}
	poll := func(what string, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(100 * time.Millisecond):
			}
		}
		return time.Since(start)
	}
	got := &rayv1.RayCluster{}
	ready := poll("the cluster to be ready with the finalizer", func() bool {
		err := cl.Get(ctx, client.ObjectKeyFromObject(rc), got)
		return err == nil && got.Status.State == rayv1.Ready && slices.Contains(got.Finalizers, clusterbuild.FinalizerGCSFTRedisCleanup)
	})

	if err := cl.Delete(ctx, rc); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{}
	jobKey := client.ObjectKey{Namespace: ns, Name: clusterbuild.RedisCleanupJobName(rc)}
	created := poll("the Redis cleanup Job", func() bool { return cl.Get(ctx, jobKey, job) == nil })
	pods := &corev1.PodList{}
	if err := cl.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelCluster: rc.Name, rayv1.LabelNodeType: rayv1.NodeTypeHead}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d head pods left when the cleanup Job was created", len(pods.Items))
	}
	gone := poll("the cluster to be released", func() bool {
		return apierrors.IsNotFound(cl.Get(ctx, client.ObjectKeyFromObject(rc), &rayv1.RayCluster{}))
	})
	if err := cl.Get(ctx, jobKey, job); err == nil && !slices.ContainsFunc(job.Status.Conditions, func(c batchv1.JobCondition) bool {
		return c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue
	}) {
		t.Errorf("cluster released before its cleanup Job completed: %+v", job.Status)
	}
	t.Logf("GCS-FT cluster: ready in %s; cleanup Job created %s after the delete, cluster gone %s later",
		ready.Round(time.Millisecond), created.Round(time.Millisecond), gone.Round(time.Millisecond))
}
