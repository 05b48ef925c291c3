package envtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// eventBusyInterval is the operator's: while it writes other objects, it writes at most one event per
// eventBusyInterval (internal/operator/events.go).
const eventBusyInterval = 500 * time.Millisecond

// The operator's events go through a client of their own, at --event-qps, and a repeated event (same object,
// reason and note) is one Event with a series count, not a write each; another note under the same reason (a status
// change's new state) is an Event of its own, with its note.
func TestEventRecorderOwnClientAndSeries(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	mgr, err := operator.NewManager(cfg, operator.Options{EventQPS: 7, EventBurst: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.RunManager(t, mgr)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "events-subject"}}
	if err := cl.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	rec := mgr.GetEventRecorder("raycluster-controller")
	rec.Eventf(cm, nil, corev1.EventTypeNormal, "CreatedHeadPod", "Create", "created head pod h")
	for range 3 {
		rec.Eventf(cm, nil, corev1.EventTypeNormal, "CreatedWorkerPod", "Create", "created %d worker pods", 3)
	}
	rec.Eventf(cm, nil, corev1.EventTypeNormal, "StatusChanged", "Reconcile", "state %q -> %q", "", "Initializing")
	rec.Eventf(cm, nil, corev1.EventTypeNormal, "StatusChanged", "Reconcile", "state %q -> %q", "Initializing", "Running")
	want := map[string]bool{ // reason and note -> a series
		"CreatedHeadPod created head pod h":               false,
		"CreatedWorkerPod created 3 worker pods":          true,
		`StatusChanged state "" -> "Initializing"`:        false,
		`StatusChanged state "Initializing" -> "Running"`: false,
	}
	testutil.Eventually(t, 2*time.Minute, "one Event per reason and note, the repeated one as a series", func() (bool, string) {
		var list eventsv1.EventList
		if err := cl.List(context.Background(), &list, client.InNamespace("default")); err != nil {
			return false, err.Error()
		}
		got := map[string]eventsv1.Event{}
		for _, e := range list.Items {
			if e.Regarding.UID == cm.UID {
				got[e.Reason+" "+e.Note] = e
			}
		}
		if len(got) != len(want) {
			return false, fmt.Sprintf("%d events for the object, want %d: %+v", len(got), len(want), got)
		}
		for k, series := range want {
			e, ok := got[k]
			if !ok || (e.Series != nil && e.Series.Count >= 2) != series || e.ReportingController != "raycluster-controller" {
				return false, fmt.Sprintf("%q: found %v, series %+v (want a series: %v), controller %q", k, ok, e.Series, series, e.ReportingController)
			}
		}
		return true, ""
	})
}

// Events recorded while the operator writes other objects wait in memory, written one per eventBusyInterval at
// most, and keep the time they were recorded; once the writes pause they are all written.
func TestEventsHeldWhileOperatorWrites(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	mgr, err := operator.NewManager(cfg, operator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	em, ok := mgr.(interface{ Pending() int })
	if !ok {
		t.Fatalf("NewManager returned %T, want the manager with its own event queue", mgr)
	}
	ctx := testutil.RunManager(t, mgr)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "held-events"}}
	if err := cl.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var list eventsv1.EventList
		if err := cl.List(ctx, &list, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range list.Items {
			if e.Regarding.UID == cm.UID {
				n++
			}
		}
		return n
	}

	// The operator's own client starts a ConfigMap update every 50 ms until stopWriting: it is busy for as long as
	// the test needs, however long the manager takes to start on a loaded machine. Each update runs on its own, so
	// that a slow answer does not space the writes' starts (what the operator's activity records) past eventQuiet:
	// one write after another, at 400 ms an answer under load, let events through unheld.
	stopBusy, busyDone := make(chan struct{}), make(chan struct{})
	writer := mgr.GetClient()
	go func() {
		defer close(busyDone)
		var inFlight sync.WaitGroup
		defer inFlight.Wait()
		tick := time.NewTicker(50 * time.Millisecond) // paces the load, proves nothing
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopBusy:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			c := cm.DeepCopy()
			c.Data = map[string]string{"i": fmt.Sprint(i)}
			c.ResourceVersion = ""
			inFlight.Go(func() { _ = writer.Update(ctx, c) })
		}
	}()
	stopWriting := sync.OnceFunc(func() { close(stopBusy); <-busyDone })
	t.Cleanup(stopWriting)
	testutil.Eventually(t, 30*time.Second, "the manager's cache running", func() (bool, string) {
		var got corev1.ConfigMap
		if err := cl.Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil {
			return false, err.Error()
		}
		return got.Data["i"] != "", "no write seen yet"
	})
	rec := mgr.GetEventRecorder("raycluster-controller")
	const n = 20
	recorded := time.Now()
	for i := range n {
		rec.Eventf(cm, nil, corev1.EventTypeNormal, fmt.Sprintf("Reason%d", i), "Create", "event %d", i)
	}
	// Barrier: the event writer has started and has written some of the events while the operator writes; the
	// rest must still be held.
	const written = n / 4
	testutil.Eventually(t, time.Minute, "the event writer writing while the operator writes", func() (bool, string) {
		got := count()
		return got >= written, fmt.Sprintf("%d of %d events written, %d queued", got, n, em.Pending())
	})
	// At most one per eventBusyInterval since they were recorded (and one more for timing slack).
	if got, max := count(), int(time.Since(recorded)/eventBusyInterval)+2; got > max || got >= n {
		t.Errorf("%d of %d events written while the operator was writing (at most %d expected)", got, n, max)
	}
	stopWriting()
	testutil.Eventually(t, time.Minute, "every event written once the writes pause", func() (bool, string) {
		got := count()
		return got == n, fmt.Sprintf("%d of %d events, %d queued", got, n, em.Pending())
	})
	var list eventsv1.EventList
	if err := cl.List(ctx, &list, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.UID == cm.UID && e.EventTime.Time.After(recorded.Add(time.Second)) {
			t.Errorf("event %s has eventTime %s: not when it was recorded (%s)", e.Reason, e.EventTime.Time, recorded)
		}
	}
}
