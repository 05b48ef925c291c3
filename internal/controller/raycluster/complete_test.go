package raycluster

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	crevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/testutil"
)

// clusterPod is a pod of cluster rc (label and controller reference), Running and Ready or not.
func clusterPod(name string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "1", Labels: map[string]string{rayv1.LabelCluster: "rc"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc", Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.18.0.9", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func TestCompletesCluster(t *testing.T) {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		state rayv1.ClusterState
		ready int32 // the status's readyWorkerReplicas
		pods  []*corev1.Pod
		want  bool
	}{
		{"the last of three pods ready", "", 0, []*corev1.Pod{clusterPod("head", true), clusterPod("w1", true), clusterPod("w2", true)}, true},
		{"a worker not ready yet", "", 0, []*corev1.Pod{clusterPod("head", true), clusterPod("w1", true), clusterPod("w2", false)}, false},
		{"a worker not created yet", "", 0, []*corev1.Pod{clusterPod("head", true), clusterPod("w1", true)}, false},
		{"the last worker of a scale-up", rayv1.Ready, 1, []*corev1.Pod{clusterPod("head", true), clusterPod("w1", true), clusterPod("w2", true)}, true},
		{"the status says it already", rayv1.Ready, 2, []*corev1.Pod{clusterPod("head", true), clusterPod("w1", true), clusterPod("w2", true)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := testutil.MakeRayCluster("ns", "rc").Workers("small", 2).Obj()
			rc.Status.State, rc.Status.ReadyWorkerReplicas = tc.state, tc.ready
			objs := []client.Object{rc}
			for _, p := range tc.pods {
				objs = append(objs, p)
			}
			cl := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&corev1.Pod{}, clusterpods.Index, clusterpods.IndexValue).WithObjects(objs...).Build()
			r := newReconciler(cl, cl, nil, Options{})
			if got := r.completesCluster(ctx, tc.pods[len(tc.pods)-1]); got != tc.want {
				t.Errorf("completesCluster = %v, want %v", got, tc.want)
			}
		})
	}
}

// delays records the delay of every add to a priority queue.
type delays struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	after []time.Duration
}

func (d *delays) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	d.after = append(d.after, o.After)
	d.PriorityQueue.AddWithOpts(o, items...)
}

func (d *delays) Add(item reconcile.Request) {
	d.after = append(d.after, 0)
	d.PriorityQueue.Add(item)
}

// A pod turning Ready that completes its cluster is enqueued with no delay; one that does not waits podBatch, as does
// any other progress; with the batching off, completes is not asked (it reads the cache for nothing).
func TestCompletingPodIsNotBatched(t *testing.T) {
	notReady, ready := clusterPod("w", false), clusterPod("w", true)
	ready.ResourceVersion = "2"
	for _, tc := range []struct {
		name      string
		sw        *optimize.Switches
		completes bool
		wantCalls int
		want      time.Duration
	}{
		{"completes the cluster", nil, true, 1, 0},
		{"others still to come", nil, false, 1, podBatch},
		{"batching off", optimize.Off(optimize.PodEventBatching), true, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &delays{PriorityQueue: priorityqueue.New[reconcile.Request]("test")}
			defer q.ShutDown()
			calls := 0
			h := ownerHandler(true, tc.sw, func(_ context.Context, p *corev1.Pod) bool {
				calls++
				return tc.completes
			}, nil)
			h.Update(context.Background(), crevent.UpdateEvent{ObjectOld: notReady, ObjectNew: ready}, q)
			if calls != tc.wantCalls || len(q.after) != 1 || q.after[0] != tc.want {
				t.Errorf("completes asked %d times, adds delayed %v; want %d, [%s]", calls, q.after, tc.wantCalls, tc.want)
			}
			if item, _ := q.Get(); item.Name != "rc" {
				t.Errorf("queued %v, want rc", item)
			}
		})
	}
}

// An event of an object whose cluster is not in the cache (deleted before its pods and Services, as a finished
// RayJob's cluster is) is dropped, whatever the event; with gone-cluster-filter off it is a reconcile as before.
func TestGoneClusterFilter(t *testing.T) {
	deleting := clusterPod("w", true)
	deleting.ResourceVersion = "2"
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	for _, tc := range []struct {
		name   string
		sw     *optimize.Switches
		cached bool
		want   int
	}{
		{"cluster cached", optimize.Off(), true, 3},
		{"cluster gone", optimize.Off(), false, 0},
		{"cluster gone, the filter off", optimize.Off(optimize.GoneClusterFilter), false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &delays{PriorityQueue: priorityqueue.New[reconcile.Request]("test")}
			defer q.ShutDown()
			asked := 0
			h := ownerHandler(true, tc.sw, nil, func(_ context.Context, req reconcile.Request) bool {
				asked++
				if req.Name != "rc" {
					t.Errorf("asked about %v, want rc", req)
				}
				return tc.cached
			})
			ctx := context.Background()
			h.Update(ctx, crevent.UpdateEvent{ObjectOld: clusterPod("w", true), ObjectNew: deleting}, q)
			h.Delete(ctx, crevent.DeleteEvent{Object: deleting}, q)
			h.Create(ctx, crevent.CreateEvent{Object: clusterPod("x", false)}, q)
			if len(q.after) != tc.want {
				t.Errorf("%d adds, want %d", len(q.after), tc.want)
			}
			if acted := tc.sw.Count(optimize.GoneClusterFilter); acted != int64(3-tc.want) {
				t.Errorf("gone-cluster-filter acted %d times, want %d", acted, 3-tc.want)
			}
			if on := tc.sw.On(optimize.GoneClusterFilter); on != (asked == 3) || !on && asked != 0 {
				t.Errorf("the cache was asked %d times with the filter on=%v", asked, on)
			}
		})
	}
}
