package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"maps"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/reference"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/manta-dev/manta/internal/controller/shared/metawrite"
	"github.com/manta-dev/manta/internal/metrics"
)

// Default event write limits (--event-qps, --event-burst): ten times the operator's own (--qps, --burst). Events
// are written as they are recorded, beside the pod, Service and status writes they describe (four per new
// RayCluster): held back until those writes paused, they cost the control plane more and left a backlog to drain
// (docs/benchmarks.md, "Events written with the burst"). The limit keeps a larger backlog from being an unbounded
// burst at the API server.
const (
	DefaultEventQPS   = 1000
	DefaultEventBurst = 2000
)

const (
	// A repeated event (same object, type, reason, action, controller and related object) within seriesWindow of
	// the last one is a series: the first repeat is written as a count on the existing Event, later ones at most
	// every seriesRefresh.
	seriesWindow  = 6 * time.Minute
	seriesRefresh = 5 * time.Minute
	// seriesNotes is how many events that differ only in their notes (a status change's old and new state, a pod's
	// name) stay events of their own within seriesWindow, as client-go's core/v1 recorder keeps them (KubeRay's): a
	// series keeps its first note, so counting "Initializing -> Running" as a repeat of "" -> "Initializing" would
	// hide where a job went. Past that many, a new note counts in the newest one's series, so that a note that
	// changes on every retry (an error's text) stays a bounded number of Events.
	seriesNotes = 10
	// A write that fails is tried again, up to eventAttempts times (the Event is dropped after, with a log line).
	eventAttempts = 12
	// eventWriters is how many event writes may be on their way at once.
	eventWriters = 8
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// eventManager is the manager with the operator's own events.k8s.io recorder: events are queued in memory when
// recorded and written by the writer (run) through a client of their own (opts.EventQPS, opts.EventBurst), after
// the reconcile that records them, so that events never take from the budget of pod, Service and status writes.
type eventManager struct {
	ctrl.Manager
	client   eventWriter
	instance string

	mu    sync.Mutex
	queue []*pendingEvent
	// series holds the recent events by the hash of what makes a repeat but the note (seriesHash): the newest,
	// and behind it (older) those with other notes. A hash shared by two different events (a 64-bit collision)
	// costs only the aggregation of their repeats past seriesNotes.
	series  map[uint64]*pendingEvent
	wake    chan struct{}
	stopped bool
	// inFlight counts the events taken from the queue and not yet sent: waiting for a writer, or in their API
	// call (see Pending and EventsIdle).
	inFlight int
}

// pendingEvent is one Event as the API server has it (or will), kept compact: every event of the last seriesWindow
// stays in memory to count its repeats (a burst of a thousand new RayClusters is three thousand of them), and a
// whole eventsv1.Event is built only to be written. written says it was created, queued that a write (the create,
// or a series count) waits in the queue.
type pendingEvent struct {
	typ, action, reason, controller, instance string
	regarding                                 corev1.ObjectReference
	related                                   *corev1.ObjectReference
	namespace, name, note                     string
	annotations                               map[string]string
	// eventTime, lastObserved (the last repeat's time) and lastWrite are Unix nanoseconds.
	eventTime, lastObserved, lastWrite int64
	// older is the next older event of the same series key with another note (eventManager.series).
	older *pendingEvent
	// count is the series count: 1 until the event repeats.
	count, attempts int32
	written, queued bool
	// sending says a write of this event is on its way: a repeat recorded meanwhile queues it again, and it is
	// taken again only once that write is back (two writes of one Event never race).
	sending bool
}

// seriesSeed seeds the hashes of the series keys.
var seriesSeed = maphash.MakeSeed()

// seriesHash hashes what makes two events one series but their notes: the same type, action, reason and reporting
// controller about the same object (and related object). An object's resourceVersion is left out: a retry that
// follows a status write is still the same series.
func (p *pendingEvent) seriesHash() uint64 {
	var h maphash.Hash
	h.SetSeed(seriesSeed)
	ref := func(r *corev1.ObjectReference) {
		for _, s := range []string{r.Kind, r.APIVersion, r.Namespace, r.Name, string(r.UID), r.FieldPath} {
			h.WriteString(s)
			h.WriteByte(0)
		}
	}
	for _, s := range []string{p.typ, p.action, p.reason, p.controller} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	ref(&p.regarding)
	if p.related != nil {
		h.WriteByte(1)
		ref(p.related)
	}
	return h.Sum64()
}

// sameSeries says whether q has p's series key (their hashes being equal, this tells a collision apart); q is a
// repeat of p if its note is p's too (or once the key has seriesNotes notes, see record).
func (p *pendingEvent) sameSeries(q *pendingEvent) bool {
	return p.typ == q.typ && p.action == q.action && p.reason == q.reason && p.controller == q.controller &&
		sameObject(&p.regarding, &q.regarding) && (p.related == nil) == (q.related == nil) &&
		(p.related == nil || sameObject(p.related, q.related))
}

// sameObject compares two references but for their resourceVersion.
func sameObject(a, b *corev1.ObjectReference) bool {
	x, y := *a, *b
	x.ResourceVersion, y.ResourceVersion = "", ""
	return x == y
}

// event is the Event to write.
func (p *pendingEvent) event() *eventsv1.Event {
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: p.name, Namespace: p.namespace, Annotations: maps.Clone(p.annotations)},
		EventTime:           metav1.NewMicroTime(time.Unix(0, p.eventTime)),
		ReportingController: p.controller,
		ReportingInstance:   p.instance,
		Action:              p.action,
		Reason:              p.reason,
		Regarding:           p.regarding,
		Note:                p.note,
		Type:                p.typ,
	}
	if p.related != nil {
		rel := *p.related
		ev.Related = &rel
	}
	if p.count > 1 {
		ev.Series = &eventsv1.EventSeries{Count: p.count, LastObservedTime: metav1.NewMicroTime(time.Unix(0, p.lastObserved))}
	}
	return ev
}

