package operator

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	kjson "sigs.k8s.io/json"

	"github.com/manta-dev/manta/internal/controller/shared/optimize"
)

// client-go reads each event of a JSON watch about five times (its framer, the WatchEvent's checkValid and decode,
// the copy into RawExtension, the object's apiVersion/kind, the object's checkValid and decode). For the custom
// resources' informers crWatchDecoder reads an event line once to find its type and object and decodes the object
// once, the way client-go would. Anything else it hands, with the rest of the stream, to client-go's own watch
// decoding, so ERROR events, lines that do not parse and the stream's end behave exactly as without it.

// crDecodedKinds are the kinds whose informers' watches crWatchDecoder decodes: those of crWatchResources.
var crDecodedKinds = map[schema.GroupVersionKind]bool{
	{Group: "ray.io", Version: "v1", Kind: "RayCluster"}:            true,
	{Group: "ray.io", Version: "v1", Kind: "RayJob"}:                true,
	{Group: "ray.io", Version: "v1", Kind: "RayService"}:            true,
	{Group: "ray.io", Version: "v1", Kind: "RayCronJob"}:            true,
	{Group: "manta.dev", Version: "v1alpha1", Kind: "ImagePullJob"}: true,
}

// watchCaptureKey marks the context of a watch request whose response captureWatches keeps for the caller.
type watchCaptureKey struct{}

// watchCapture holds a captured watch response, and the body client-go was given in its place; protobuf says
// which media type is captured (JSON otherwise).
type watchCapture struct {
	resp     *http.Response
	body     *handoffBody
	protobuf bool
}

// captureWatches wraps the operator's transport (outermost, so that the other wrappers act as always): a watch
// whose request context carries a *watchCapture, answered 200 in the media type it captures, answers 200 to
// client-go with a body that stays empty until the decoder (crWatchDecoder, podWatchDecoder) hands it what it does
// not decode itself; the real response is kept in the capture. The request itself is client-go's: its URL,
// parameters, auth, retries and metrics are unchanged, and so is every other answer (a non-200 answer reaches
// client-go as it came, to become the same error).
func captureWatches(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		c, _ := r.Context().Value(watchCaptureKey{}).(*watchCapture)
		if c == nil || err != nil || resp.StatusCode != http.StatusOK {
			return resp, err
		}
		if (c.protobuf && !isProtobufWatch(resp)) || (!c.protobuf && !isJSONWatch(resp)) {
			return resp, err
		}
		if c.resp != nil { // a retried request: the earlier answer is done with
			_ = c.resp.Body.Close()
		}
		c.resp = resp
		stand := *resp
		stand.Header = resp.Header.Clone()
		stand.Body = c.body
		return &stand, nil
	})
}

// DecodeWatches is the cache's NewInformer: with cr-watch-decoding the informers of crDecodedKinds watch through
// crWatchDecoder, with pod-watch-decoding the informers of Pods through podWatchDecoder; every other informer is
// the one controller-runtime would make. Their config's transport needs captureWatches (NewManager's, with either
// on); exported for tests of a cache of their own.
func DecodeWatches(scheme *runtime.Scheme, sw *optimize.Switches) func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer {
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		if _, ok := obj.(*corev1.Pod); ok && sw.On(optimize.PodWatchDecoding) {
			return toolscache.NewSharedIndexInformer(podDecodingListWatch(lw, sw), obj, resync, idx)
		}
		gvk, ok := crDecodedKind(scheme, obj)
		if !ok || !sw.On(optimize.CRWatchDecoding) {
			return toolscache.NewSharedIndexInformer(lw, obj, resync, idx)
		}
		var inf toolscache.SharedIndexInformer
		cached := func(key string) (any, bool) {
			o, exists, err := inf.GetIndexer().GetByKey(key)
			return o, exists && err == nil
		}
		inf = toolscache.NewSharedIndexInformer(crDecodingListWatch(lw, scheme, gvk, sw, cached), obj, resync, idx)
		return inf
	}
}

// crDecodedKind returns obj's kind if it is one of crDecodedKinds as its typed struct (not unstructured, not
// metadata only).
func crDecodedKind(scheme *runtime.Scheme, obj runtime.Object) (schema.GroupVersionKind, bool) {
	gvks, _, err := scheme.ObjectKinds(obj)
	if err != nil {
		return schema.GroupVersionKind{}, false
	}
	for _, gvk := range gvks {
		if !crDecodedKinds[gvk] {
			continue
		}
		if n, err := scheme.New(gvk); err == nil && reflect.TypeOf(n) == reflect.TypeOf(obj) {
			return gvk, true
		}
	}
	return schema.GroupVersionKind{}, false
}

