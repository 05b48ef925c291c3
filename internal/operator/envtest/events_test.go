package envtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

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