// withEventRecorder wraps mgr so that GetEventRecorder answers from the operator's event queue.
func withEventRecorder(mgr ctrl.Manager, qps float32, burst int) (ctrl.Manager, error) {
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.QPS, cfg.Burst, cfg.RateLimiter = qps, burst, nil
	cl, err := metawrite.NewEvents(cfg, mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	m := &eventManager{Manager: mgr, client: cl, instance: host,
		series: map[uint64]*pendingEvent{}, wake: make(chan struct{}, 1)}
	metrics.SetEventsQueued(m.Pending)
	err = mgr.Add(manager.RunnableFunc(m.run))
	return m, err
}

// eventWriter writes the Events (metawrite.Events).
type eventWriter interface {
	Create(ctx context.Context, ev *eventsv1.Event) error
	MergePatch(ctx context.Context, namespace, name string, patch []byte) error
}

// GetEventRecorder returns a recorder whose events carry name as their reporting controller.
func (m *eventManager) GetEventRecorder(name string) recorder.EventRecorder {
	return &queuedRecorder{m: m, controller: name, instance: name + "-" + m.instance}
}

type queuedRecorder struct {
	m                    *eventManager
	controller, instance string
}

func (r *queuedRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.AnnotatedEventf(regarding, related, nil, eventtype, reason, action, note, args...)
}

func (r *queuedRecorder) AnnotatedEventf(regarding, related runtime.Object, annotations map[string]string, eventtype, reason, action, note string, args ...any) {
	now := time.Now()
	ref, err := reference.GetReference(r.m.GetScheme(), regarding)
	if err != nil {
		ctrl.Log.WithName("events").Error(err, "no reference for the event's object; event not recorded", "reason", reason)
		return
	}
	var rel *corev1.ObjectReference
	if related != nil {
		if rel, err = reference.GetReference(r.m.GetScheme(), related); err != nil {
			rel = nil
		}
	}
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		ctrl.Log.WithName("events").Error(nil, "unsupported event type; event not recorded", "type", eventtype, "reason", reason)
		return
	}
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	r.m.record(&pendingEvent{
		typ: eventtype, action: action, reason: reason, controller: r.controller, instance: r.instance,
		regarding: *ref, related: rel,
		namespace: ns, name: eventName(ref.Name, now), note: truncateNote(fmt.Sprintf(note, args...)), annotations: annotations,
		eventTime: now.UnixNano(), lastObserved: now.UnixNano(), count: 1,
	}, now)
}

