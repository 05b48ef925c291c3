package operator

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	restclientwatch "k8s.io/client-go/rest/watch"
	"sigs.k8s.io/randfill"
)

// watchFrame encodes obj as the API server sends it in a protobuf watch: a length-prefixed WatchEvent whose object
// is the protobuf envelope (magic, runtime.Unknown) around obj.
func watchFrame(t *testing.T, typ watch.EventType, obj runtime.Object) []byte {
	t.Helper()
	gvks, _, err := clientgoscheme.Scheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	obj = obj.DeepCopyObject()
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	var raw bytes.Buffer
	if err := protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme).Encode(obj, &raw); err != nil {
		t.Fatal(err)
	}
	ev, err := (&metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw.Bytes()}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(ev))), ev...)
}

// decodeWatch decodes a protobuf watch stream as client-go's watch does.
func decodeWatch(body io.ReadCloser) *restclientwatch.Decoder {
	s := protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme)
	raw := protobuf.NewRawSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme)
	return restclientwatch.NewDecoder(streaming.NewDecoder(protobuf.LengthDelimitedFramer.NewFrameReader(body), raw), s)
}

func podFiller(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0.2).NumElements(1, 2).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewQuantity(c.Int63n(1000), resource.DecimalSI)
		},
		func(tm *metav1.Time, c randfill.Continue) { *tm = metav1.Unix(c.Int63n(1<<31), 0) },
		func(tm *metav1.MicroTime, c randfill.Continue) {
			*tm = metav1.NewMicroTime(time.Unix(c.Int63n(1<<31), 0))
		},
	)
}

// Every field of a pod, filled at random: what the cache holds from a pruned watch event is what stripPod makes of
// the whole pod, so podPrune drops exactly what stripPod does, no more and no less.
func TestPrunedPodIsStrippedPod(t *testing.T) {
	var stream bytes.Buffer
	var want []*corev1.Pod
	for seed := range int64(300) {
		p := &corev1.Pod{}
		podFiller(seed).Fill(p)
		p.TypeMeta = metav1.TypeMeta{}
		stream.Write(watchFrame(t, watch.Modified, p))
		// The pod as client-go decodes it from the whole event, then stripped.
		whole := decodeWatch(io.NopCloser(bytes.NewReader(watchFrame(t, watch.Modified, p))))
		_, obj, err := whole.Decode()
		if err != nil {
			t.Fatal(err)
		}
		stripped, _ := stripPod(obj)
		want = append(want, stripped.(*corev1.Pod))
	}
	before := prunedPodFrames.Load()
	whole := stream.Len()
	body := &podWatchBody{rewrittenStream: rewrittenStream{body: io.NopCloser(&stream)}}
	read := &countingReader{r: body}
	d := decodeWatch(read)
	for i, w := range want {
		typ, obj, err := d.Decode()
		if err != nil {
			t.Fatalf("pod %d: %v (prune: %v)", i, err, body.pruneErr)
		}
		if typ != watch.Modified {
			t.Fatalf("pod %d: event %s", i, typ)
		}
		// Not stripped again: the pruned pod itself must be what stripPod makes. (Random annotation keys are
		// never kubectl's last-applied one, which only stripPod drops.)
		if diff := cmp.Diff(w, obj.(*corev1.Pod)); diff != "" {
			t.Fatalf("pod %d: the pruned event decodes to another pod than stripPod makes (-stripPod +pruned):\n%s", i, diff)
		}
	}
	if _, _, err := d.Decode(); !errors.Is(err, io.EOF) {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
	if body.pruneErr != nil || prunedPodFrames.Load()-before != int64(len(want)) {
		t.Errorf("pruned %d of %d frames, last error %v", prunedPodFrames.Load()-before, len(want), body.pruneErr)
	}
	// The point: client-go reads less.
	if read.n >= whole {
		t.Errorf("client-go read %d bytes of a %d-byte stream", read.n, whole)
	}
	t.Logf("client-go read %d bytes of a %d-byte stream", read.n, whole)
}

type countingReader struct {
	r io.ReadCloser
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }

// Frames that are not a v1 Pod event (an ERROR event's Status) pass as they came; a stream cut inside a frame ends
// with io.ErrUnexpectedEOF, as client-go's framer would report it.
func TestPodWatchPassesOtherFrames(t *testing.T) {
	status := watchFrame(t, watch.Error, &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	svc := watchFrame(t, watch.Added, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}}})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}}}
	podFrame := watchFrame(t, watch.Added, pod)
	stream := bytes.Join([][]byte{status, svc, podFrame, podFrame[:len(podFrame)-3]}, nil)
	body := &podWatchBody{rewrittenStream: rewrittenStream{body: io.NopCloser(bytes.NewReader(stream))}}
	all, err := io.ReadAll(body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read: %v, want unexpected EOF", err)
	}
	if !bytes.HasPrefix(all, append(append([]byte{}, status...), svc...)) {
		t.Error("the Status and Service frames were changed")
	}
	pruned := all[len(status)+len(svc):]
	if len(pruned) >= len(podFrame) {
		t.Errorf("pod frame %d bytes, pruned %d", len(podFrame), len(pruned))
	}
	d := decodeWatch(io.NopCloser(bytes.NewReader(all)))
	for _, want := range []watch.EventType{watch.Error, watch.Added, watch.Added} {
		typ, obj, err := d.Decode()
		if err != nil || typ != want {
			t.Fatalf("event %s %T %v, want %s", typ, obj, err, want)
		}
		if p, ok := obj.(*corev1.Pod); ok && (p.ManagedFields != nil || p.Spec.Containers[0].Env != nil || p.Spec.Containers[0].Name != "ray-head") {
			t.Errorf("pod not pruned as stripPod would: %+v", p)
		}
		if s, ok := obj.(*corev1.Service); ok && s.ManagedFields == nil {
			t.Error("Service pruned")
		}
	}
}

func TestIsRayPodWatch(t *testing.T) {
	const sel = "ray.io/node-type"
	for _, tc := range []struct {
		method, path, query string
		want                bool
	}{
		{"GET", "/api/v1/pods", "watch=true&labelSelector=" + url.QueryEscape(sel), true},
		{"GET", "/api/v1/namespaces/ray/pods", "labelSelector=" + url.QueryEscape(sel) + "&watch=1&resourceVersion=5", true},
		{"GET", "/api/v1/pods", "labelSelector=" + url.QueryEscape(sel), false},                                // a list
		{"GET", "/api/v1/pods", "watch=true&labelSelector=app%3Dimage-puller", false},                          // another cache's pods
		{"GET", "/api/v1/namespaces/ray/pods/head", "watch=true&labelSelector=" + url.QueryEscape(sel), false}, // one pod
		{"GET", "/api/v1/services", "watch=true&labelSelector=" + url.QueryEscape(sel), false},
		{"GET", "/apis/ray.io/v1/namespaces/ray/pods", "watch=true&labelSelector=" + url.QueryEscape(sel), false},
		{"POST", "/api/v1/namespaces/ray/pods", "watch=true&labelSelector=" + url.QueryEscape(sel), false},
	} {
		r := &http.Request{Method: tc.method, URL: &url.URL{Path: tc.path, RawQuery: tc.query}}
		if got := isRayPodWatch(r, sel); got != tc.want {
			t.Errorf("%s %s?%s: %v, want %v", tc.method, tc.path, tc.query, got, tc.want)
		}
	}
}
