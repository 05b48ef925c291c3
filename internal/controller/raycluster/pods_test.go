package raycluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/testutil"
)

func TestShouldReplace(t *testing.T) {
	terminated := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}
	}
	running := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	}
	mk := func(policy corev1.RestartPolicy, phase corev1.PodPhase, statuses ...corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{
			Spec:   corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{{Name: "ray"}, {Name: "sidecar"}}},
			Status: corev1.PodStatus{Phase: phase, ContainerStatuses: statuses},
		}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"running", mk(corev1.RestartPolicyAlways, corev1.PodRunning, running("ray")), false},
		{"pending", mk(corev1.RestartPolicyNever, corev1.PodPending), false},
		{"failed", mk(corev1.RestartPolicyAlways, corev1.PodFailed), true},
		{"succeeded", mk(corev1.RestartPolicyAlways, corev1.PodSucceeded), true},
		{"Ray container terminated under Never", mk(corev1.RestartPolicyNever, corev1.PodRunning, terminated("ray"), running("sidecar")), true},
		{"Ray container terminated under Always restarts in place", mk(corev1.RestartPolicyAlways, corev1.PodRunning, terminated("ray"), running("sidecar")), false},
		{"Ray container terminated under OnFailure restarts in place", mk(corev1.RestartPolicyOnFailure, corev1.PodRunning, terminated("ray")), false},
		{"only a sidecar terminated under Never", mk(corev1.RestartPolicyNever, corev1.PodRunning, running("ray"), terminated("sidecar")), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := shouldReplace(tc.pod); got != tc.want {
				t.Errorf("shouldReplace = %v, want %v", got, tc.want)
			}
		})
	}
}

// Worker pods are created in parallel, never more than MaxParallelWrites at once, in batches that start at one
// (slow start), and a failing batch stops the creation.
func TestCreateWorkersBounded(t *testing.T) {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	rc := testutil.MakeRayCluster("ns", "rc").Workers("small", 40).Obj()
	rc.UID = "uid-1"
	var inFlight, peak, calls atomic.Int32
	var mu sync.Mutex
	var failAfter int32 = -1
	cl := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&corev1.Pod{}, clusterpods.Index, clusterpods.IndexValue).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			call := calls.Add(1)
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			fail := failAfter >= 0 && call > failAfter
			mu.Unlock()
			if fail {
				return errors.New("exceeded quota")
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	r := newReconciler(cl, cl, nil, Options{MaxParallelWrites: 4})
	key := types.NamespacedName{Namespace: "ns", Name: "rc"}
	reps := make([]clusterbuild.Replica, 40)
	for i := range reps {
		reps[i] = clusterbuild.Replica{Index: i}
	}
	rn := &run{c: rc, key: key}
	if err := r.createWorkers(context.Background(), rn, &rc.Spec.WorkerGroupSpecs[0], clusterbuild.PodOptions{}, reps); err != nil {
		t.Fatal(err)
	}
	list := &corev1.PodList{}
	if err := cl.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 40 {
		t.Errorf("%d pods created, want 40", len(list.Items))
	}
	if p := peak.Load(); p > 4 || p < 2 {
		t.Errorf("peak of %d creates in flight, want between 2 and 4", p)
	}

	// The first batch is one pod: a create that fails costs one request, not MaxParallelWrites.
	calls.Store(0)
	mu.Lock()
	failAfter = 0
	mu.Unlock()
	rn = &run{c: rc, key: key}
	if err := r.createWorkers(context.Background(), rn, &rc.Spec.WorkerGroupSpecs[0], clusterbuild.PodOptions{}, reps); err == nil {
		t.Fatal("no error from failing creates")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d create requests after the first failed, want 1", n)
	}
	if rn.obs.failure == nil || rn.obs.failure.reason != "FailedCreateWorkerPod" {
		t.Errorf("failure %+v", rn.obs.failure)
	}
}

// A status write that loses a race (the autoscaler wrote the RayCluster meanwhile) does not swallow the events of
// the pods and Services the reconcile did create.
func TestEventsSurviveStatusConflict(t *testing.T) {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	rc := testutil.MakeRayCluster("ns", "rc").Workers("small", 1).Obj()
	cl := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&corev1.Pod{}, clusterpods.Index, clusterpods.IndexValue).WithObjects(rc).WithStatusSubresource(rc).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				return apierrors.NewConflict(schema.GroupResource{Group: "ray.io", Resource: "rayclusters"}, obj.GetName(), errors.New("changed"))
			},
		}).Build()
	rec := events.NewFakeRecorder(20)
	r := newReconciler(cl, cl, rec, Options{MaxParallelWrites: 4, ResyncPeriod: time.Minute})
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "rc"}})
	if err != nil || res.RequeueAfter != time.Second {
		t.Fatalf("Reconcile = %+v, %v; want a requeue after 1s", res, err)
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	for _, reason := range []string{"CreatedService", "CreatedHeadPod", "CreatedWorkerPod"} {
		if !slices.ContainsFunc(got, func(e string) bool { return strings.Contains(e, reason) }) {
			t.Errorf("no %s event in %q", reason, got)
		}
	}
}

// clearWorkersToDelete writes a copy of the spec it was handed: read in place from the cache
// (reconcile.UnaliasRayClusterSharingSpec), the cached cluster keeps its workersToDelete until the API server's
// answer replaces it, while the stored cluster and the reconcile's copy have it cleared.
func TestClearWorkersToDeleteLeavesTheSharedSpec(t *testing.T) {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	rc := testutil.MakeRayCluster("ns", "rc").Workers("small", 1).Obj()
	rc.Spec.WorkerGroupSpecs[0].ScaleStrategy.WorkersToDelete = []string{"gone-worker"}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&corev1.Pod{}, clusterpods.Index, clusterpods.IndexValue).WithObjects(rc).Build()
	r := newReconciler(cl, cl, events.NewFakeRecorder(10), Options{})
	key := types.NamespacedName{Namespace: "ns", Name: "rc"}
	cached := &rayv1.RayCluster{}
	if err := cl.Get(context.Background(), key, cached); err != nil {
		t.Fatal(err)
	}
	c := *cached
	reconcile.UnaliasRayClusterSharingSpec(&c)
	if err := r.clearWorkersToDelete(context.Background(), newRun(&c, key)); err != nil {
		t.Fatal(err)
	}
	if got := cached.Spec.WorkerGroupSpecs[0].ScaleStrategy.WorkersToDelete; !slices.Equal(got, []string{"gone-worker"}) {
		t.Errorf("the cached cluster's workersToDelete = %q, want it untouched", got)
	}
	stored := &rayv1.RayCluster{}
	if err := cl.Get(context.Background(), key, stored); err != nil {
		t.Fatal(err)
	}
	if w := stored.Spec.WorkerGroupSpecs[0].ScaleStrategy.WorkersToDelete; len(w) != 0 || len(c.Spec.WorkerGroupSpecs[0].ScaleStrategy.WorkersToDelete) != 0 {
		t.Errorf("workersToDelete stored %q, in the reconcile's copy %q; want both cleared", w, c.Spec.WorkerGroupSpecs[0].ScaleStrategy.WorkersToDelete)
	}
}
