package reconcile

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func pod(name string, uid types.UID, terminating bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}}
	if terminating {
		p.DeletionTimestamp = &metav1.Time{}
	}
	return p
}

func TestExpectationsCreates(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := NewExpectations[string, int](func() time.Time { return now }, time.Minute)
	if pending, ok := e.Observe("c", nil); !ok || len(pending) != 0 {
		t.Fatalf("nothing expected: pending %v, satisfied %v", pending, ok)
	}
	e.ExpectCreate("c", "a", 1)
	e.ExpectCreate("c", "b", 2)
	e.ExpectCreate("other", "a", 3)
	pending, ok := e.Observe("c", []corev1.Pod{pod("a", "ua", false)})
	if ok || len(pending) != 1 || pending[0] != 2 {
		t.Fatalf("a cached, b not: pending %v, satisfied %v; want [2], false", pending, ok)
	}
	// A cached pod counts as created even when it is already terminating.
	if pending, ok := e.Observe("c", []corev1.Pod{pod("b", "ub", true)}); !ok || len(pending) != 0 {
		t.Fatalf("b cached: pending %v, satisfied %v", pending, ok)
	}
	if _, ok := e.Observe("other", nil); ok {
		t.Fatal("another owner's create was dropped")
	}
	now = now.Add(time.Minute + time.Second)
	if pending, ok := e.Observe("other", nil); !ok || len(pending) != 0 {
		t.Fatalf("a create older than the TTL still counts: pending %v, satisfied %v", pending, ok)
	}
}

func TestExpectationsDeletes(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := NewExpectations[string, struct{}](func() time.Time { return now }, time.Minute)
	if !e.ExpectDelete("c", "u1") {
		t.Fatal("first delete of u1 is not new")
	}
	if e.ExpectDelete("c", "u1") {
		t.Fatal("a delete the cache does not show yet is sent twice")
	}
	alive := []corev1.Pod{pod("p1", "u1", false)}
	if _, ok := e.Observe("c", alive); ok || !e.Outstanding("c") {
		t.Fatal("satisfied while the deleted pod is still alive in the cache")
	}
	// A pod of the same name with another UID is a new pod: it does not keep the delete outstanding.
	if _, ok := e.Observe("c", []corev1.Pod{pod("p1", "u2", false)}); !ok {
		t.Fatal("a new pod of the same name kept the delete of the old one outstanding")
	}
	e.ExpectDelete("c", "u3")
	if _, ok := e.Observe("c", []corev1.Pod{pod("p3", "u3", true)}); !ok {
		t.Fatal("a terminating pod keeps its delete outstanding")
	}
	e.ExpectDelete("c", "u4")
	e.DeleteFailed("c", "u4")
	if !e.ExpectDelete("c", "u4") {
		t.Fatal("a failed delete is not sent again")
	}
	now = now.Add(2 * time.Minute)
	if _, ok := e.Observe("c", []corev1.Pod{pod("p4", "u4", false)}); !ok {
		t.Fatal("a delete older than the TTL still counts")
	}
	if e.Outstanding("c") {
		t.Fatal("outstanding once every expectation was met or lapsed")
	}
	e.ExpectCreate("c", "x", struct{}{})
	if !e.Outstanding("c") {
		t.Fatal("a create just expected is not outstanding")
	}
	e.Forget("c")
	if _, ok := e.Observe("c", nil); !ok || e.Outstanding("c") {
		t.Fatal("Forget left expectations")
	}
}

func TestExpectationsUnsure(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := NewExpectations[string, struct{}](func() time.Time { return now }, time.Minute)
	e.CreateUnsure("c")
	if _, ok := e.Observe("c", nil); ok || !e.Unsure("c") || !e.Outstanding("c") {
		t.Fatal("satisfied while a create's outcome is unknown")
	}
	// The API server lists the pod the lost answer was about (and one terminating, which is not waited for).
	e.Resolve("c", []corev1.Pod{pod("a", "ua", false), pod("b", "ub", true)}, struct{}{})
	if e.Unsure("c") {
		t.Fatal("still unsure once resolved")
	}
	if _, ok := e.Observe("c", nil); ok {
		t.Fatal("satisfied before the cache shows the pod the API server listed")
	}
	if _, ok := e.Observe("c", []corev1.Pod{pod("a", "ua", false)}); !ok {
		t.Fatal("not satisfied once the cache shows it")
	}
	e.CreateUnsure("c")
	now = now.Add(time.Minute + time.Second)
	if _, ok := e.Observe("c", nil); !ok || e.Unsure("c") {
		t.Fatal("an unresolved unknown outcome older than the TTL still counts")
	}
}

func TestCreateOutcomeUnknown(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"504 after commit", apierrors.NewTimeoutError("lost", 0), true},
		{"500", apierrors.NewInternalError(errors.New("boom")), true},
		{"transport", errors.New("connection reset by peer"), true},
		{"429", apierrors.NewTooManyRequests("slow down", 1), false},
		{"409", apierrors.NewConflict(gr, "p", errors.New("changed")), false},
		{"quota", apierrors.NewForbidden(gr, "p", errors.New("exceeded quota")), false},
		{"exists", apierrors.NewAlreadyExists(gr, "p"), false},
	} {
		if got := CreateOutcomeUnknown(tc.err); got != tc.want {
			t.Errorf("%s: CreateOutcomeUnknown = %v, want %v", tc.name, got, tc.want)
		}
	}
}
