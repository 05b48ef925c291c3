package operator

import (
	"context"
	"sync"

	"k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// Default event write limits (--event-qps, --event-burst). A new RayCluster costs three events (CreatedService,
// CreatedHeadPod, CreatedWorkerPod: one per reason, the worker pods of a group counted in one note), so 20 a second
// covers about seven new clusters a second, more than a control plane that must also create their pods keeps up
// with; a burst beyond that waits in memory and is written after the pods, not beside them.
const (
	DefaultEventQPS   = 20
	DefaultEventBurst = 50
)

// eventManager is the manager with the operator's own events.k8s.io recorder: its own REST client and client-side
// rate limiter (opts.EventQPS, opts.EventBurst), so that events never take from the budget the pod, Service and
// status writes draw on, and are sent after the reconcile that records them, from client-go's broadcaster, which
// also folds a repeated event (same object, type, reason and action) into one series: a second one is a patch, any
// later one only a count in memory until the series' half-hourly refresh.
type eventManager struct {
	ctrl.Manager
	client v1.EventsV1Interface

	mu          sync.Mutex
	broadcaster events.EventBroadcaster
	ctx         context.Context
	cancel      context.CancelFunc
}

// withEventRecorder wraps mgr so that GetEventRecorder answers from a broadcaster writing through its own client.
func withEventRecorder(mgr ctrl.Manager, qps float32, burst int) (ctrl.Manager, error) {
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.QPS, cfg.Burst, cfg.RateLimiter = qps, burst, nil
	cl, err := v1.NewForConfigAndClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	m := &eventManager{Manager: mgr, client: cl}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	// Stops the broadcaster's goroutines with the manager (events still waiting on the limiter are dropped).
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		m.stop()
		return nil
	}))
	return m, err
}

// GetEventRecorder starts the broadcaster on first use (controllers ask for their recorders while being set up,
// before the manager starts), as controller-runtime's own provider does.
func (m *eventManager) GetEventRecorder(name string) recorder.EventRecorder {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.broadcaster == nil {
		m.broadcaster = events.NewBroadcaster(&events.EventSinkImpl{Interface: m.client})
		if err := m.broadcaster.StartRecordingToSinkWithContext(m.ctx); err != nil {
			ctrl.Log.WithName("events").Error(err, "start recording events")
		}
	}
	// client-go's recorder has AnnotatedEventf too; its interface does not say so.
	return m.broadcaster.NewRecorder(m.GetScheme(), name).(recorder.EventRecorder)
}

func (m *eventManager) stop() {
	m.cancel()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.broadcaster != nil {
		m.broadcaster.Shutdown()
	}
}
