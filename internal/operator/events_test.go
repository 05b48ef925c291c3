package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/manta-dev/manta/internal/controller/shared/metawrite"
	"github.com/manta-dev/manta/internal/testutil"
)

// The events' client runs at --event-qps, not at the operator's --qps. (That a repeated event is one Event with a
// series count is in operator/envtest.)
func TestEventClientQPS(t *testing.T) {
	// An API server that serves the discovery of the kinds the manager's cache is scoped by, and nothing else: the
	// manager is built, never started.
	resources := func(gv string, rs ...metav1.APIResource) *metav1.APIResourceList {
		return &metav1.APIResourceList{GroupVersion: gv, APIResources: rs}
	}
	namespaced := func(name, kind string) metav1.APIResource {
		return metav1.APIResource{Name: name, Kind: kind, Namespaced: true, Verbs: metav1.Verbs{"get", "list", "watch"}}
	}
	group := func(name string) metav1.APIGroup {
		v := metav1.GroupVersionForDiscovery{GroupVersion: name + "/v1", Version: "v1"}
		return metav1.APIGroup{Name: name, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}
	}
	discovery := map[string]any{
		"/api":  &metav1.APIVersions{Versions: []string{"v1"}},
		"/apis": &metav1.APIGroupList{Groups: []metav1.APIGroup{group("batch"), group("networking.k8s.io")}},
		"/api/v1": resources("v1", namespaced("pods", "Pod"), namespaced("services", "Service"),
			namespaced("persistentvolumeclaims", "PersistentVolumeClaim"), namespaced("events", "Event")),
		"/apis/batch/v1":             resources("batch/v1", namespaced("jobs", "Job")),
		"/apis/networking.k8s.io/v1": resources("networking.k8s.io/v1", namespaced("networkpolicies", "NetworkPolicy"), namespaced("ingresses", "Ingress")),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := discovery[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(srv.Close)
	mgr, err := NewManager(&rest.Config{Host: srv.URL}, Options{EventQPS: 7, EventBurst: 3})
	if err != nil {
		t.Fatal(err)
	}
	em, ok := mgr.(*eventManager)
	if !ok {
		t.Fatalf("NewManager returned %T, want the manager with its own event recorder", mgr)
	}
	w, ok := em.client.(*metawrite.Events)
	if !ok {
		t.Fatalf("event writer %T, want *metawrite.Events", em.client)
	}
	if got := w.GetRateLimiter().QPS(); got != 7 {
		t.Errorf("event client QPS = %v, want 7 (--event-qps)", got)
	}
}

func TestTruncateNote(t *testing.T) {
	if got := truncateNote("short"); got != "short" {
		t.Errorf("truncateNote(short) = %q", got)
	}
	long := strings.Repeat("é", 600) // 1,200 bytes
	got := truncateNote(long)
	if len(got) > noteLimit || !utf8.ValidString(got) || !strings.HasSuffix(got, "...") {
		t.Errorf("truncateNote of 1,200 bytes = %d bytes, valid UTF-8 %v: %q", len(got), utf8.ValidString(got), got[len(got)-10:])
	}
}

// TestEventSeriesKey: events about the same object with the same type, action, reason and controller share a
// series key whatever their notes; anything else that differs makes another key; a hash shared by two different
// events (forced here) starts a new series instead of counting one event as a repeat of the other. Under one key, a
// repeat of a note counts in its series and another note is an Event of its own (TestEventSeriesNotes).
func TestEventSeriesKey(t *testing.T) {
	now := time.Unix(1000, 0)
	ev := func(mod func(p *pendingEvent)) *pendingEvent {
		p := &pendingEvent{typ: corev1.EventTypeNormal, action: "Create", reason: "CreatedHeadPod", controller: "raycluster-controller",
			regarding: corev1.ObjectReference{Kind: "RayCluster", Namespace: "ns", Name: "rc", UID: "u1", ResourceVersion: "7"},
			namespace: "ns", name: eventName("rc", now), note: "created head pod rc-head-abcde", eventTime: now.UnixNano(), lastObserved: now.UnixNano(), count: 1}
		if mod != nil {
			mod(p)
		}
		return p
	}
	base := ev(nil)
	same := ev(func(p *pendingEvent) { p.name = eventName("rc", now.Add(time.Second)) })
	if base.seriesHash() != same.seriesHash() || !base.sameSeries(same) {
		t.Error("a repeat is not the same series")
	}
	if other := ev(func(p *pendingEvent) { p.note = "created head pod rc-head-fghij" }); base.seriesHash() != other.seriesHash() || !base.sameSeries(other) {
		t.Error("another note has another series key")
	}
	// A status write between two retries changes the object's resourceVersion, not the series.
	newer := ev(func(p *pendingEvent) {
		p.regarding.ResourceVersion = "8"
		p.related = &corev1.ObjectReference{Kind: "RayCluster", Namespace: "ns", Name: "c", ResourceVersion: "3"}
	})
	newest := ev(func(p *pendingEvent) {
		p.regarding.ResourceVersion = "9"
		p.related = &corev1.ObjectReference{Kind: "RayCluster", Namespace: "ns", Name: "c", ResourceVersion: "4"}
	})
	if newer.seriesHash() != newest.seriesHash() || !newer.sameSeries(newest) {
		t.Error("a repeat about a newer version of the same objects is not the same series")
	}
	rel := &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p"}
	for name, mod := range map[string]func(p *pendingEvent){
		"type":       func(p *pendingEvent) { p.typ = corev1.EventTypeWarning },
		"action":     func(p *pendingEvent) { p.action = "Delete" },
		"reason":     func(p *pendingEvent) { p.reason = "CreatedWorkerPod" },
		"controller": func(p *pendingEvent) { p.controller = "rayjob-controller" },
		"object":     func(p *pendingEvent) { p.regarding.UID = "u2" },
		"related":    func(p *pendingEvent) { p.related = rel },
	} {
		other := ev(mod)
		if base.seriesHash() == other.seriesHash() || base.sameSeries(other) || other.sameSeries(base) {
			t.Errorf("another %s: same series", name)
		}
	}

	m := &eventManager{series: map[uint64]*pendingEvent{}, wake: make(chan struct{}, 1)}
	m.record(base, now)
	m.record(same, now.Add(time.Second))
	if base.count != 2 || len(m.queue) != 1 {
		t.Errorf("repeat: count %d, %d queued; want 2, 1", base.count, len(m.queue))
	}
	if got := base.event(); got.Series == nil || got.Series.Count != 2 || got.Note != base.note || !got.Series.LastObservedTime.Equal(ptrMicro(now.Add(time.Second))) {
		t.Errorf("the Event written for the repeat: %+v", got)
	}
	other := ev(func(p *pendingEvent) { p.reason = "CreatedWorkerPod" })
	m.series[other.seriesHash()] = base // a collision
	m.record(other, now.Add(2*time.Second))
	if base.count != 2 || other.count != 1 || m.series[other.seriesHash()] != other || len(m.queue) != 2 {
		t.Errorf("collision: counts %d/%d, %d queued; want a new series", base.count, other.count, len(m.queue))
	}
	// Past the window, the same event starts a new series.
	late := ev(nil)
	m.record(late, now.Add(time.Second+seriesWindow))
	if base.count != 2 || m.series[late.seriesHash()] != late {
		t.Error("a repeat after the series window counted in the old series")
	}
}

func ptrMicro(t time.Time) *metav1.MicroTime { m := metav1.NewMicroTime(t); return &m }

// TestEventSeriesNotes: under one series key, each note is an Event of its own with its own count (a RayJob's
// "Initializing" -> "Running" is not a repeat of "" -> "Initializing", whose note its series would keep), up to
// seriesNotes notes in the window; a note past them counts in the newest one's series, so a note that changes on
// every retry stays a bounded number of Events. The sweep forgets the notes whose series ended and keeps the others.
func TestEventSeriesNotes(t *testing.T) {
	now := time.Unix(1000, 0)
	ev := func(note string, at time.Time) *pendingEvent {
		return &pendingEvent{typ: corev1.EventTypeNormal, action: "Reconcile", reason: "JobDeploymentStatusChanged", controller: "rayjob-controller",
			regarding: corev1.ObjectReference{Kind: "RayJob", Namespace: "ns", Name: "j", UID: "u1"},
			namespace: "ns", name: eventName("j", at), note: note, eventTime: at.UnixNano(), lastObserved: at.UnixNano(), count: 1}
	}
	m := &eventManager{series: map[uint64]*pendingEvent{}, wake: make(chan struct{}, 1)}
	first := ev(`jobDeploymentStatus "" -> "Initializing"`, now)
	m.record(first, now)
	second := ev(`jobDeploymentStatus "Initializing" -> "Running"`, now.Add(time.Second))
	m.record(second, now.Add(time.Second))
	if first.count != 1 || second.count != 1 || len(m.queue) != 2 || m.series[first.seriesHash()] != second || second.older != first {
		t.Fatalf("two notes: counts %d/%d, %d queued; want two Events of count 1", first.count, second.count, len(m.queue))
	}
	// The first note again: a repeat in its own series, not in the newer one's.
	m.record(ev(first.note, now.Add(2*time.Second)), now.Add(2*time.Second))
	if first.count != 2 || second.count != 1 || len(m.queue) != 2 {
		t.Errorf("a repeat of the first note: counts %d/%d, %d queued; want 2/1, 2 queued", first.count, second.count, len(m.queue))
	}
	if got := first.event(); got.Note != first.note || got.Series == nil || got.Series.Count != 2 {
		t.Errorf("the first note's Event: %+v", got)
	}

	// Up to seriesNotes notes are Events of their own; the next counts in the newest one's series.
	var last *pendingEvent
	for i := 2; i < seriesNotes; i++ {
		last = ev(fmt.Sprintf("retry %d: connection refused", i), now.Add(time.Duration(i)*time.Second))
		m.record(last, now.Add(time.Duration(i)*time.Second))
	}
	if len(m.queue) != seriesNotes {
		t.Fatalf("%d notes: %d queued; want %d", seriesNotes, len(m.queue), seriesNotes)
	}
	over := ev("retry 99: connection refused", now.Add(time.Minute))
	m.record(over, now.Add(time.Minute))
	if len(m.queue) != seriesNotes || last.count != 2 || over.count != 1 || last.lastObserved != now.Add(time.Minute).UnixNano() {
		t.Errorf("a note past %d: %d queued, the newest's count %d; want it counted in the newest one's series", seriesNotes, len(m.queue), last.count)
	}

	// Once written, the sweep forgets the notes whose series ended and keeps the chain of the others.
	for p := m.series[first.seriesHash()]; p != nil; p = p.older {
		p.queued, p.written, p.lastWrite = false, true, now.Add(time.Minute).UnixNano()
	}
	m.queue = nil
	m.sweep(now.Add(seriesWindow + 30*time.Second)) // first (2 s) and second (1 s) ended; the retries (from 2 s) too but the last (1 min)
	n := 0
	for p := m.series[first.seriesHash()]; p != nil; p = p.older {
		n++
		if p != last {
			t.Errorf("kept %q, whose series ended", p.note)
		}
	}
	if n != 1 {
		t.Errorf("after the sweep the key holds %d events; want 1 (the one observed a minute in)", n)
	}
	m.sweep(now.Add(time.Minute + seriesWindow))
	if len(m.series) != 0 {
		t.Errorf("after every series ended the sweep kept %d keys", len(m.series))
	}
}

// An event the writer has taken from the queue still counts in Pending (manta_events_queued) until its write has
// returned: a reader that waits for Pending 0 (the oracle's and the benchmarks' settle) then finds the Event at the
// API server. Before, the event was uncounted from the moment it left the queue, through the writer's wait behind
// the operator's other writes and its API call, and the last event of a quiet namespace could be missed.
func TestPendingCountsTheEventBeingWritten(t *testing.T) {
	cs := fake.NewClientset()
	entered, release := make(chan struct{}), make(chan struct{})
	cs.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		close(entered)
		<-release
		return false, nil, nil // on to the tracker: the Event is stored
	})
	m := &eventManager{client: typedEvents{cs.EventsV1()}, series: map[uint64]*pendingEvent{}, wake: make(chan struct{}, 1)}
	now := time.Now()
	m.record(&pendingEvent{typ: corev1.EventTypeNormal, action: "Delete", reason: "DeletedRayJob", controller: "rayjob-controller",
		regarding: corev1.ObjectReference{Kind: "RayJob", Namespace: "default", Name: "j", UID: "u"},
		namespace: "default", name: eventName("j", now), note: "deleted", eventTime: now.UnixNano(), lastObserved: now.UnixNano(), count: 1}, now)
	if got := m.Pending(); got != 1 {
		t.Fatalf("Pending() = %d with one event queued, want 1", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the writer never sent the event")
	}
	// Barrier: the writer is inside Create, the queue is empty.
	m.mu.Lock()
	queued := len(m.queue)
	m.mu.Unlock()
	if got := m.Pending(); queued != 0 || got != 1 {
		t.Errorf("while the event's write is on its way: %d queued, Pending() = %d, want 0 queued and Pending() 1", queued, got)
	}
	close(release)
	testutil.Eventually(t, time.Minute, "Pending 0 once the write returned", func() (bool, string) {
		got := m.Pending()
		return got == 0, fmt.Sprintf("Pending() = %d", got)
	})
	list, err := cs.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Reason != "DeletedRayJob" {
		t.Errorf("events at the API server once Pending is 0: %+v, want the one recorded", list.Items)
	}
}

// typedEvents writes through a clientset's typed client (a fake one here), as the operator's metawrite.Events does
// through its REST client.
type typedEvents struct {
	c eventsv1client.EventsV1Interface
}

func (t typedEvents) Create(ctx context.Context, ev *eventsv1.Event) error {
	_, err := t.c.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

func (t typedEvents) MergePatch(ctx context.Context, namespace, name string, patch []byte) error {
	_, err := t.c.Events(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// gatedEvents is an event writer whose writes wait, each, until the test lets them go: it says which write entered
// and how many were on their way at most.
type gatedEvents struct {
	mu        sync.Mutex
	open, max int
	entered   chan string
	release   chan struct{}
	log       []string
}

func newGatedEvents() *gatedEvents {
	return &gatedEvents{entered: make(chan string, 100), release: make(chan struct{}, 100)}
}

func (g *gatedEvents) pass(what string) error {
	g.mu.Lock()
	g.open++
	g.max = max(g.max, g.open)
	g.mu.Unlock()
	g.entered <- what
	<-g.release
	g.mu.Lock()
	g.open--
	g.log = append(g.log, what)
	g.mu.Unlock()
	return nil
}

func (g *gatedEvents) Create(_ context.Context, ev *eventsv1.Event) error {
	return g.pass("create " + ev.Regarding.Name)
}

func (g *gatedEvents) MergePatch(_ context.Context, _, name string, patch []byte) error {
	return g.pass("patch " + strings.Split(name, ".")[0] + " " + string(patch[:min(len(patch), 20)]))
}

func (g *gatedEvents) waitEntered(t *testing.T) string {
	t.Helper()
	select {
	case w := <-g.entered:
		return w
	case <-time.After(time.Minute):
		t.Fatal("no write entered the writer")
		return ""
	}
}

func pending(name string, now time.Time) *pendingEvent {
	return &pendingEvent{typ: corev1.EventTypeNormal, action: "Create", reason: "CreatedHeadPod", controller: "raycluster-controller",
		regarding: corev1.ObjectReference{Kind: "RayCluster", Namespace: "default", Name: name, UID: types.UID(name)},
		namespace: "default", name: eventName(name, now), note: "created", eventTime: now.UnixNano(), lastObserved: now.UnixNano(), count: 1}
}

// TestBacklogDrainsInParallel: a backlog is written eventWriters at a time, never more, and every event of it is
// written.
func TestBacklogDrainsInParallel(t *testing.T) {
	g := newGatedEvents()
	m := &eventManager{client: g, series: map[uint64]*pendingEvent{}, wake: make(chan struct{}, 1)}
	now := time.Now()
	const n = 3 * eventWriters
	for i := range n {
		m.record(pending(fmt.Sprintf("c%d", i), now), now)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.run(ctx) }()
	defer func() { cancel(); <-done }()
	// Barrier: eventWriters writes entered and none returned.
	for range eventWriters {
		g.waitEntered(t)
	}
	if got := m.Pending(); got != n {
		t.Errorf("Pending() = %d with %d writes on their way and the rest queued, want %d", got, eventWriters, n)
	}
	for range n {
		g.release <- struct{}{}
	}
	for range n - eventWriters {
		g.waitEntered(t)
	}
	testutil.Eventually(t, time.Minute, "every event written", func() (bool, string) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.log) == n && m.EventsIdle(), fmt.Sprintf("%d of %d written, Pending %d", len(g.log), n, m.Pending())
	})
	if g.max != eventWriters {
		t.Errorf("at most %d writes at once, want %d", g.max, eventWriters)
	}
}

// TestRepeatWaitsForItsCreate: a repeat recorded while its Event's create is on its way is written after that
// create returns, as a series patch, while other events go past it.
func TestRepeatWaitsForItsCreate(t *testing.T) {
	g := newGatedEvents()
	m := &eventManager{client: g, series: map[uint64]*pendingEvent{}, wake: make(chan struct{}, 1)}
	now := time.Now()
	m.record(pending("a", now), now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.run(ctx) }()
	defer func() { cancel(); <-done }()
	if w := g.waitEntered(t); w != "create a" {
		t.Fatalf("first write %q, want create a", w)
	}
	m.record(pending("a", now), now.Add(time.Second)) // the repeat, queued first
	m.record(pending("b", now), now.Add(time.Second))
	// Barrier: b's create entered, so the writer took b past a's queued repeat.
	if w := g.waitEntered(t); w != "create b" {
		t.Fatalf("second write %q, want create b (a's repeat waits for a's create)", w)
	}
	g.release <- struct{}{}
	g.release <- struct{}{}
	if w := g.waitEntered(t); !strings.HasPrefix(w, `patch a {"series":{"count":2`) {
		t.Fatalf("third write %q, want a's series patch with count 2", w)
	}
	g.release <- struct{}{}
	testutil.Eventually(t, time.Minute, "the writer idle", func() (bool, string) {
		return m.EventsIdle(), fmt.Sprintf("Pending %d", m.Pending())
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	if i := slices.IndexFunc(g.log, func(s string) bool { return strings.HasPrefix(s, "patch a") }); i < 0 || slices.Index(g.log, "create a") > i {
		t.Errorf("writes returned in the order %q, want a's create before its patch", g.log)
	}
}
