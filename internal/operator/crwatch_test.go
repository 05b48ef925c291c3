package operator

import (
	"bytes"
	stdjson "encoding/json"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
)

// withoutManagedFields is what json.Unmarshal reads of line, with object.metadata.managedFields deleted.
func withoutManagedFields(t testing.TB, line []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := stdjson.Unmarshal(line, &m); err != nil {
		t.Fatalf("%v: %q", err, line)
	}
	if obj, ok := m["object"].(map[string]any); ok {
		if md, ok := obj["metadata"].(map[string]any); ok {
			delete(md, "managedFields")
		}
	}
	return m
}

// checkPrune holds pruneManagedFields to its promise for line: either line unchanged, or valid JSON that reads as
// line does with object.metadata.managedFields deleted. It returns whether line was pruned.
func checkPrune(t testing.TB, line []byte) bool {
	t.Helper()
	in := bytes.Clone(line)
	out, pruned := pruneManagedFields(line)
	if !pruned {
		if !bytes.Equal(out, in) {
			t.Fatalf("not pruned but changed:\n in %q\nout %q", in, out)
		}
		return false
	}
	if !stdjson.Valid(in) {
		t.Fatalf("pruned a line that is not valid JSON: %q", in)
	}
	if !stdjson.Valid(out) {
		t.Fatalf("pruned to invalid JSON:\n in %q\nout %q", in, out)
	}
	var got map[string]any
	if err := stdjson.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if want := withoutManagedFields(t, in); !reflect.DeepEqual(got, want) {
		t.Fatalf("pruned line reads otherwise than the line without managedFields:\n%s", cmp.Diff(want, got))
	}
	if len(out) >= len(in) {
		t.Fatalf("pruned but no shorter: %q", out)
	}
	return true
}

const mf = `"managedFields":[{"manager":"m","operation":"Update","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:a":{}}}}}]`

