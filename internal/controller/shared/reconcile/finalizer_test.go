package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

const testFinalizer = "manta.dev/test"

// A finalizer write touches only the metadata, and only when the finalizer list changes; one made from a copy the
// object has moved past is ErrObjectChanged, which Finish turns into a quiet look again; a gone object is no error.
func TestFinalizerWrites(t *testing.T) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"k": "v"}}
	var patches int
	cl := fake.NewClientBuilder().WithObjects(cm).WithInterceptorFuncs(interceptPatches(&patches)).Build()
	read := func() *corev1.ConfigMap {
		got := &corev1.ConfigMap{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	stale := read()
	obj := read()
	obj.Data["k"] = "local change, not to be written"
	if err := AddFinalizer(ctx, cl, obj, testFinalizer); err != nil {
		t.Fatal(err)
	}
	if got := read(); !slices.Contains(got.Finalizers, testFinalizer) || got.Data["k"] != "v" {
		t.Errorf("after AddFinalizer: finalizers %v, data %v; want the finalizer and the data untouched", got.Finalizers, got.Data)
	}
	if err := AddFinalizer(ctx, cl, read(), testFinalizer); err != nil || patches != 1 {
		t.Errorf("AddFinalizer of a present finalizer: %v, %d patches; want nil and no new patch", err, patches)
	}

	err := RemoveFinalizer(ctx, cl, stale, "other")
	if err != nil || patches != 1 {
		t.Errorf("RemoveFinalizer of an absent finalizer: %v, %d patches; want nil and no patch", err, patches)
	}
	stale.Finalizers = append(stale.Finalizers, testFinalizer)
	err = RemoveFinalizer(ctx, cl, stale, testFinalizer)
	if !errors.Is(err, ErrObjectChanged) {
		t.Fatalf("RemoveFinalizer from a stale copy: %v, want ErrObjectChanged", err)
	}
	if res, ferr := (&Result{}).Finish(events.NewFakeRecorder(1), cm, err, nil); ferr != nil || res.RequeueAfter != ConflictRequeue {
		t.Errorf("Finish of ErrObjectChanged: %v, %v; want a requeue after ConflictRequeue and no error", res, ferr)
	}
	other := errors.New("boom")
	if _, ferr := (&Result{}).Finish(events.NewFakeRecorder(1), cm, errors.Join(err, other), nil); !errors.Is(ferr, other) {
		t.Errorf("Finish of ErrObjectChanged joined with another error: %v, want the other error kept", ferr)
	}
	if _, ferr := (&Result{}).Finish(events.NewFakeRecorder(1), cm, fmt.Errorf("wrapped: %w", err), nil); ferr != nil {
		t.Errorf("Finish of a wrapped ErrObjectChanged: %v, want no error", ferr)
	}

	if err := RemoveFinalizer(ctx, cl, read(), testFinalizer); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got.Finalizers) != 0 {
		t.Errorf("after RemoveFinalizer: %v", got.Finalizers)
	}
	gone := read()
	if err := cl.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if err := AddFinalizer(ctx, cl, gone, testFinalizer); err != nil {
		t.Errorf("AddFinalizer on a deleted object: %v, want nil", err)
	}
}

// interceptPatches counts the patches sent.
func interceptPatches(n *int) interceptor.Funcs {
	return interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		*n++
		return c.Patch(ctx, obj, patch, opts...)
	}}
}

// The finalizer patch carries the finalizers and the resourceVersion that guards them, nothing else: the spec a
// reconcile changed in memory is never written with it, and other finalizers stay.
func TestFinalizerPatchBody(t *testing.T) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", Finalizers: []string{"other"}}, Data: map[string]string{"k": "v"}}
	var bodies []string
	cl := fake.NewClientBuilder().WithObjects(cm).WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		b, err := patch.Data(obj)
		if err != nil {
			return err
		}
		bodies = append(bodies, string(b))
		return c.Patch(ctx, obj, patch, opts...)
	}}).Build()
	obj := &corev1.ConfigMap{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cm), obj); err != nil {
		t.Fatal(err)
	}
	rv := obj.ResourceVersion
	obj.Data["k"] = "local"
	if err := AddFinalizer(ctx, cl, obj, testFinalizer); err != nil {
		t.Fatal(err)
	}
	if err := RemoveFinalizer(ctx, cl, obj, "other"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveFinalizer(ctx, cl, obj, testFinalizer); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"metadata":{"finalizers":["other","` + testFinalizer + `"],"resourceVersion":"` + rv + `"}}`,
		`{"metadata":{"finalizers":["` + testFinalizer + `"],"resourceVersion":"` + obj.ResourceVersion + `"}}`,
		`{"metadata":{"finalizers":null,"resourceVersion":"` + obj.ResourceVersion + `"}}`,
	}
	if len(bodies) != 3 || bodies[0] != want[0] || !strings.HasPrefix(bodies[1], `{"metadata":{"finalizers":["`+testFinalizer+`"],`) || !strings.HasPrefix(bodies[2], `{"metadata":{"finalizers":null,`) {
		t.Errorf("patches %q, want %q (resourceVersions as read)", bodies, want)
	}
	got := &corev1.ConfigMap{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Finalizers) != 0 || got.Data["k"] != "v" {
		t.Errorf("stored finalizers %v, data %v; want none and the data untouched", got.Finalizers, got.Data)
	}
}