// noteLimit is the most an events.k8s.io Event's note may hold (bytes); a longer one is refused as invalid.
const noteLimit = 1024

// truncateNote cuts a note to noteLimit bytes, at a character boundary, marking the cut.
func truncateNote(note string) string {
	if len(note) <= noteLimit {
		return note
	}
	const mark = "..."
	cut := noteLimit - len(mark)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + mark
}

// eventName names a new Event about the object called name, as client-go's recorders do.
func eventName(name string, now time.Time) string { return fmt.Sprintf("%s.%x", name, now.UnixNano()) }

// record queues a new Event, or counts a repeat of a recent one in its series.
func (m *eventManager) record(ev *pendingEvent, now time.Time) {
	key := ev.seriesHash()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	head := m.series[key]
	var newest *pendingEvent // the newest event of the key still in the window
	notes := 0
	for p := head; p != nil; p = p.older {
		if !p.sameSeries(ev) || now.Sub(time.Unix(0, p.lastObserved)) >= seriesWindow {
			continue
		}
		if p.note == ev.note {
			m.repeat(p, now)
			return
		}
		if newest == nil {
			newest = p
		}
		notes++
	}
	if notes >= seriesNotes {
		m.repeat(newest, now)
		return
	}
	ev.older = head
	m.series[key] = ev
	m.enqueue(ev)
}

// repeat counts a repeat of p. The first repeat is written at once (a count of 2 says "this is happening again");
// later counts are refreshed every seriesRefresh, by the writer's sweep.
func (m *eventManager) repeat(p *pendingEvent, now time.Time) {
	p.count++
	p.lastObserved = now.UnixNano()
	if !p.queued && (!p.written || p.count == 2) {
		p.attempts = 0
		m.enqueue(p)
	}
}

func (m *eventManager) enqueue(p *pendingEvent) {
	p.queued = true
	m.queue = append(m.queue, p)
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Pending is how many event writes are not yet sent: those waiting in the queue, and the one the writer holds
// (waiting for a writer, or in its API call). When it is 0, every event recorded so far is
// at the API server (or was dropped), so a reader of the API server finds it.
func (m *eventManager) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue) + m.inFlight
}

// EventsIdle says whether no event write waits in the queue or is on its way: every event recorded so far has been
// sent (or dropped). Tests use it as a barrier before counting the operator's writes.
func (m *eventManager) EventsIdle() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue) == 0 && m.inFlight == 0
}

// run writes the queued events until ctx ends; what is still queued then is dropped (and counted in a log line).
// Up to eventWriters at once, so a burst's events go at the API server's pace (within --event-qps) instead of one
// round trip at a time.
func (m *eventManager) run(ctx context.Context) error {
	sweep := time.NewTicker(time.Minute)
	defer sweep.Stop()
	slots := make(chan struct{}, eventWriters)
	var writers sync.WaitGroup
	defer writers.Wait()
	for {
		select {
		case <-sweep.C:
			m.sweep(time.Now())
		default:
		}
		p := m.next()
		if p == nil {
			select {
			case <-ctx.Done():
				m.stop()
				return nil
			case <-m.wake:
			case <-sweep.C:
				m.sweep(time.Now())
			}
			continue
		}
		select {
		case <-ctx.Done():
			m.done(p)
			m.stop()
			return nil
		case slots <- struct{}{}:
		}
		writers.Go(func() {
			defer func() { <-slots }()
			if attempts := m.write(ctx, p); attempts > 0 {
				// The API server refused or did not answer: this writer waits before its next write, longer each
				// time.
				select {
				case <-ctx.Done():
				case <-time.After(min(time.Duration(attempts)*time.Second, 10*time.Second)):
				}
			}
		})
	}
}

