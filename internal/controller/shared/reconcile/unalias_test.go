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

// UnaliasRayJob and UnaliasRayService give a deep copy of what they were handed (a shallow copy of the cached
// object), with the kind's TypeMeta: a change to any map, slice or pointer of the result leaves the cached object
// as it was.
func TestUnaliasRayJobAndRayService(t *testing.T) {
	job := &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j", Labels: map[string]string{"team": "a"}},
		Spec: rayv1.RayJobSpec{Entrypoint: "python x.py", RayClusterSpec: &rayv1.RayClusterSpec{
			WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{GroupName: "g", Replicas: ptr.To[int32](1)}}}},
		Status: rayv1.RayJobStatus{JobId: "id", Succeeded: ptr.To[int32](0)},
	}
	before := job.DeepCopy()
	j := *job
	UnaliasRayJob(&j)
	if j.TypeMeta != (metav1.TypeMeta{APIVersion: "ray.io/v1", Kind: "RayJob"}) {
		t.Errorf("RayJob TypeMeta %+v", j.TypeMeta)
	}
	j.TypeMeta = metav1.TypeMeta{}
	if !equality.Semantic.DeepEqual(&j, before) {
		t.Errorf("the unaliased RayJob differs: %+v", j)
	}
	j.Labels["team"] = "b"
	*j.Spec.RayClusterSpec.WorkerGroupSpecs[0].Replicas = 3
	*j.Status.Succeeded = 1
	if !equality.Semantic.DeepEqual(job, before) {
		t.Errorf("the cached RayJob changed: %+v", job)
	}

	svc := &rayv1.RayService{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", Annotations: map[string]string{"a": "1"}},
		Spec:       rayv1.RayServiceSpec{ServeConfigV2: "applications: []", RayClusterSpec: rayv1.RayClusterSpec{WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{GroupName: "g"}}}},
		Status:     rayv1.RayServiceStatuses{Conditions: []metav1.Condition{{Type: "Ready"}}},
	}
	beforeSvc := svc.DeepCopy()
	s := *svc
	UnaliasRayService(&s)
	if s.TypeMeta != (metav1.TypeMeta{APIVersion: "ray.io/v1", Kind: "RayService"}) {
		t.Errorf("RayService TypeMeta %+v", s.TypeMeta)
	}
	s.Annotations["a"] = "2"
	s.Spec.RayClusterSpec.WorkerGroupSpecs[0].GroupName = "h"
	s.Status.Conditions[0].Type = "X"
	if !equality.Semantic.DeepEqual(svc, beforeSvc) {
		t.Errorf("the cached RayService changed: %+v", svc)
	}
}

// UnaliasRayJobSharingSpec copies a RayJob's metadata and status as UnaliasRayJob does, and leaves its spec the
// cache's own: a change to the result's labels or status leaves the cached object as it was, and the spec's
// RayClusterSpec is the cached one itself.
func TestUnaliasRayJobSharingSpec(t *testing.T) {
	job := &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j", Labels: map[string]string{"team": "a"}, Finalizers: []string{"f"}},
		Spec: rayv1.RayJobSpec{Entrypoint: "python x.py", RayClusterSpec: &rayv1.RayClusterSpec{
			WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{GroupName: "g", Replicas: ptr.To[int32](1)}}}},
		Status: rayv1.RayJobStatus{JobId: "id", Succeeded: ptr.To[int32](0),
			RayClusterStatus: rayv1.RayClusterStatus{Conditions: []metav1.Condition{{Type: "Ready"}}}},
	}
	before := job.DeepCopy()
	j := *job
	UnaliasRayJobSharingSpec(&j)
	if j.TypeMeta != (metav1.TypeMeta{APIVersion: "ray.io/v1", Kind: "RayJob"}) {
		t.Errorf("RayJob TypeMeta %+v", j.TypeMeta)
	}
	j.TypeMeta = metav1.TypeMeta{}
	if !equality.Semantic.DeepEqual(&j, before) {
		t.Errorf("the unaliased RayJob differs: %+v", j)
	}
	if j.Spec.RayClusterSpec != job.Spec.RayClusterSpec {
		t.Error("the spec's RayClusterSpec was copied, want the cached one read in place")
	}
	j.Labels["team"] = "b"
	j.Finalizers[0] = "g"
	*j.Status.Succeeded = 1
	j.Status.RayClusterStatus.Conditions[0].Type = "X"
	if !equality.Semantic.DeepEqual(job, before) {
		t.Errorf("the cached RayJob changed: %+v", job)
	}
}

// UnaliasRayClusterSharingSpec copies a RayCluster's metadata and status and leaves its spec the cache's own.
func TestUnaliasRayClusterSharingSpec(t *testing.T) {
	rc := &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rc", Labels: map[string]string{"team": "a"}},
		Spec:       rayv1.RayClusterSpec{WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{GroupName: "g", Replicas: ptr.To[int32](1)}}},
		Status:     rayv1.RayClusterStatus{Conditions: []metav1.Condition{{Type: "Ready"}}, ReadyWorkerReplicas: 1},
	}
	before := rc.DeepCopy()
	c := *rc
	UnaliasRayClusterSharingSpec(&c)
	if c.TypeMeta != (metav1.TypeMeta{APIVersion: "ray.io/v1", Kind: "RayCluster"}) {
		t.Errorf("RayCluster TypeMeta %+v", c.TypeMeta)
	}
	c.TypeMeta = metav1.TypeMeta{}
	if !equality.Semantic.DeepEqual(&c, before) {
		t.Errorf("the unaliased RayCluster differs: %+v", c)
	}
	if &c.Spec.WorkerGroupSpecs[0] != &rc.Spec.WorkerGroupSpecs[0] {
		t.Error("the worker groups were copied, want the cached ones read in place")
	}
	c.Labels["team"] = "b"
	c.Status.Conditions[0].Type = "X"
	if !equality.Semantic.DeepEqual(rc, before) {
		t.Errorf("the cached RayCluster changed: %+v", rc)
	}
}
