package reconcile

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
)

func TestRequeueEarliestWinsWithAFloor(t *testing.T) {
	var r Result
	if r.RequeueAfter() != 0 {
		t.Fatalf("zero Result asks for a requeue: %v", r.RequeueAfter())
	}
	r.Requeue(time.Minute)
	r.Requeue(5 * time.Second)
	r.Requeue(time.Hour)
	if got := r.RequeueAfter(); got != 5*time.Second {
		t.Errorf("earliest of 1m, 5s, 1h = %v, want 5s", got)
	}
	r.Requeue(0)
	if got := r.RequeueAfter(); got != MinRequeue {
		t.Errorf("Requeue(0) = %v, want MinRequeue", got)
	}
	r.Requeue(-time.Second)
	if got := r.RequeueAfter(); got != MinRequeue {
		t.Errorf("Requeue(-1s) = %v, want MinRequeue", got)
	}
	r.ForgetRequeue()
	if got := r.RequeueAfter(); got != 0 {
		t.Errorf("after ForgetRequeue: %v", got)
	}
}

func TestMergeKeepsOrderAndEarliestRequeue(t *testing.T) {
	var a, b Result
	a.Eventf("Normal", "A1", "x", "a1")
	a.Eventf("Normal", "A2", "x", "a2")
	a.Requeue(time.Minute)
	b.Eventf("Normal", "B1", "x", "b1")
	b.Requeue(time.Second)
	a.Merge(&b, 1)
	var reasons []string
	for _, e := range a.Events {
		reasons = append(reasons, e.Reason)
	}
	if got := reasons; len(got) != 3 || got[0] != "A1" || got[1] != "B1" || got[2] != "A2" {
		t.Errorf("merged events %v, want [A1 B1 A2]", got)
	}
	if a.RequeueAfter() != time.Second {
		t.Errorf("merged requeue %v, want 1s", a.RequeueAfter())
	}
}

func recorded(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestFinish(t *testing.T) {
	gr := schema.GroupResource{Group: "ray.io", Resource: "rayclusters"}
	conflict := apierrors.NewConflict(gr, "c", errors.New("stale"))
	gone := apierrors.NewNotFound(gr, "c")
	boom := errors.New("boom")
	refused := apierrors.NewForbidden(gr, "c", errors.New("no"))
	cases := []struct {
		name                    string
		reconcileErr, statusErr error
		wantEvents              int // of the two asked: one write event, one status event
		wantAfter               time.Duration
		wantErr                 []error
	}{
		{"all written", nil, nil, 2, 30 * time.Second, nil},
		{"status conflict requeues, no error", nil, conflict, 1, ConflictRequeue, nil},
		{"object gone requeues, no error", nil, gone, 1, ConflictRequeue, nil},
		{"status refused", nil, refused, 1, 0, []error{refused}},
		{"cache behind the last status write: looked at again soon, no error", nil, ErrCacheBehind, 1, CacheLagRequeue, nil},
		{"reconcile error kept over a conflict", boom, conflict, 1, 0, []error{boom}},
		{"reconcile error kept over a cache behind", boom, ErrCacheBehind, 1, 0, []error{boom}},
		{"reconcile error joined with a status error", boom, refused, 1, 0, []error{boom, refused}},
		{"reconcile error, status written", boom, nil, 2, 0, []error{boom}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			var r Result
			r.Eventf(corev1.EventTypeNormal, "Created", "Create", "created pod %s", "p")
			r.StatusEventf(corev1.EventTypeNormal, "Ready", "Reconcile", "ready")
			r.Requeue(30 * time.Second)
			res, err := r.Finish(rec, &corev1.Pod{}, tc.reconcileErr, tc.statusErr)
			if got := recorded(rec); len(got) != tc.wantEvents || got[0] != "Normal Created created pod p" {
				t.Errorf("events %q, want %d, the write's first", got, tc.wantEvents)
			}
			if res.RequeueAfter != tc.wantAfter {
				t.Errorf("RequeueAfter %v, want %v", res.RequeueAfter, tc.wantAfter)
			}
			if len(tc.wantErr) == 0 && err != nil {
				t.Errorf("error %v, want none", err)
			}
			if len(tc.wantErr) > 0 && err == nil {
				t.Errorf("no error, want %v", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("error %v does not hold %v", err, want)
				}
			}
		})
	}
}