// next takes the oldest queued write whose event has no write on its way, with the Event as it is now (a series
// count recorded meanwhile included).
func (m *eventManager) next() *pendingEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.queue, func(p *pendingEvent) bool { return !p.sending })
	if i < 0 {
		return nil
	}
	p := m.queue[i]
	if i == 0 {
		m.queue[0] = nil
		m.queue = m.queue[1:] // the usual case: no shift of a burst's backlog
	} else {
		m.queue = slices.Delete(m.queue, i, i+1)
	}
	if len(m.queue) == 0 {
		m.queue = nil // let the backing array go after a burst
	}
	p.queued, p.sending = false, true
	m.inFlight++
	return p
}

// done ends p's turn with the writer: its write is back (or will not be made), and an event queued behind it may go.
func (m *eventManager) done(p *pendingEvent) {
	m.mu.Lock()
	p.sending = false
	if m.inFlight > 0 {
		m.inFlight--
	}
	requeued := p.queued
	m.mu.Unlock()
	if requeued {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// write creates the Event, or writes its series count when it exists; a failed write goes back in the queue. It
// returns the attempts made so far when the write failed, 0 otherwise.
func (m *eventManager) write(ctx context.Context, p *pendingEvent) int {
	defer m.done(p)
	m.mu.Lock()
	ev := p.event()
	written := p.written
	m.mu.Unlock()
	var err error
	if !written {
		err = m.client.Create(ctx, ev)
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	} else {
		var patch []byte
		patch, err = json.Marshal(map[string]any{"series": ev.Series})
		if err == nil {
			err = m.client.MergePatch(ctx, ev.Namespace, ev.Name, patch)
		}
		if apierrors.IsNotFound(err) {
			// The Event expired (the API server keeps Events for an hour): write it again, as a new one.
			m.mu.Lock()
			p.written = false
			p.name = eventName(p.regarding.Name, time.Now())
			m.enqueue(p)
			m.mu.Unlock()
			return 0
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		p.written, p.attempts, p.lastWrite = true, 0, time.Now().UnixNano()
		return 0
	}
	if ctx.Err() != nil {
		return 0
	}
	p.attempts++
	if p.attempts >= eventAttempts || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
		ctrl.Log.WithName("events").Error(err, "event not written", "object", p.regarding.Name, "reason", p.reason, "attempts", p.attempts)
		p.attempts = eventAttempts // given up: the sweep forgets it with its series
		return 0
	}
	if !p.queued {
		m.enqueue(p)
	}
	return int(p.attempts)
}

// sweep writes the counts of series that grew since their last write (at most every seriesRefresh) and forgets
// series that ended more than seriesWindow ago.
func (m *eventManager) sweep(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, head := range m.series {
		// The key's events, newest first, without those forgotten.
		var kept, last *pendingEvent
		for p := head; p != nil; {
			older := p.older
			forget := false
			switch {
			case p.queued:
			case now.Sub(time.Unix(0, p.lastObserved)) >= seriesWindow:
				forget = p.written || p.attempts >= eventAttempts
			case p.written && p.count > 1 && p.lastObserved > p.lastWrite && now.Sub(time.Unix(0, p.lastWrite)) >= seriesRefresh:
				m.enqueue(p)
			}
			if forget {
				p.older = nil
			} else if last == nil {
				kept, last = p, p
			} else {
				last.older, last = p, p
			}
			p = older
		}
		if last != nil {
			last.older = nil
		}
		if kept == nil {
			delete(m.series, k)
		} else if kept != head {
			m.series[k] = kept
		}
	}
}

func (m *eventManager) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	if n := len(m.queue); n > 0 {
		ctrl.Log.WithName("events").Info("operator stopping: queued events not written", "count", n)
	}
	m.queue = nil
}
