package reconcile

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

type recordedStatus struct{ writes int }

func (r *recordedStatus) UpdateStatus(context.Context, client.Object) error { r.writes++; return nil }

// With Unalias, the Lifecycle reads the cached object itself (as the informer cache lends it with
// UnsafeDisableDeepCopy) and the reconcile works on a deep copy: every change Live makes, to maps, slices and
// pointers alike, leaves the cached object as it was, and Live sees what the cache's own copy would have shown it,
// TypeMeta included.
func TestUnaliasLeavesTheCachedObjectAlone(t *testing.T) {
	cached := &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rc", Labels: map[string]string{"team": "a"}, Finalizers: []string{"f"}},
		Spec: rayv1.RayClusterSpec{WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{GroupName: "g", Replicas: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-worker", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}}}}}}},
		Status: rayv1.RayClusterStatus{Conditions: make([]metav1.Condition, 0, 4), ReadyWorkerReplicas: 1},
	}
	before := cached.DeepCopy()
	s := runtime.NewScheme()
	if err := rayv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	var unsafeReads int
	cl := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(_ context.Context, _ client.WithWatch, _ client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			var o client.GetOptions
			o.ApplyOptions(opts)
			if o.UnsafeDisableDeepCopy == nil || !*o.UnsafeDisableDeepCopy {
				t.Errorf("read with a copy")
				cached.DeepCopyInto(obj.(*rayv1.RayCluster))
				return nil
			}
			unsafeReads++
			*obj.(*rayv1.RayCluster) = *cached // what controller-runtime's cache does without its copy
			return nil
		},
	}).Build()
	sw := &recordedStatus{}
	var live int
	life := &Lifecycle[*rayv1.RayCluster, rayv1.RayClusterStatus]{
		Client:   cl,
		Recorder: events.NewFakeRecorder(10),
		New:      func() *rayv1.RayCluster { return &rayv1.RayCluster{} },
		Unalias:  UnaliasRayCluster,
		Live: func(_ context.Context, c *rayv1.RayCluster, _ *rayv1.RayClusterStatus, _ *Result) (StatusStep, error) {
			live++
			want := before.DeepCopy()
			want.TypeMeta = metav1.TypeMeta{APIVersion: "ray.io/v1", Kind: "RayCluster"}
			if !equality.Semantic.DeepEqual(c, want) {
				t.Errorf("Live got %+v, want the cached object with its TypeMeta %+v", c, want)
			}
			c.Labels["team"] = "b"
			c.Finalizers[0] = "g"
			*c.Spec.WorkerGroupSpecs[0].Replicas = 5
			c.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Env[0].Value = "2"
			apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: "HeadPodReady", Status: metav1.ConditionTrue, Reason: "R"})
			c.Status.ReadyWorkerReplicas = 2
			return StatusStep{}, nil
		},
		Status:       func(c *rayv1.RayCluster) *rayv1.RayClusterStatus { return &c.Status },
		CopyStatus:   (*rayv1.RayClusterStatus).DeepCopy,
		StatusWriter: sw,
	}
	if _, err := life.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "rc"}}); err != nil {
		t.Fatal(err)
	}
	if live != 1 || unsafeReads != 1 || sw.writes != 1 {
		t.Fatalf("live %d, unsafe reads %d, status writes %d; want 1 each", live, unsafeReads, sw.writes)
	}
	// The conditions' spare capacity too: an append to a shared slice would write there, unseen by DeepEqual.
	if !equality.Semantic.DeepEqual(cached, before) || cap(cached.Status.Conditions) != 4 || cached.Status.Conditions[:1][0].Type != "" {
		t.Fatalf("the cached object changed: %+v, was %+v", cached, before)
	}
}