var pruneCases = []struct {
	name   string
	line   string
	pruned bool
}{
	{"managedFields first", `{"type":"ADDED","object":{"metadata":{` + mf + `,"name":"a","namespace":"n"},"spec":{}}}`, true},
	{"managedFields middle", `{"type":"MODIFIED","object":{"metadata":{"name":"a",` + mf + `,"namespace":"n"}}}`, true},
	{"managedFields last", `{"type":"DELETED","object":{"metadata":{"name":"a","namespace":"n",` + mf + `}}}`, true},
	{"managedFields alone", `{"type":"ADDED","object":{"metadata":{` + mf + `}}}`, true},
	{"metadata first in object", `{"type":"ADDED","object":{"metadata":{"name":"a",` + mf + `},"kind":"RayCluster","spec":{"x":[1,2]}}}`, true},
	{"metadata last in object", `{"type":"ADDED","object":{"apiVersion":"ray.io/v1","kind":"RayCluster","status":{},"metadata":{"name":"a",` + mf + `}}}`, true},
	{"object first in event", `{"object":{"metadata":{"name":"a",` + mf + `}},"type":"ADDED"}`, true},
	{"escapes in strings", `{"type":"ADDED","object":{"spec":{"cmd":"a\"}]","k\"}":"\\"},"metadata":{"annotations":{"x\"}]":"{\"managedFields\":[]}"},` +
		`"managedFields":[{"manager":"a\"}]","fieldsV1":{"f:data":{"f:x\"}]\\":{}}}}],"name":"a\\\""}}}`, true},
	{"nested arrays", `{"type":"ADDED","object":{"metadata":{"managedFields":[[[],[[{"a":[1,[2,{"b":[]}]]}]]],{}],"name":"a"},"spec":[[[[]]]]}}`, true},
	{"unicode escapes", `{"type":"ADDED","object":{"metadata":{"name":"\u00e9\ud83d\ude00","managedFields":[{"manager":"\u003cm\u003e"}],"labels":{"\u0061":"\u2028"}}}}`, true},
	{"raw UTF-8", `{"type":"ADDED","object":{"metadata":{"name":"é😀","managedFields":[{"manager":"ü"}]}}}`, true},
	{"numbers and literals", `{"type":"ADDED","object":{"metadata":{"generation":-1.5e+10,"managedFields":[0,-0.0,1E3,true,false,null],"x":null},"n":[0,12.25,-3e-2]}}`, true},
	{"spaces between tokens", `{ "type" : "ADDED" , "object" : { "metadata" : { "name" : "a" , ` + mf + ` , "uid" : "u" } } }` + " \r", true},
	{"spaces, last member", `{"type":"ADDED","object":{"metadata":{"name":"a" ,  ` + mf + `  }}}`, true},
	{"trailing newline", `{"type":"ADDED","object":{"metadata":{"name":"a",` + mf + `}}}` + "\n", true},
	{"no managedFields", `{"type":"ADDED","object":{"metadata":{"name":"a","annotations":{"managedFields":"[]"}},"spec":{"managedFields":[1]}}}`, false},
	{"managedFields outside metadata", `{"type":"ADDED","object":{"managedFields":[],"metadata":{"name":"a"}},"managedFields":[]}`, false},
	{"bookmark", `{"type":"BOOKMARK","object":{"kind":"RayCluster","apiVersion":"ray.io/v1","metadata":{"resourceVersion":"12","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}}}}`, false},
	{"error", `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}`, false},
	{"error with managedFields", `{"type":"ERROR","object":{"metadata":{` + mf + `}}}`, false},
	{"type escaped", `{"type":"ADD\u0045D","object":{"metadata":{` + mf + `}}}`, false},
	{"metadata twice", `{"type":"ADDED","object":{"metadata":{` + mf + `},"metadata":{"name":"b"}}}`, false},
	{"managedFields twice", `{"type":"ADDED","object":{"metadata":{` + mf + `,` + mf + `}}}`, false},
	{"object twice", `{"type":"ADDED","object":{"metadata":{` + mf + `}},"object":{}}`, false},
	{"escaped key", `{"type":"ADDED","object":{"metadata":{"m\u0061nagedFields":[],"name":"a"}}}`, false},
	{"metadata not an object", `{"type":"ADDED","object":{"metadata":[` + "{" + mf + "}" + `]}}`, false},
	{"truncated", `{"type":"ADDED","object":{"metadata":{"name":"a",` + mf + `}}`, false},
	{"trailing garbage", `{"type":"ADDED","object":{"metadata":{"name":"a",` + mf + `}}}x`, false},
	{"two values", `{"type":"ADDED","object":{"metadata":{"name":"a",` + mf + `}}} {}`, false},
	{"bad escape", `{"type":"ADDED","object":{"metadata":{"name":"\x",` + mf + `}}}`, false},
	{"bad unicode escape", `{"type":"ADDED","object":{"metadata":{"name":"\u12g4",` + mf + `}}}`, false},
	{"control character", "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\tb\"," + mf + "}}}", false},
	{"bad number", `{"type":"ADDED","object":{"metadata":{"generation":01,` + mf + `}}}`, false},
	{"trailing comma", `{"type":"ADDED","object":{"metadata":{"name":"a",` + mf + `,}}}`, false},
	{"too deep", `{"type":"ADDED","object":{"metadata":{` + mf + `,"x":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}}}`, false},
	{"not an object", `[{"type":"ADDED","object":{"metadata":{` + mf + `}}}]`, false},
	{"empty", ``, false},
}

func TestPruneManagedFields(t *testing.T) {
	for _, c := range pruneCases {
		t.Run(c.name, func(t *testing.T) {
			if got := checkPrune(t, []byte(c.line)); got != c.pruned {
				t.Errorf("pruned %v, want %v", got, c.pruned)
			}
		})
	}
}

// hugeEvent is a RayCluster ADDED event of over 1 MB, most of it in a string escaped throughout and in its
// managedFields.
func hugeEvent() string {
	big := strings.Repeat(`a\"}]\\{[`, 60_000)
	entries := strings.Repeat(`{"manager":"`+big[:90]+`","fieldsV1":{"f:spec":{"f:x":{}}}},`, 5_000)
	return `{"type":"MODIFIED","object":{"apiVersion":"ray.io/v1","kind":"RayCluster","metadata":{"name":"big","annotations":{"a":"` + big +
		`"},"managedFields":[` + entries + `{}]},"spec":{"cmd":"` + big + `"}}}`
}

func TestPruneManagedFieldsHugeLine(t *testing.T) {
	line := hugeEvent()
	if len(line) < 1<<20 {
		t.Fatalf("%d bytes", len(line))
	}
	if !checkPrune(t, []byte(line)) {
		t.Error("not pruned")
	}
}

