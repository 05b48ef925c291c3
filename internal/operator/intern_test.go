package operator

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// decodedCopies is n copies of obj, each decoded from its protobuf bytes, as an informer's are.
func decodedCopies[T any](t *testing.T, obj any, n int) []T {
	t.Helper()
	pb := protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme)
	raw, err := runtimeEncode(pb, obj)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]T, n)
	for i := range out {
		o, _, err := pb.Decode(raw, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = o.(T)
	}
	return out
}

// The cache transforms change no value, and two objects decoded apart share their strings once transformed: the
// labels' and annotations' keys and values, the container names and images, the condition types.
func TestCacheTransformsIntern(t *testing.T) {
	c := benchLikeCluster(3)
	pods := decodedCopies[*corev1.Pod](t, benchLikePod(c, 1), 2)
	want, _ := stripPod(pods[0].DeepCopy())
	keepReadConditions(want.(*corev1.Pod))
	var got [2]*corev1.Pod
	for i, p := range pods {
		o, err := cachePod(p)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = o.(*corev1.Pod)
	}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Fatalf("cachePod changed the pod (-stripped +transformed):\n%s", diff)
	}
	same := func(what, a, b string) {
		t.Helper()
		if a != b || unsafe.StringData(a) != unsafe.StringData(b) {
			t.Errorf("%s: %q and %q not shared", what, a, b)
		}
	}
	a, b := got[0], got[1]
	for k := range a.Labels {
		ka, kb := mapKey(a.Labels, k), mapKey(b.Labels, k)
		same("label key", ka, kb)
		same("label value", a.Labels[k], b.Labels[k])
	}
	for k := range a.Annotations {
		same("annotation key", mapKey(a.Annotations, k), mapKey(b.Annotations, k))
	}
	same("namespace", a.Namespace, b.Namespace)
	same("owner", a.OwnerReferences[0].Name, b.OwnerReferences[0].Name)
	same("container name", a.Spec.Containers[0].Name, b.Spec.Containers[0].Name)
	same("image", a.Spec.Containers[0].Image, b.Spec.Containers[0].Image)
	same("status image", a.Status.ContainerStatuses[0].Image, b.Spec.Containers[0].Image)
	same("condition type", string(a.Status.Conditions[0].Type), string(b.Status.Conditions[0].Type))
	// What is unique to an object is left as it is.
	if unsafe.StringData(a.Name) == unsafe.StringData(b.Name) || unsafe.StringData(string(a.UID)) == unsafe.StringData(string(b.UID)) {
		t.Errorf("a pod's name or UID was interned")
	}

	// A RayCluster decoded from JSON, as client-go decodes custom resources.
	rcs := decodedJSONClusters(t, 2)
	wantRC := rcs[0].DeepCopy()
	for _, rc := range rcs {
		if _, err := cacheObject(rc); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(wantRC, rcs[0]); diff != "" {
		t.Fatalf("cacheObject changed the RayCluster (-decoded +transformed):\n%s", diff)
	}
	h0, h1 := rcs[0].Spec.HeadGroupSpec.Template.Spec.Containers[0], rcs[1].Spec.HeadGroupSpec.Template.Spec.Containers[0]
	same("template image", h0.Image, h1.Image)
	for k := range h0.Resources.Limits {
		same("resource name", string(mapKey(h0.Resources.Limits, k)), string(mapKey(h1.Resources.Limits, k)))
	}
	same("condition reason", rcs[0].Status.Conditions[1].Reason, rcs[1].Status.Conditions[1].Reason)
	// Their templates' ResourceLists are one map each.
	w0, w1 := rcs[0].Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0], rcs[1].Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0]
	for what, pair := range map[string][2]corev1.ResourceList{
		"head limits": {h0.Resources.Limits, h1.Resources.Limits}, "head requests": {h0.Resources.Requests, h1.Resources.Requests},
		"worker limits": {w0.Resources.Limits, w1.Resources.Limits}, "worker requests": {w0.Resources.Requests, w1.Resources.Requests},
	} {
		if reflect.ValueOf(pair[0]).UnsafePointer() != reflect.ValueOf(pair[1]).UnsafePointer() {
			t.Errorf("%s not shared", what)
		}
	}
	if reflect.ValueOf(h0.Resources.Limits).UnsafePointer() == reflect.ValueOf(w0.Resources.Limits).UnsafePointer() {
		t.Errorf("the head's and the workers' limits (2Gi, 1Gi of memory) share a map")
	}
}

