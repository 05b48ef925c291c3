package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
)

// TestOperatorQuietAndScoped runs the two checks of BenchmarkOperatorAPICalls and BenchmarkOperatorMemory that
// must hold at any size, at a small one, in `make test`: with plain (non-Ray) pods in the cluster, the operator's
// pod cache holds only Ray pods, and once its RayClusters are ready it makes no writes while nothing changes.
func TestOperatorQuietAndScoped(t *testing.T) {
	const plainPods, clusters, workers = 20, 2, 1
	e := startEnv(t, 5*time.Minute, devcluster.Options{Nodes: 2, NodeCPU: "32", NodeMemory: "128Gi", NodeMaxPods: 110})
	const plainNS, rayNS = "small-plain", "small-ray"
	e.createNamespaces(t, plainNS, rayNS)
	var objs []client.Object
	for i := range plainPods {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: plainNS, Name: fmt.Sprintf("plain-%d", i), Labels: map[string]string{"app": "plain"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
		})
	}
	e.createAll(t, 8, objs)

	op := e.startOperator(t, operator.Options{})
	var rcs []client.Object
	for j := range clusters {
		rcs = append(rcs, rayCluster(rayNS, fmt.Sprintf("rc-%d", j), "small", workers))
	}
	e.createClustersAndWait(t, op, "small", rcs, 1+workers, 3*time.Minute)

	// A late status write or event after the last cluster turned ready belongs to getting ready, not to the
	// steady state: wait until the operator has processed a later change to every cluster and sent its events.
	e.settle(t, op, "small", time.Minute)
	from := op.calls.snapshot()
	// Nothing changes for the operator: it looks at every cluster again (another metadata-only change) and must
	// write nothing, events included.
	e.settle(t, op, "small", time.Minute)
	if calls := op.calls.since(from); calls.writes() > 0 {
		t.Errorf("the operator wrote %d times while it reconciled every ready cluster again with nothing to change; want 0:\n%s", calls.writes(), calls)
	}

	var all corev1.PodList
	if err := e.cl.List(e.ctx, &all); err != nil {
		t.Fatal(err)
	}
	cached := op.cached(t, context.Background())
	if want := clusters * (1 + workers); cached.pods != want || len(all.Items) < plainPods+want {
		t.Errorf("the operator's cache holds %d pods, want the %d Ray pods only (the cluster has %d pods)", cached.pods, want, len(all.Items))
	}
}
