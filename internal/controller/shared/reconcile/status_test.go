package reconcile

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestClientStatus(t *testing.T) {
	ctx := context.Background()
	created := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(created).WithStatusSubresource(&corev1.Pod{}).Build()
	w := ClientStatus(cl)

	p := &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(created), p); err != nil {
		t.Fatal(err)
	}
	before := p.ResourceVersion
	p.Status.Phase = corev1.PodRunning
	p.Spec.NodeName = "ignored" // the status subresource writes the status alone
	if err := w.UpdateStatus(ctx, p); err != nil {
		t.Fatal(err)
	}
	stored := &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(created), stored); err != nil {
		t.Fatal(err)
	}
	if p.ResourceVersion == before || p.ResourceVersion != stored.ResourceVersion {
		t.Fatalf("resourceVersion after the write %s, want the stored %s (before %s)", p.ResourceVersion, stored.ResourceVersion, before)
	}
	if stored.Status.Phase != corev1.PodRunning || stored.Spec.NodeName != "" {
		t.Fatalf("stored %+v, %+v; want the status written and the spec left", stored.Status, stored.Spec)
	}

	stale := stored.DeepCopy()
	stale.ResourceVersion = before
	stale.Status.Phase = corev1.PodFailed
	if err := w.UpdateStatus(ctx, stale); !apierrors.IsConflict(err) {
		t.Fatalf("write at a stale resourceVersion: %v, want Conflict", err)
	}
}
