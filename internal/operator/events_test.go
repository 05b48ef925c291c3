package operator

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/testutil"
)

// The operator's events go through a client of their own, at --event-qps, and a repeated event (same object and
// reason) is one Event with a series count, not a write each.
func TestEventRecorderOwnClientAndSeries(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	mgr, err := NewManager(cfg, Options{EventQPS: 7, EventBurst: 3})
	if err != nil {
		t.Fatal(err)
	}
	em, ok := mgr.(*eventManager)
	if !ok {
		t.Fatalf("NewManager returned %T, want the manager with its own event recorder", mgr)
	}
	if got := em.client.RESTClient().GetRateLimiter().QPS(); got != 7 {
		t.Errorf("event client QPS = %v, want 7 (--event-qps)", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "events-subject"}}
	if err := cl.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	rec := mgr.GetEventRecorder("raycluster-controller")
	rec.Eventf(cm, nil, corev1.EventTypeNormal, "CreatedHeadPod", "Create", "created head pod h")
	for i := range 3 {
		rec.Eventf(cm, nil, corev1.EventTypeNormal, "CreatedWorkerPod", "Create", "created %d worker pods", i+1)
	}
	testutil.Eventually(t, 2*time.Minute, "one Event per reason, the repeated one as a series", func() (bool, string) {
		var list eventsv1.EventList
		if err := cl.List(context.Background(), &list, client.InNamespace("default")); err != nil {
			return false, err.Error()
		}
		byReason := map[string]eventsv1.Event{}
		for _, e := range list.Items {
			if e.Regarding.UID == cm.UID {
				byReason[e.Reason] = e
			}
		}
		w, ok := byReason["CreatedWorkerPod"]
		if len(byReason) != 2 || !ok || w.Series == nil || w.Series.Count < 2 || w.ReportingController != "raycluster-controller" {
			return false, fmt.Sprintf("%d events for the object: %+v", len(byReason), byReason)
		}
		return true, ""
	})
}
