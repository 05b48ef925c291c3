package raycluster

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

// worker is a pod of group "small" with replica index i, created age ago, Running and Ready unless changed.
func worker(name string, i int, age time.Duration, mutate ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).Add(-age)),
			Labels: map[string]string{rayv1.LabelNodeType: rayv1.NodeTypeWorker, rayv1.LabelGroup: "small", rayv1.LabelReplicaIndex: strconv.Itoa(i)}},
		Spec:   corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "ray"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, m := range mutate {
		m(&p)
	}
	return p
}

func notReady(p *corev1.Pod) { p.Status.Conditions = nil }
func failed(p *corev1.Pod)   { p.Status.Phase = corev1.PodFailed }
func host(replica string, h int) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Labels[rayv1.LabelReplicaName] = replica
		p.Labels[rayv1.LabelHostIndex] = strconv.Itoa(h)
	}
}

// planNames is a plan as names, for comparing.
type planNames struct {
	Named, Dead, Surplus []string
	Create               []clusterbuild.Replica
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestPlanGroup(t *testing.T) {
	tests := []struct {
		name    string
		cluster func(*testutil.RayClusterWrapper) *testutil.RayClusterWrapper
		group   func(*rayv1.WorkerGroupSpec)
		pods    []corev1.Pod
		// noIndexing: RayMultiHostIndexing off.
		noIndexing bool
		want       planNames
	}{
		{name: "new group: every replica created, indexes from 0",
			want: planNames{Create: []clusterbuild.Replica{{Index: 0, Name: "small-r1"}, {Index: 1, Name: "small-r2"}, {Index: 2, Name: "small-r3"}}}},
		{name: "in line: nothing to do",
			pods: []corev1.Pod{worker("a", 0, time.Hour), worker("b", 1, time.Hour), worker("c", 2, time.Hour)}},
		{name: "a missing replica takes the lowest free index",
			pods: []corev1.Pod{worker("a", 0, time.Hour), worker("c", 2, time.Hour)},
			want: planNames{Create: []clusterbuild.Replica{{Index: 1, Name: "small-r1"}}}},
		{name: "pods of other groups and the head are not the group's",
			pods: []corev1.Pod{worker("a", 0, time.Hour), worker("b", 1, time.Hour), worker("c", 2, time.Hour),
				worker("other", 0, time.Hour, func(p *corev1.Pod) { p.Labels[rayv1.LabelGroup] = "big" }),
				worker("head", 0, time.Hour, func(p *corev1.Pod) { p.Labels[rayv1.LabelNodeType] = rayv1.NodeTypeHead })}},
		{name: "a terminated pod is deleted and replaced, its index reused",
			pods: []corev1.Pod{worker("a", 0, time.Hour), worker("b", 1, time.Hour, failed), worker("c", 2, time.Hour)},
			want: planNames{Dead: []string{"b"}, Create: []clusterbuild.Replica{{Index: 1, Name: "small-r1"}}}},
		{name: "workersToDelete goes, and is replaced up to replicas",
			group: func(g *rayv1.WorkerGroupSpec) { g.ScaleStrategy.WorkersToDelete = []string{"c"} },
			pods:  []corev1.Pod{worker("a", 0, time.Hour), worker("b", 1, time.Hour), worker("c", 2, time.Hour)},
			want:  planNames{Named: []string{"c"}, Create: []clusterbuild.Replica{{Index: 2, Name: "small-r1"}}}},
		{name: "scale down without the autoscaler: not ready first, then the newest",
			group: func(g *rayv1.WorkerGroupSpec) { g.Replicas = ptr.To[int32](1) },
			pods:  []corev1.Pod{worker("old", 0, 3*time.Hour), worker("new", 1, time.Hour), worker("unready", 2, 2*time.Hour, notReady)},
			want:  planNames{Surplus: []string{"unready", "new"}}},
		{name: "scale down with the autoscaler: only workersToDelete removes pods",
			cluster: func(w *testutil.RayClusterWrapper) *testutil.RayClusterWrapper { return w.Autoscaling() },
			group:   func(g *rayv1.WorkerGroupSpec) { g.Replicas = ptr.To[int32](1) },
			pods:    []corev1.Pod{worker("a", 0, time.Hour), worker("b", 1, time.Hour)}},
		{name: "suspended group: every replica goes",
			group: func(g *rayv1.WorkerGroupSpec) { g.Suspend = ptr.To(true) },
			pods:  []corev1.Pod{worker("a", 0, time.Hour), worker("b", 1, 2*time.Hour)},
			want:  planNames{Surplus: []string{"a", "b"}}},
		{name: "multi-host: a replica short of a host is replaced whole",
			group: func(g *rayv1.WorkerGroupSpec) { g.Replicas = ptr.To[int32](2); g.NumOfHosts = 2 },
			pods: []corev1.Pod{worker("x0", 0, time.Hour, host("x", 0)), worker("x1", 0, time.Hour, host("x", 1)),
				worker("y0", 1, time.Hour, host("y", 0))},
			want: planNames{Dead: []string{"y0"}, Create: []clusterbuild.Replica{{Index: 1, Name: "small-r1", HostIndex: 0}, {Index: 1, Name: "small-r1", HostIndex: 1}}}},
		{name: "multi-host: workersToDelete naming one host takes its whole replica",
			group: func(g *rayv1.WorkerGroupSpec) {
				g.Replicas = ptr.To[int32](1)
				g.NumOfHosts = 2
				g.ScaleStrategy.WorkersToDelete = []string{"x1"}
			},
			pods: []corev1.Pod{worker("x0", 0, time.Hour, host("x", 0)), worker("x1", 0, time.Hour, host("x", 1))},
			want: planNames{Named: []string{"x0", "x1"}, Create: []clusterbuild.Replica{{Index: 0, Name: "small-r1", HostIndex: 0}, {Index: 0, Name: "small-r1", HostIndex: 1}}}},

		// RayMultiHostIndexing off: every pod on its own, replicas x numOfHosts of them, with no index.
		{name: "indexing off, multi-host: a new group gets replicas x hosts unindexed pods", noIndexing: true,
			group: func(g *rayv1.WorkerGroupSpec) { g.Replicas = ptr.To[int32](2); g.NumOfHosts = 2 },
			want:  planNames{Create: []clusterbuild.Replica{{}, {}, {}, {}}}},
		{name: "indexing off, multi-host: a lost host is replaced alone, its replica kept", noIndexing: true,
			group: func(g *rayv1.WorkerGroupSpec) { g.Replicas = ptr.To[int32](2); g.NumOfHosts = 2 },
			pods: []corev1.Pod{worker("x0", 0, time.Hour, host("x", 0)), worker("x1", 0, time.Hour, host("x", 1)),
				worker("y0", 1, time.Hour, host("y", 0))},
			want: planNames{Create: []clusterbuild.Replica{{}}}},
		{name: "indexing off, multi-host: a terminated host is replaced alone", noIndexing: true,
			group: func(g *rayv1.WorkerGroupSpec) { g.Replicas = ptr.To[int32](1); g.NumOfHosts = 2 },
			pods:  []corev1.Pod{worker("x0", 0, time.Hour, host("x", 0)), worker("x1", 0, time.Hour, host("x", 1), failed)},
			want:  planNames{Dead: []string{"x1"}, Create: []clusterbuild.Replica{{}}}},
		{name: "indexing off, multi-host: workersToDelete takes only the pod it names", noIndexing: true,
			group: func(g *rayv1.WorkerGroupSpec) {
				g.Replicas = ptr.To[int32](1)
				g.NumOfHosts = 2
				g.ScaleStrategy.WorkersToDelete = []string{"x1"}
			},
			pods: []corev1.Pod{worker("x0", 0, time.Hour, host("x", 0)), worker("x1", 0, time.Hour, host("x", 1))},
			want: planNames{Named: []string{"x1"}, Create: []clusterbuild.Replica{{}}}},
		{name: "indexing off, multi-host: scale down deletes pods, not replicas", noIndexing: true,
			group: func(g *rayv1.WorkerGroupSpec) { g.Replicas = ptr.To[int32](1); g.NumOfHosts = 2 },
			pods: []corev1.Pod{worker("x0", 0, 3*time.Hour, host("x", 0)), worker("x1", 0, 3*time.Hour, host("x", 1)),
				worker("y0", 1, time.Hour, host("y", 0))},
			want: planNames{Surplus: []string{"y0"}}},
		{name: "indexing off, single host: a missing worker is created unindexed", noIndexing: true,
			pods: []corev1.Pod{worker("a", 0, time.Hour), worker("c", 2, time.Hour)},
			want: planNames{Create: []clusterbuild.Replica{{}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := testutil.MakeRayCluster("ns", "rc").Workers("small", 3)
			if tc.cluster != nil {
				w = tc.cluster(w)
			}
			c := w.Obj()
			g := &c.Spec.WorkerGroupSpecs[0]
			if tc.group != nil {
				tc.group(g)
			}
			n := 0
			newName := func() string { n++; return fmt.Sprintf("r%d", n) }
			p := planGroup(c, g, slices.Clone(tc.pods), tc.noIndexing, newName)
			got := planNames{Named: names(p.named), Dead: names(p.dead), Surplus: names(p.surplus), Create: p.create}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}