// The property: whatever the line, pruneManagedFields either leaves it as it is or cuts exactly
// object.metadata.managedFields out of valid JSON; it never panics. (go test -fuzz=FuzzPruneManagedFields
// ./internal/operator explores further.)
func FuzzPruneManagedFields(f *testing.F) {
	for _, c := range pruneCases {
		f.Add([]byte(c.line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		checkPrune(t, line)
	})
}

// rayClusterEvent is the JSON watch event line the API server sends for c.
func rayClusterEvent(t *testing.T, typ watch.EventType, c *rayv1.RayCluster) []byte {
	t.Helper()
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

// Through crWatchBody, client-go's JSON watch decoder reads each RayCluster as stripUnread would make it of the
// whole event, reading fewer bytes; lines longer than the read buffer, read a byte at a time, and an ERROR event
// pass too.
func TestCRWatchBodyDecodes(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	var want []*rayv1.RayCluster
	for i := range 5 {
		c := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "n", ResourceVersion: "7",
			Annotations: map[string]string{"x": strings.Repeat("y", i*40_000)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "manta", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "ray.io/v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:a\"}":{}}}`)},
				{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, Subresource: "status"}}}}
		stream.Write(rayClusterEvent(t, watch.Modified, c))
		stripped, _ := stripUnread(c.DeepCopy())
		want = append(want, stripped.(*rayv1.RayCluster))
	}
	status := `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"gone","reason":"Expired","code":410}}` + "\n"
	stream.WriteString(status)
	whole := stream.Len()
	before, beforeKept := prunedCREvents.Load(), keptCREvents.Load()
	sw := optimize.Off()
	read := &countingReader{r: newCRWatchBody(io.NopCloser(iotest.OneByteReader(&stream)), sw)}
	codecs := serializer.NewCodecFactory(scheme)
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	d := restclientwatch.NewDecoder(streaming.NewDecoder(json.Framer.NewFrameReader(read), info.StreamSerializer.Serializer),
		codecs.UniversalDeserializer())
	for i, w := range want {
		typ, obj, err := d.Decode()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		got := obj.(*rayv1.RayCluster)
		got.TypeMeta = metav1.TypeMeta{}
		if typ != watch.Modified {
			t.Errorf("event %d: %s", i, typ)
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Fatalf("event %d (-stripUnread +pruned):\n%s", i, diff)
		}
	}
	if typ, obj, err := d.Decode(); err != nil || typ != watch.Error || obj.(*metav1.Status).Code != 410 {
		t.Errorf("the ERROR event: %s %v %v", typ, obj, err)
	}
	if _, _, err := d.Decode(); err != io.EOF {
		t.Errorf("after the last event: %v, want io.EOF", err)
	}
	if n := prunedCREvents.Load() - before; n != int64(len(want)) || sw.Count(optimize.CRWatchPruning) != n {
		t.Errorf("%d events pruned (switches counted %d), want %d", n, sw.Count(optimize.CRWatchPruning), len(want))
	}
	if n := keptCREvents.Load() - beforeKept; n != 1 {
		t.Errorf("%d events kept, want the ERROR event", n)
	}
	if read.n >= whole {
		t.Errorf("client-go read %d bytes of a %d-byte stream", read.n, whole)
	}
	t.Logf("client-go read %d bytes of a %d-byte stream", read.n, whole)
}

// A stream ending inside a line hands that tail on as it came, then io.EOF; a long line is gathered whole.
func TestCRWatchBodyTail(t *testing.T) {
	huge := hugeEvent()
	lines := []string{
		`{"type":"ADDED","object":{"metadata":{"name":"a",` + mf + `}}}` + "\n",
		huge + "\n",
		`{"type":"ADDED","object":{"metadata":{"name":"b",` + mf + `}}}`, // no newline: the stream was cut
	}
	all, err := io.ReadAll(newCRWatchBody(io.NopCloser(strings.NewReader(strings.Join(lines, ""))), nil))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"ADDED","object":{"metadata":{"name":"a"}}}` + "\n"
	hugeOut, _ := pruneManagedFields([]byte(huge + "\n"))
	want += string(hugeOut) + lines[2]
	if string(all) != want {
		t.Errorf("read %d bytes, want %d", len(all), len(want))
	}
}