// crDecodingListWatch lists as lw does and watches through lw too, its JSON answer decoded by crWatchDecoder;
// cached reads the informer's store by key (see crspec.go).
func crDecodingListWatch(lw toolscache.ListerWatcher, scheme *runtime.Scheme, gvk schema.GroupVersionKind, sw *optimize.Switches, cached func(key string) (any, bool)) *toolscache.ListWatch {
	return capturingListWatch(lw, false, func(body io.ReadCloser, client watch.Interface, handed *handoffBody) watch.Decoder {
		d := &crWatchDecoder{
			body:     body,
			r:        bufio.NewReaderSize(body, 64<<10),
			handover: handover{client: client, handed: handed},
			scheme:   scheme,
			gvk:      gvk,
			sw:       sw,
		}
		if ops, ok := crSpecOps[gvk]; ok && sw.On(optimize.CRSpecSharing) && cached != nil {
			d.spec, d.cached = &ops, cached
		}
		d.apiVersion, d.kind = quoted(gvk.GroupVersion().String()), quoted(gvk.Kind)
		return d
	})
}

func quoted(s string) []byte { return []byte(`"` + s + `"`) }

// crWatchDecoder is a watch.Decoder over a JSON watch stream, one event per line as the API server writes it. A
// line that is one valid ADDED, MODIFIED, DELETED or BOOKMARK event of gvk (checked as client-go's decoding would
// read it) it decodes itself; at the first other line, or the stream's end or failure, it hands that line and the
// rest of the stream to client-go's watch (client), and from then on passes on client's events.
type crWatchDecoder struct {
	body io.ReadCloser
	r    *bufio.Reader
	long []byte
	handover

	scheme           *runtime.Scheme
	gvk              schema.GroupVersionKind
	apiVersion, kind []byte // as they appear in an event's object, quoted
	sw               *optimize.Switches

	// spec and cached, when set, let an update take its spec from the cached object (crspec.go); buf holds the
	// object with its spec left out.
	spec   *specOps
	cached func(key string) (any, bool)
	buf    []byte
}

// maxCREventBytes is client-go's bound on one watch event (its streaming decoder's): a longer line is client-go's
// to refuse.
const maxCREventBytes = 16 << 20

func (d *crWatchDecoder) Decode() (watch.EventType, runtime.Object, error) {
	if !d.done {
		line, err := d.readLine()
		for err == nil && skipSpace(line, 0) == len(line) { // client-go skips whitespace between events too
			line, err = d.readLine()
		}
		if err == nil && len(line) <= maxCREventBytes {
			if typ, obj, ok := d.decodeLine(line); ok {
				d.sw.Acted(optimize.CRWatchDecoding)
				return typ, obj, nil
			}
		}
		d.handOver(line, d.r, err)
	}
	return d.next()
}

// Close ends the stream and client's watch.
func (d *crWatchDecoder) Close() {
	_ = d.body.Close()
	d.client.Stop()
}

// readLine returns the next line, its '\n' included (valid until the next call), or what came before the stream
// ended and why.
func (d *crWatchDecoder) readLine() ([]byte, error) {
	line, err := d.r.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return line, err
	}
	d.long = append(d.long[:0], line...)
	for err == bufio.ErrBufferFull {
		line, err = d.r.ReadSlice('\n')
		d.long = append(d.long, line...)
	}
	return d.long, err
}

// decodeLine decodes line as client-go would (the object: sigs.k8s.io/json, case-sensitive, into a new object of
// gvk, its TypeMeta then cleared as controller-runtime's client codec does), if line is an event crWatchDecoder
// decodes and the decoding succeeds.
func (d *crWatchDecoder) decodeLine(line []byte) (watch.EventType, runtime.Object, bool) {
	ev, ok := scanCREvent(line)
	if !ok || !bytes.Equal(ev.apiVersion, d.apiVersion) || !bytes.Equal(ev.kind, d.kind) {
		return "", nil, false
	}
	var typ watch.EventType
	switch string(ev.typ) {
	case `"ADDED"`:
		typ = watch.Added
	case `"MODIFIED"`:
		typ = watch.Modified
	case `"DELETED"`:
		typ = watch.Deleted
	case `"BOOKMARK"`:
		typ = watch.Bookmark
	default: // ERROR, or one client-go refuses
		return "", nil, false
	}
	obj, err := d.scheme.New(d.gvk)
	if err != nil {
		return "", nil, false
	}
	if d.spec != nil && (typ == watch.Modified || typ == watch.Deleted) && ev.specs == 1 {
		if !d.decodeSharingSpec(&ev, obj) {
			return "", nil, false
		}
	} else if err := kjson.UnmarshalCaseSensitivePreserveInts(ev.object, obj); err != nil {
		return "", nil, false
	}
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return typ, obj, true
}

// crEvent is what scanCREvent found of an event line: its type and object, and the object's apiVersion and kind
// (quotes included).
type crEvent struct {
	typ, object, apiVersion, kind []byte
	// spec is the object's "spec" value (a subslice of object), specs how many "spec" keys it has; objectAt and
	// specAt are where the object and the spec start in the line.
	spec             []byte
	specs            int
	objectAt, specAt int
}

