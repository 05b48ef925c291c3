package operator

import (
	"context"
	stdjson "encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/testutil"
)

// crDecodeHarness serves one answer to every watch of RayClusters, and watches them as controller-runtime's cache
// does (its REST client for the kind, its parameter codec): plainly, and through crDecodingListWatch.
type crDecodeHarness struct {
	mu      sync.Mutex
	status  int
	body    []byte
	queries []string
	// watchList: a watch-list from no resourceVersion is answered with the end of the initial events (at 10) alone
	watchList bool

	plain, decoded toolscache.ListerWatcherWithContext
	sw             *optimize.Switches
	// cache is what the decoder finds cached, by namespace/name (cr-spec-sharing)
	cache map[string]runtime.Object
}

func newCRDecodeHarness(t testing.TB) *crDecodeHarness {
	h := &crDecodeHarness{sw: optimize.Off()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		status, body := h.status, h.body
		if q := r.URL.Query(); h.watchList && q.Get("sendInitialEvents") == "true" && q.Get("resourceVersion") == "" {
			body = []byte(`{"type":"BOOKMARK","object":{"kind":"RayCluster","apiVersion":"ray.io/v1","metadata":{"resourceVersion":"10","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n")
		}
		h.queries = append(h.queries, r.URL.String())
		h.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			_, _ = w.Write([]byte(`{"kind":"RayClusterList","apiVersion":"ray.io/v1","metadata":{"resourceVersion":"10"},"items":[]}`))
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	gvk := rayv1.GroupVersion.WithKind("RayCluster")
	listWatch := func(cfg *rest.Config) toolscache.ListerWatcher {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c, err := apiutil.RESTClientForGVK(gvk, false, false, cfg, serializer.NewCodecFactory(scheme), hc)
		if err != nil {
			t.Fatal(err)
		}
		pc := runtime.NewParameterCodec(scheme)
		return &toolscache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				l := &rayv1.RayClusterList{}
				return l, c.Get().Resource("rayclusters").Namespace("ns").VersionedParams(&opts, pc).Do(ctx).Into(l)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				opts.Watch = true
				return c.Get().Resource("rayclusters").Namespace("ns").VersionedParams(&opts, pc).Watch(ctx)
			}}
	}
	cfg := &rest.Config{Host: srv.URL}
	h.plain = toolscache.ToListerWatcherWithContext(listWatch(cfg))
	dcfg := rest.CopyConfig(cfg)
	dcfg.Wrap(captureWatches)
	h.decoded = crDecodingListWatch(listWatch(dcfg), scheme, gvk, h.sw, func(key string) (any, bool) {
		h.mu.Lock()
		defer h.mu.Unlock()
		o, ok := h.cache[key]
		return o, ok
	})
	return h
}

// watchResult is what one watch gave: its events, or the error that refused it.
type watchResult struct {
	events []watch.Event
	err    error
}

func (h *crDecodeHarness) run(t testing.TB, lw toolscache.ListerWatcherWithContext) watchResult {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "7", AllowWatchBookmarks: true,
		TimeoutSeconds: ptr.To[int64](300), LabelSelector: "a=b", SendInitialEvents: ptr.To(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		return watchResult{err: err}
	}
	var r watchResult
	for ev := range w.ResultChan() {
		r.events = append(r.events, ev)
	}
	if ctx.Err() != nil {
		t.Fatal("the watch did not end")
	}
	return r
}

// compare watches body (answered with status) both ways, wants the same from each and the same request sent, and
// returns how many events crWatchDecoder decoded itself.
func (h *crDecodeHarness) compare(t testing.TB, status int, body []byte) int64 {
	t.Helper()
	h.mu.Lock()
	h.status, h.body, h.queries = status, body, nil
	h.mu.Unlock()
	before := h.sw.Count(optimize.CRWatchDecoding)
	want := h.run(t, h.plain)
	got := h.run(t, h.decoded)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("body %.300q:\ndecoded %s\n  plain %s", body, describe(got), describe(want))
	}
	if h.queries[0] != h.queries[1] {
		t.Errorf("requests differ: %s, plain %s", h.queries[1], h.queries[0])
	}
	return h.sw.Count(optimize.CRWatchDecoding) - before
}

func describe(r watchResult) string {
	var b strings.Builder
	for _, ev := range r.events {
		fmt.Fprintf(&b, "%s %T %+v; ", ev.Type, ev.Object, ev.Object)
	}
	return fmt.Sprintf("events %s err %#v", b.String(), r.err)
}

func crDecodeCluster(t testing.TB) *rayv1.RayCluster {
	rc := testutil.MakeRayCluster("ns", "rc").Workers("small", 2).Label("a", "b").Obj()
	rc.UID, rc.ResourceVersion, rc.Generation = "u-1", "12", 3
	rc.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	rc.Annotations = map[string]string{"note": "héllo \"quoted\" \\ <tag> & \u2028 ☃ 𝄞", "empty": ""}
	rc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationApply,
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:x":{}}}`)}}
	rc.Status.State = rayv1.Ready
	rc.Status.DesiredWorkerReplicas = 2
	return rc
}

