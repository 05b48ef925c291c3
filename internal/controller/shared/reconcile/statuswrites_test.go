package reconcile

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestStatusWrites(t *testing.T) {
	ctx := context.Background()
	created := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(created).WithStatusSubresource(&corev1.Pod{}).Build()
	var w StatusWrites // the zero value is ready
	read := func() *corev1.Pod {
		p := &corev1.Pod{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(created), p); err != nil {
			t.Fatal(err)
		}
		return p
	}

	stale := read()
	if err := w.Check(stale); err != nil {
		t.Fatalf("behind before any write: %v", err)
	}
	p := stale.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	if err := w.Update(ctx, ClientStatus(cl), p); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(stale); !errors.Is(err, ErrCacheBehind) {
		t.Fatalf("the version written over: %v, want ErrCacheBehind", err)
	}
	if err := w.Check(read()); err != nil {
		t.Fatalf("the version written: %v", err)
	}
	if err := w.Check(stale); err != nil {
		t.Fatalf("still behind after the cache caught up: %v", err)
	}

	// A write that fails remembers nothing.
	if err := w.Update(ctx, ClientStatus(cl), stale); !apierrors.IsConflict(err) {
		t.Fatalf("write at a stale resourceVersion: %v, want Conflict", err)
	}
	if err := w.Check(stale); err != nil {
		t.Fatalf("behind after a write that failed: %v", err)
	}

	// A write the API server stores nothing for (the status, serialized, equals the stored one) replaced nothing:
	// the cache already shows the version it was made at, and no other comes.
	unchanged := read()
	if err := w.Update(ctx, storesNothing{}, unchanged.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(unchanged); err != nil {
		t.Fatalf("behind the version a write that stored nothing was made at: %v", err)
	}

	fresh := read()
	if err := w.Update(ctx, ClientStatus(cl), fresh.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	w.Forget(client.ObjectKeyFromObject(created))
	if err := w.Check(fresh); err != nil {
		t.Fatalf("behind after the object was forgotten: %v", err)
	}
}

// storesNothing answers a status write as the API server answers one whose status, serialized, equals the stored
// one: success, at the same resourceVersion.
type storesNothing struct{}

func (storesNothing) UpdateStatus(context.Context, client.Object) error { return nil }
