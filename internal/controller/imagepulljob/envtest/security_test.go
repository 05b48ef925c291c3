package envtest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
)

// TestSecurityImagePullEnvtest: with the operator's policy, a job that selects every node, tolerates every taint and
// asks for a system priority class pulls only on the allowed untainted nodes, with the operator's priority class,
// and says how many nodes it left out.
func TestSecurityImagePullEnvtest(t *testing.T) {
	e := startEnvWith(t, imagepulljob.Options{RetryBackoff: 200 * time.Millisecond, Policy: imagepulljob.Policy{
		NodeSelector: labels.SelectorFromSet(labels.Set{"pool": "pullers"}), PriorityClassName: "image-pullers"}})
	ctx := context.Background()
	if err := e.cl.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "image-pullers"}, Value: -10}); err != nil {
		t.Fatal(err)
	}
	e.addNode(t, "sec-a", map[string]string{"pool": "pullers"})
	e.addNode(t, "sec-b", map[string]string{"pool": "pullers"})
	e.addNode(t, "sec-other", map[string]string{"pool": "other"})
	e.addNode(t, "sec-gpu", map[string]string{"pool": "pullers"})
	gpu := &corev1.Node{}
	if err := e.cl.Get(ctx, client.ObjectKey{Name: "sec-gpu"}, gpu); err != nil {
		t.Fatal(err)
	}
	gpu.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	if err := e.cl.Update(ctx, gpu); err != nil {
		t.Fatal(err)
	}

	ns := e.namespace(t)
	job := newJob(ns, "everywhere", "example/app:v1")
	job.Spec.ImagePullPolicy = mantav1alpha1.PullAlways
	job.Spec.Parallelism = ptr.To[int32](10)
	job.Spec.PriorityClassName = "system-node-critical"
	if err := e.cl.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	got := e.waitJob(t, client.ObjectKeyFromObject(job), "completion", completed)
	if got.Status.Desired != 2 || got.Status.Succeeded != 2 || !cmp.Equal(got.Status.SucceededNodes, []string{"sec-a", "sec-b"}) {
		t.Errorf("status %+v: want sec-a and sec-b only", got.Status)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, imagepulljob.ConditionNodesExcluded)
	if want := (imagepulljob.Excluded{OutsideSelector: 1, Tainted: 1}).Message(); c == nil || c.Message != want {
		t.Errorf("NodesExcluded condition %+v", c)
	}
	_, perNode := e.kubelet.stats(got.UID)
	if !cmp.Equal(sets.KeySet(perNode), sets.New("sec-a", "sec-b")) {
		t.Errorf("pullers ran on %v, want sec-a and sec-b", perNode)
	}
	pods := e.kubelet.pods(got.UID)
	if len(pods) != 2 {
		t.Errorf("%d puller pods seen, want 2", len(pods))
	}
	for _, p := range pods {
		// The DefaultTolerationSeconds admission plugin adds its not-ready/unreachable tolerations; nothing else.
		extra := slices.DeleteFunc(slices.Clone(p.Spec.Tolerations), func(t corev1.Toleration) bool {
			return (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable) && t.TolerationSeconds != nil
		})
		if p.Spec.PriorityClassName != "image-pullers" || len(extra) != 0 {
			t.Errorf("puller %s: priority class %q, tolerations %+v; want image-pullers and none beyond Kubernetes' own", p.Name, p.Spec.PriorityClassName, extra)
		}
	}
}