// crEventLine is the JSON watch event line the API server sends for c.
func crEventLine(t testing.TB, typ watch.EventType, c *rayv1.RayCluster) []byte {
	c = c.DeepCopy()
	c.APIVersion, c.Kind = rayv1.GroupVersion.String(), "RayCluster"
	obj, err := stdjson.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := stdjson.Marshal(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: obj}})
	if err != nil {
		t.Fatal(err)
	}
	return append(ev, '\n')
}

func crDecodeCases(t testing.TB) []struct {
	name    string
	body    string
	decoded int64
} {
	rc := crDecodeCluster(t)
	ev := func(typ watch.EventType) string { return string(crEventLine(t, typ, rc)) }
	added := ev(watch.Added)
	bookmark := `{"type":"BOOKMARK","object":{"kind":"RayCluster","apiVersion":"ray.io/v1","metadata":{"resourceVersion":"12","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n"
	gone := `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}` + "\n"
	obj := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(added), `{"type":"ADDED","object":`), "}")
	huge := `{"type":"MODIFIED","object":{"apiVersion":"ray.io/v1","kind":"RayCluster","metadata":{"name":"big","annotations":{"a":"` +
		strings.Repeat(`a\"}]\\{[\u00e9é`, 120_000) + `"}}}}` + "\n"
	return []struct {
		name    string
		body    string
		decoded int64
	}{
		{"each type", ev(watch.Added) + ev(watch.Modified) + bookmark + ev(watch.Deleted), 4},
		{"empty stream", "", 0},
		{"gone", added + gone, 1},
		{"error then more", gone + added, 0},
		{"stream ends mid-event", added + added[:len(added)/2], 1},
		{"tail without newline", added + strings.TrimSuffix(added, "\n"), 1},
		{"not JSON", added + "garbage\n" + added, 1},
		{"event split over lines", added + `{"type":"ADDED",` + "\n" + `"object":` + obj + "}\n" + added, 1},
		{"two events on a line", strings.TrimSuffix(added, "\n") + " " + added + added, 0},
		{"blank lines", "\n  \n" + added + "\r\n" + added + "\t\n", 2},
		{"unknown type", `{"type":"CHANGED","object":` + obj + "}\n", 0},
		{"error type escaped", `{"type":"ADD\u0045D","object":` + obj + "}\n", 0},
		{"object null", `{"type":"ADDED","object":null}` + "\n", 0},
		{"object missing", `{"type":"ADDED"}` + "\n", 0},
		{"type missing", `{"object":` + obj + "}\n", 0},
		{"type twice", `{"type":"DELETED","type":"ADDED","object":` + obj + "}\n", 0},
		{"object twice", `{"type":"ADDED","object":{},"object":` + obj + "}\n", 0},
		{"Type capitalised", `{"Type":"DELETED","type":"ADDED","object":` + obj + "}\n", 1},
		{"extra key", `{"type":"ADDED","extra":[1,{"x":null}],"object":` + obj + "}\n", 1},
		{"event kind", `{"kind":"WatchEvent","type":"ADDED","object":` + obj + "}\n", 0},
		{"another kind", strings.Replace(added, `"kind":"RayCluster"`, `"kind":"RayJob"`, 1), 0},
		{"another version", strings.Replace(added, `"apiVersion":"ray.io/v1"`, `"apiVersion":"ray.io/v1alpha1"`, 1), 0},
		{"Kind capitalised", strings.Replace(added, `"kind":"RayCluster"`, `"kind":"RayCluster","Kind":"RayJob"`, 1), 0},
		{"kind twice", strings.Replace(added, `"kind":"RayCluster"`, `"kind":"RayJob","kind":"RayCluster"`, 1), 0},
		{"kind missing", strings.Replace(added, `"kind":"RayCluster",`, ``, 1), 0},
		{"kind escaped", strings.Replace(added, `"kind":"RayCluster"`, `"kind":"Ray\u0043luster"`, 1), 0},
		{"key escaped", strings.Replace(added, `"kind":"RayCluster"`, `"\u006bind":"RayCluster"`, 1), 0},
		{"non-ASCII key", strings.Replace(added, `"kind":"RayCluster"`, `"kind":"RayCluster","\u212aind":"RayJob"`, 1), 0},
		{"raw non-ASCII key", strings.Replace(added, `"kind":"RayCluster"`, `"kind":"RayCluster","`+"\u212a"+`ind":"RayJob"`, 1), 0},
		{"spec of the wrong type", strings.Replace(added, `"spec":{`, `"spec":5,"x":{`, 1), 0},
		{"case-insensitive field", strings.Replace(added, `"spec":{`, `"Spec":{"suspend":true},"spec":{`, 1), 1},
		{"nested and escaped", strings.Replace(added, `"spec":{`, `"spec":{"headGroupSpec":{"rayStartParams":{"a\"b":"c\\d\u0000","ü":"\ud83d\ude00"}},`, 1), 1},
		{"invalid UTF-8", strings.Replace(added, `"empty":""`, "\"empty\":\"\xff\xfe\"", 1), 1},
		{"lone surrogate", strings.Replace(added, `"empty":""`, `"empty":"\ud800"`, 1), 1},
		{"number forms", strings.Replace(added, `"generation":3`, `"generation":3e0`, 1), 0},
		{"bad number", strings.Replace(added, `"generation":3`, `"generation":03`, 1), 0},
		{"trailing comma", strings.Replace(added, `"generation":3,`, `"generation":3,,`, 1), 0},
		{"control character", strings.Replace(added, `"empty":""`, "\"empty\":\"\t\"", 1), 0},
		{"too deep for the scan", strings.Replace(added, `"spec":{`, `"spec":{"x":`+strings.Repeat("[", 1500)+strings.Repeat("]", 1500)+`,`, 1), 0},
		{"huge", huge + added, 2},
	}
}

// crWatchDecoder gives, for every stream, what client-go's own JSON watch decoding gives (events deep-equal, the
// same error), decoding itself the events it should; and the watch request is client-go's.
func TestCRWatchDecoderMatchesClientGo(t *testing.T) {
	h := newCRDecodeHarness(t)
	for _, c := range crDecodeCases(t) {
		t.Run(c.name, func(t *testing.T) {
			if got := h.compare(t, http.StatusOK, []byte(c.body)); got != c.decoded {
				t.Errorf("decoded %d events itself, want %d", got, c.decoded)
			}
		})
		// An update decodes its spec apart (cr-spec-sharing, with nothing cached to share): the same again.
		t.Run(c.name+" as updates", func(t *testing.T) {
			body := strings.ReplaceAll(c.body, `"type":"ADDED"`, `"type":"MODIFIED"`)
			if got := h.compare(t, http.StatusOK, []byte(body)); got != c.decoded {
				t.Errorf("decoded %d events itself, want %d", got, c.decoded)
			}
		})
	}
	if n := h.sw.Count(optimize.CRSpecSharing); n != 0 {
		t.Errorf("shared %d specs with nothing cached", n)
	}
}

// An update or a delete with the cached object's UID and generation takes the cached object's spec, whatever its
// own bytes say (the API server would have raised the generation); any other event decodes its own.
func TestCRSpecSharing(t *testing.T) {
	h := newCRDecodeHarness(t)
	rc := crDecodeCluster(t)
	cached := rc.DeepCopy()
	cached.Spec.WorkerGroupSpecs[0].GroupName = "from-the-cache" // tells the two specs apart
	line := func(typ watch.EventType, mutate func(*rayv1.RayCluster)) []byte {
		c := rc.DeepCopy()
		if mutate != nil {
			mutate(c)
		}
		return crEventLine(t, typ, c)
	}
	for _, c := range []struct {
		name   string
		cached runtime.Object
		body   []byte
		shared bool
	}{
		{"update", cached, line(watch.Modified, nil), true},
		{"delete", cached, line(watch.Deleted, nil), true},
		{"status changed", cached, line(watch.Modified, func(c *rayv1.RayCluster) { c.Status.State = rayv1.Suspended }), true},
		{"add", cached, line(watch.Added, nil), false},
		{"generation changed", cached, line(watch.Modified, func(c *rayv1.RayCluster) { c.Generation++ }), false},
		{"another object of the name", cached, line(watch.Modified, func(c *rayv1.RayCluster) { c.UID = "u-2" }), false},
		{"no generation", cached, line(watch.Modified, func(c *rayv1.RayCluster) { c.Generation = 0 }), false},
		{"nothing cached", nil, line(watch.Modified, nil), false},
		{"another kind cached", &rayv1.RayJob{ObjectMeta: cached.ObjectMeta}, line(watch.Modified, nil), false},
		{"spec twice", cached, []byte(strings.Replace(string(line(watch.Modified, nil)), `"spec":{`, `"spec":{"suspend":true},"spec":{`, 1)), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h.mu.Lock()
			h.cache = map[string]runtime.Object{}
			if c.cached != nil {
				h.cache["ns/rc"] = c.cached
			}
			h.status, h.body = http.StatusOK, c.body
			h.mu.Unlock()
			before := h.sw.Count(optimize.CRSpecSharing)
			want := h.run(t, h.plain)
			got := h.run(t, h.decoded)
			if len(got.events) != 1 || len(want.events) != 1 || got.err != nil {
				t.Fatalf("decoded %s, plain %s", describe(got), describe(want))
			}
			if shared := h.sw.Count(optimize.CRSpecSharing) - before; shared != map[bool]int64{true: 1}[c.shared] {
				t.Errorf("shared %d specs, want shared %v", shared, c.shared)
			}
			g, w := got.events[0].Object.(*rayv1.RayCluster), want.events[0].Object.(*rayv1.RayCluster)
			if c.shared {
				if g.Spec.WorkerGroupSpecs[0].GroupName != "from-the-cache" || &g.Spec.WorkerGroupSpecs[0] != &cached.Spec.WorkerGroupSpecs[0] {
					t.Errorf("the spec is not the cached one: %+v", g.Spec.WorkerGroupSpecs)
				}
				if !takeSpecShared(g) || takeSpecShared(g) {
					t.Error("the shared spec is not marked once for the cache's transform")
				}
				g.Spec = w.Spec
			} else if takeSpecShared(g) {
				t.Error("an object with a spec of its own is marked shared")
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoded %s\n  plain %s", describe(got), describe(want))
			}
		})
	}
}

// The cache's transform interns a shared spec's strings not at all (a reconcile may be reading them), the rest
// of the object's as always.
func TestCacheObjectLeavesASharedSpec(t *testing.T) {
	rc := crDecodeCluster(t)
	rc.Spec.WorkerGroupSpecs[0].GroupName = strings.Clone("small")
	rc.Status.Reason = strings.Clone("a reason")
	spec := unsafe.StringData(rc.Spec.WorkerGroupSpecs[0].GroupName)
	markSpecShared(rc)
	if _, err := cacheObject(rc); err != nil {
		t.Fatal(err)
	}
	if unsafe.StringData(rc.Spec.WorkerGroupSpecs[0].GroupName) != spec {
		t.Error("the shared spec's strings were interned")
	}
	if unsafe.StringData(rc.Status.Reason) != unsafe.StringData(interned.str("a reason")) {
		t.Error("the status's strings were not interned")
	}
	// Unmarked, the spec is interned too.
	if _, err := cacheObject(rc); err != nil {
		t.Fatal(err)
	}
	if unsafe.StringData(rc.Spec.WorkerGroupSpecs[0].GroupName) != unsafe.StringData(interned.str("small")) {
		t.Error("an unshared spec's strings were not interned")
	}
}

// A watch the API server refuses is refused with the same error.
func TestCRWatchDecoderRefused(t *testing.T) {
	h := newCRDecodeHarness(t)
	for _, status := range []int{http.StatusGone, http.StatusForbidden, http.StatusInternalServerError} {
		body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"no","reason":"Expired","code":%d}`, status)
		h.compare(t, status, []byte(body))
	}
}

// Stopping the watch, or cancelling its context, ends it mid-stream.
func TestCRWatchDecoderStops(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	line := crEventLine(t, watch.Added, crDecodeCluster(t))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(line)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(captureWatches)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gvk := rayv1.GroupVersion.WithKind("RayCluster")
	c, err := apiutil.RESTClientForGVK(gvk, false, false, cfg, serializer.NewCodecFactory(scheme), hc)
	if err != nil {
		t.Fatal(err)
	}
	lw := crDecodingListWatch(&toolscache.ListWatch{WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		return c.Get().Resource("rayclusters").VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
	}}, scheme, gvk, optimize.Off(), nil)
	for _, stop := range []string{"Stop", "cancel"} {
		ctx, cancel := context.WithCancel(context.Background())
		w, err := lw.WatchWithContext(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ev := <-w.ResultChan(); ev.Type != watch.Added {
			t.Fatalf("%s: %v", stop, ev)
		}
		if stop == "Stop" {
			w.Stop()
		} else {
			cancel()
		}
		timeout := time.After(time.Minute)
		for open := true; open; {
			select {
			case _, open = <-w.ResultChan():
			case <-timeout:
				t.Fatalf("%s: the watch did not end", stop)
			}
		}
		cancel()
	}
}

// The property: whatever the stream, crWatchDecoder and client-go agree. (go test -fuzz=FuzzCRWatchDecoder
// ./internal/operator explores further.)
func FuzzCRWatchDecoder(f *testing.F) {
	for _, c := range crDecodeCases(f) {
		if len(c.body) < 64<<10 {
			f.Add([]byte(c.body))
		}
	}
	h := newCRDecodeHarness(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		h.compare(t, http.StatusOK, body)
	})
}

// decodeLine's cost beside client-go's for one RayCluster event.
func BenchmarkCRWatchDecode(b *testing.B) {
	scheme, err := Scheme()
	if err != nil {
		b.Fatal(err)
	}
	line := crEventLine(b, watch.Modified, crDecodeCluster(b))
	gvk := rayv1.GroupVersion.WithKind("RayCluster")
	d := &crWatchDecoder{scheme: scheme, gvk: gvk, sw: optimize.Off(), apiVersion: quoted(gvk.GroupVersion().String()), kind: quoted(gvk.Kind)}
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, _, ok := d.decodeLine(line); !ok {
			b.Fatal("not decoded")
		}
	}
}

// callLog records a reflector's calls: each list, and each watch with the resourceVersion it asked for.
type callLog struct {
	toolscache.ListerWatcherWithContext
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *callLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

func (l *callLog) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	l.add("list rv=" + opts.ResourceVersion)
	return l.ListerWatcherWithContext.ListWithContext(ctx, opts)
}

func (l *callLog) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	l.add(fmt.Sprintf("watch rv=%s initial=%v", opts.ResourceVersion, opts.SendInitialEvents != nil && *opts.SendInitialEvents))
	return l.ListerWatcherWithContext.WatchWithContext(ctx, opts)
}

func (l *callLog) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *callLog) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

// A reflector whose decoded watch ends with 410 (too old resource version) lists again (client-go's watch-list, or
// a LIST), making the same calls as over client-go's own decoding: its watch-list ends at 10, the watch from 10 is
// answered 410, and the list after it starts again from no resourceVersion.
func TestCRWatchDecoderGoneRelists(t *testing.T) {
	h := newCRDecodeHarness(t)
	h.status, h.watchList = http.StatusOK, true
	h.body = []byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}` + "\n")
	var logs [2][]string
	for i, lw := range []toolscache.ListerWatcherWithContext{h.plain, h.decoded} {
		l := &callLog{ListerWatcherWithContext: lw}
		r := toolscache.NewReflector(l, &rayv1.RayCluster{}, toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), 0)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.RunWithContext(ctx); close(done) }()
		testutil.Eventually(t, time.Minute, "a list after the 410", func() (bool, string) {
			return len(l.get()) >= 3, strings.Join(l.get(), ", ")
		})
		cancel()
		<-done
		logs[i] = l.get()[:3]
	}
	if !reflect.DeepEqual(logs[0], logs[1]) {
		t.Errorf("decoded: %v\n  plain: %v", logs[1], logs[0])
	}
	relisted := false
	for i, c := range logs[1] {
		if strings.HasPrefix(c, "watch rv=10 ") && i+1 < len(logs[1]) {
			next := logs[1][i+1]
			relisted = strings.HasPrefix(next, "list rv=") || next == "watch rv= initial=true"
			break
		}
	}
	if !relisted {
		t.Errorf("no list after the 410: %v", logs[1])
	}
}