// Two ResourceLists equal in value but not in form ("1" and "1000m" of CPU) are not shared: each object keeps its
// own, so what a reader sees (and writes back) is what the API server sent.
func TestShareResourceListExact(t *testing.T) {
	tab := newInternTable(10, 10)
	one := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	milli := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000m")}
	if got := tab.shareResourceList(one); reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(one).UnsafePointer() {
		t.Fatalf("the first list was not taken as the shared one")
	}
	if got := tab.shareResourceList(milli); reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(milli).UnsafePointer() {
		t.Errorf("1000m shared the map of 1: %v", got)
	}
	again := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	if got := tab.shareResourceList(again); reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(one).UnsafePointer() {
		t.Errorf("an equal list was not shared")
	}
}

// Only RayClusters' ResourceLists are shared (the analysis that nothing writes into them is theirs): a Job's
// are interned, not shared.
func TestShareResourceListsOnlyOfRayClusters(t *testing.T) {
	mk := func() *batchv1.Job {
		return &batchv1.Job{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}}}}
	}
	a, b := mk(), mk()
	cacheObject(a)
	cacheObject(b)
	if reflect.ValueOf(a.Spec.Template.Spec.Containers[0].Resources.Limits).UnsafePointer() == reflect.ValueOf(b.Spec.Template.Spec.Containers[0].Resources.Limits).UnsafePointer() {
		t.Errorf("two Jobs share a ResourceList")
	}
}

// mapKey is m's own copy of the key k.
func mapKey[K ~string, V any](m map[K]V, k K) K {
	for mk := range m {
		if mk == k {
			return mk
		}
	}
	panic(fmt.Sprintf("no key %q", k))
}

// A full table starts afresh, and a string is cloned into it, so it never holds on to a larger buffer.
func TestInternTableBounded(t *testing.T) {
	tab := newInternTable(2, 1)
	buf := "abcdef"
	a := tab.str(buf[:3])
	if a != "abc" || unsafe.StringData(a) == unsafe.StringData(buf) {
		t.Errorf("str(%q) = %q, not a clone", buf[:3], a)
	}
	tab.str("x")
	tab.str("y")
	if len(tab.m) != 1 {
		t.Errorf("full table not cleared: %d entries", len(tab.m))
	}
	if tab.str("") != "" || len(tab.m) != 1 {
		t.Errorf("the empty string went into the table")
	}
	tab.shareResourceList(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
	tab.shareResourceList(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")})
	if len(tab.lists) != 1 {
		t.Errorf("full list table not cleared: %d entries", len(tab.lists))
	}
}

func BenchmarkCachePod(b *testing.B) {
	c := benchLikeCluster(3)
	p, _ := stripPod(benchLikePod(c, 1))
	pods := make([]*corev1.Pod, b.N)
	for i := range pods {
		pods[i] = p.(*corev1.Pod).DeepCopy()
	}
	b.ResetTimer()
	for i := range b.N {
		internStrings(pods[i])
	}
}

// The pod cache keeps the Ready and PodScheduled conditions, as they came and in their order, and no others.
func TestCachePodKeepsReadConditions(t *testing.T) {
	p := benchLikePod(benchLikeCluster(1), 0)
	p.Status.Conditions[4].Status, p.Status.Conditions[4].Reason, p.Status.Conditions[4].Message = corev1.ConditionFalse, "Unschedulable", "0/3 nodes"
	want := []corev1.PodCondition{p.Status.Conditions[2], p.Status.Conditions[4]}
	o, _ := cachePod(p)
	if diff := cmp.Diff(want, o.(*corev1.Pod).Status.Conditions); diff != "" {
		t.Errorf("conditions (-want +cached):\n%s", diff)
	}
	if got := cap(o.(*corev1.Pod).Status.Conditions); got != 2 {
		t.Errorf("kept in a slice of capacity %d, want 2", got)
	}
	none := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.ContainersReady}}}}
	if keepReadConditions(none); none.Status.Conditions != nil {
		t.Errorf("no condition read, but %v kept", none.Status.Conditions)
	}
}