// scanCREvent validates line as one JSON object and finds its type and object, and the object's apiVersion and
// kind. ok is false unless each appears exactly once, as an unescaped string (the object as an object), and no key
// of the event or its object could read differently to client-go: escaped or non-ASCII keys, keys that
// encoding/json (which client-go reads apiVersion and kind with) would take for apiVersion or kind, and the event
// having either.
func scanCREvent(line []byte) (ev crEvent, ok bool) {
	i := skipSpace(line, 0)
	if i == len(line) || line[i] != '{' {
		return ev, false
	}
	bad := false
	var nType, nObject, nAPIVersion, nKind int
	end := objectMembers(line, i, func(key []byte, escaped bool, v int) int {
		if escaped || !asciiKey(key) || typeMetaKey(key) {
			bad = true
		}
		switch string(key) {
		case "type":
			nType++
			end := skipValue(line, v, 1)
			if end > 0 && line[v] == '"' {
				ev.typ = line[v:end]
			}
			return end
		case "object":
			nObject++
			if line[v] != '{' {
				bad = true
				return skipValue(line, v, 1)
			}
			end := objectMembers(line, v, func(key []byte, escaped bool, w int) int {
				if escaped || !asciiKey(key) {
					bad = true
				}
				end := skipValue(line, w, 2)
				if end < 0 {
					return end
				}
				switch {
				case string(key) == "apiVersion":
					nAPIVersion++
					ev.apiVersion = line[w:end]
				case string(key) == "kind":
					nKind++
					ev.kind = line[w:end]
				case string(key) == "spec":
					ev.specs++
					ev.spec, ev.specAt = line[w:end], w
				case typeMetaKey(key):
					bad = true
				}
				return end
			})
			if end > 0 {
				ev.object, ev.objectAt = line[v:end], v
			}
			return end
		}
		return skipValue(line, v, 1)
	})
	if end < 0 || skipSpace(line, end) != len(line) || bad || nType != 1 || nObject != 1 || nAPIVersion != 1 || nKind != 1 {
		return ev, false
	}
	return ev, true
}

// typeMetaKey says whether encoding/json would read key (ASCII) as apiVersion or kind.
func typeMetaKey(key []byte) bool {
	return strings.EqualFold(string(key), "apiVersion") || strings.EqualFold(string(key), "kind")
}

func asciiKey(key []byte) bool {
	for _, c := range key {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// objectMembers validates the object at b[i] ('{'), calling member with each key (between its quotes), whether it
// has escapes and where its value starts; member returns the value's end, or -1 if it is not valid JSON. It returns
// the object's end, or -1.
func objectMembers(b []byte, i int, member func(key []byte, escaped bool, v int) int) int {
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return -1
		}
		end, escaped := scanString(b, i)
		if end < 0 {
			return -1
		}
		key := b[i+1 : end-1]
		if i = skipSpace(b, end); i >= len(b) || b[i] != ':' {
			return -1
		}
		if i = skipSpace(b, i+1); i >= len(b) {
			return -1
		}
		if i = member(key, escaped, i); i < 0 {
			return -1
		}
		if i = skipSpace(b, i); i >= len(b) {
			return -1
		}
		switch b[i] {
		case '}':
			return i + 1
		case ',':
			i = skipSpace(b, i+1)
		default:
			return -1
		}
	}
}

// skipValue validates the JSON value at b[i] (at nesting depth) and returns its end, or -1.
func skipValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	var s eventScan // past level 2 it only validates
	return s.value(b, i, depth)
}

// handover is what a decoder of a watch stream of its own (crWatchDecoder, podWatchDecoder) hands client-go's watch
// (client) at the first event it does not decode: that event and the rest of the stream, through the body client-go
// reads (handed). done says it has.
type handover struct {
	client watch.Interface
	handed *handoffBody
	done   bool
}

// handOver gives client-go read (what was read of the event, copied) and then rest, or the error that ended the
// stream there.
func (h *handover) handOver(read []byte, rest io.Reader, err error) {
	if err != nil {
		rest = errReader{err}
	}
	h.done = true
	h.handed.give(io.MultiReader(bytes.NewReader(bytes.Clone(read)), rest))
}

// next passes on client-go's next event.
func (h *handover) next() (watch.EventType, runtime.Object, error) {
	ev, ok := <-h.client.ResultChan()
	if !ok {
		return "", nil, io.EOF
	}
	return ev.Type, ev.Object, nil
}

// errReader ends client-go's read of a stream as the stream ended.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// handoffBody is the body client-go's watch reads: nothing until crWatchDecoder gives it the rest of the stream,
// io.EOF if it is closed first.
type handoffBody struct {
	once  sync.Once
	ready chan struct{}
	r     io.Reader
}

func newHandoffBody() *handoffBody { return &handoffBody{ready: make(chan struct{})} }

func (h *handoffBody) give(r io.Reader) {
	h.once.Do(func() {
		h.r = r
		close(h.ready)
	})
}

func (h *handoffBody) Read(p []byte) (int, error) {
	<-h.ready
	if h.r == nil {
		return 0, io.EOF
	}
	return h.r.Read(p)
}

func (h *handoffBody) Close() error {
	h.give(nil)
	return nil
}
