package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
)

// BenchmarkImagePullJob pulls one image onto 1,000 fake nodes, 50 at a time, and measures the time until the job
// completes and the operator's API writes. kwok plays the puller pods with the ImagePullJob package's stages: a
// puller pod runs, then exits 0.
func BenchmarkImagePullJob(b *testing.B) {
	const nodes, parallelism = 1000, 50
	requireKinds(b, mantav1alpha1.GroupVersion.WithKind("ImagePullJob"))
	e := startEnv(b, 30*time.Minute, devcluster.Options{
		Pools:       []devcluster.NodePool{{Name: "pull", Count: nodes, CPU: "8", Memory: "32Gi", Pods: 110}},
		ExtraStages: [][]byte{devcluster.PullerStages},
	})
	const ns = "bench-pull"
	e.createNamespaces(b, ns)
	op := e.startOperator(b, operator.Options{})

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		job := &mantav1alpha1.ImagePullJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pull-%d", i)},
			Spec: mantav1alpha1.ImagePullJobSpec{
				Image:           "rayproject/ray:2.52.0",
				ImagePullPolicy: mantav1alpha1.PullAlways,
				Parallelism:     ptr.To[int32](parallelism),
				CompletionPolicy: mantav1alpha1.CompletionPolicy{
					Type: mantav1alpha1.CompleteAlways,
				},
			},
		}
		before, rec0 := op.calls.snapshot(), reconciles("imagepulljob")
		e.createAll(b, 1, []client.Object{job})
		var last mantav1alpha1.ImagePullJob
		var activeSum, polls int // how full the parallelism was kept, sampled at each poll
		took := waitFor(b, e.ctx, "the ImagePullJob to complete", 20*time.Minute, 250*time.Millisecond, func(ctx context.Context) (bool, string, error) {
			if err := e.cl.Get(ctx, client.ObjectKeyFromObject(job), &last); err != nil {
				return false, "", nil
			}
			s := last.Status
			if s.CompletionTime == nil {
				activeSum += int(s.Active)
				polls++
			}
			return s.CompletionTime != nil, fmt.Sprintf("desired %d, active %d, succeeded %d, failed %d: %s",
				s.Desired, s.Active, s.Succeeded, s.Failed, s.Message), nil
		})
		calls := op.calls.since(before)
		b.StopTimer()
		recs := reconciles("imagepulljob") - rec0
		s := last.Status
		b.ReportMetric(secs(took), "complete-s")
		b.ReportMetric(float64(s.Succeeded)/secs(took), "nodes/s")
		b.ReportMetric(float64(calls.writes()), "writes")
		b.ReportMetric(float64(calls.writes())/nodes, "writes/node")
		b.ReportMetric(float64(calls.count("update", "imagepulljobs.manta.dev/status")+calls.count("patch", "imagepulljobs.manta.dev/status")), "status-writes")
		b.ReportMetric(recs, "reconciles")
		meanActive := float64(activeSum) / float64(max(polls, 1))
		b.ReportMetric(meanActive, "mean-active")
		b.Logf("ImagePullJob over %d nodes, parallelism %d: complete in %.1fs (%.0f nodes/s, %.1f nodes pulling on average); desired %d, succeeded %d, failed %d; %q",
			nodes, parallelism, secs(took), float64(s.Succeeded)/secs(took), meanActive, s.Desired, s.Succeeded, s.Failed, s.Message)
		b.Logf("  operator: %d requests, %d writes (%.2f per node): %d pod creates, %d pod deletes, %d job status writes; %.0f reconciles",
			calls.total(), calls.writes(), float64(calls.writes())/nodes, calls.count("create", "pods"),
			calls.count("delete", "pods")+calls.count("deletecollection", "pods"),
			calls.count("update", "imagepulljobs.manta.dev/status")+calls.count("patch", "imagepulljobs.manta.dev/status"), recs)
		detailf(b, "operator API requests from create until complete:\n%s", calls)
		if s.Desired != nodes || s.Succeeded != nodes {
			b.Errorf("status desired %d, succeeded %d; want %d each", s.Desired, s.Succeeded, nodes)
		}
		b.StartTimer()
	}
}