// Only the JSON watches of the custom resources the cache strips are wrapped.
func TestPruneCRWatchesSelects(t *testing.T) {
	cases := []struct {
		method, url, contentType string
		status                   int
		want                     bool
	}{
		{"GET", "/apis/ray.io/v1/rayclusters?watch=true", "application/json;stream=watch", 200, true},
		{"GET", "/apis/ray.io/v1/namespaces/n/rayjobs?watch=1&resourceVersion=5", "application/json; stream=watch", 200, true},
		{"GET", "/apis/ray.io/v1/rayservices?watch=true", "application/json;stream=watch", 200, true},
		{"GET", "/apis/ray.io/v1/raycronjobs?watch=true", "application/json;stream=watch", 200, true},
		{"GET", "/apis/manta.dev/v1alpha1/namespaces/n/imagepulljobs?watch=true", "application/json;stream=watch", 200, true},
		{"GET", "/apis/ray.io/v1/rayclusters?watch=true", "application/json", 200, true},
		{"GET", "/apis/ray.io/v1/rayclusters?watch=true", "application/json;stream=other", 200, false},
		{"GET", "/apis/ray.io/v1/rayclusters", "application/json", 200, false},
		{"GET", "/apis/ray.io/v1/rayclusters?watch=false", "application/json;stream=watch", 200, false},
		{"GET", "/apis/ray.io/v1/rayclusters?watch=true", "application/json;stream=watch", 410, false},
		{"GET", "/apis/ray.io/v1/rayclusters?watch=true", "application/vnd.kubernetes.protobuf;stream=watch", 200, false},
		{"GET", "/apis/ray.io/v1/namespaces/n/rayclusters/c?watch=true", "application/json;stream=watch", 200, false},
		{"GET", "/apis/ray.io/v1alpha1/rayclusters?watch=true", "application/json;stream=watch", 200, false},
		{"GET", "/apis/apps/v1/deployments?watch=true", "application/json;stream=watch", 200, false},
		{"GET", "/api/v1/pods?watch=true", "application/json;stream=watch", 200, false},
		{"POST", "/apis/ray.io/v1/rayclusters?watch=true", "application/json;stream=watch", 200, false},
	}
	for _, c := range cases {
		u, _ := url.Parse("https://apiserver" + c.url)
		rt := pruneCRWatches(nil)(roundTripFunc(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: c.status, Header: http.Header{"Content-Type": {c.contentType}}, Body: io.NopCloser(strings.NewReader(""))}, nil
		}))
		resp, err := rt.RoundTrip(&http.Request{Method: c.method, URL: u})
		if err != nil {
			t.Fatal(err)
		}
		if _, got := resp.Body.(*crWatchBody); got != c.want {
			t.Errorf("%s %s (%s, %d): wrapped %v, want %v", c.method, c.url, c.contentType, c.status, got, c.want)
		}
	}
}

// Per event, pruning allocates nothing: the line is cut in place in the read buffer.
func TestCRWatchBodyAllocs(t *testing.T) {
	line := []byte(`{"type":"MODIFIED","object":{"apiVersion":"ray.io/v1","kind":"RayCluster","metadata":{"name":"a",` + mf + `},"spec":{"x":[1,2,{"y":"z"}]}}}` + "\n")
	body := newCRWatchBody(io.NopCloser(&repeatReader{line: line}), nil)
	buf := make([]byte, 4096)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := body.Read(buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per read", allocs)
	}
}

// repeatReader reads line again and again, without end.
type repeatReader struct {
	line []byte
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := copy(p, r.line[r.off:])
	r.off = (r.off + n) % len(r.line)
	return n, nil
}

func BenchmarkPruneManagedFields(b *testing.B) {
	line := []byte(`{"type":"MODIFIED","object":{"apiVersion":"ray.io/v1","kind":"RayCluster","metadata":{"name":"a","namespace":"n",` + mf + `},"spec":{"x":[1,2,{"y":"z"}],"s":"` + strings.Repeat("abc\\\"", 500) + `"}}}` + "\n")
	buf := make([]byte, len(line))
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		copy(buf, line)
		pruneManagedFields(buf)
	}
}
