package operator

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	restclientwatch "k8s.io/client-go/rest/watch"

	"github.com/manta-dev/manta/internal/controller/shared/optimize"
)

// watchEvents reads every event of w until it ends.
func watchEvents(w watch.Interface) []watch.Event {
	var evs []watch.Event
	for ev := range w.ResultChan() {
		evs = append(evs, ev)
	}
	return evs
}

func reporter() watch.Reporter {
	return apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")
}

// decodedPodWatch watches stream (pruned by podWatchBody when pruned) through podWatchDecoder, with client-go's
// watch behind it as podDecodingListWatch sets it up; it returns the events and how many podWatchDecoder decoded.
func decodedPodWatch(stream []byte, pruned bool) ([]watch.Event, int64) {
	sw := optimize.Off()
	var body io.ReadCloser = io.NopCloser(bytes.NewReader(stream))
	if pruned {
		body = &podWatchBody{rewrittenStream: rewrittenStream{body: body}}
	}
	handed := newHandoffBody()
	client := watch.NewStreamWatcher(decodeWatchAsCache(handed), reporter())
	d := &podWatchDecoder{body: body, handover: handover{client: client, handed: handed}, sw: sw}
	d.pruned, _ = body.(*podWatchBody)
	evs := watchEvents(watch.NewStreamWatcher(d, reporter()))
	return evs, sw.Count(optimize.PodWatchDecoding)
}

// clientGoPodWatch watches stream (pruned when pruned) through client-go's watch decoding alone.
func clientGoPodWatch(stream []byte, pruned bool) []watch.Event {
	var body io.ReadCloser = io.NopCloser(bytes.NewReader(stream))
	if pruned {
		body = &podWatchBody{rewrittenStream: rewrittenStream{body: body}}
	}
	return watchEvents(watch.NewStreamWatcher(decodeWatchAsCache(body), reporter()))
}

// decodeWatchAsCache decodes a protobuf watch stream as client-go's watch does for controller-runtime's cache,
// whose codec clears each object's TypeMeta (runtime.WithoutVersionDecoder).
func decodeWatchAsCache(body io.ReadCloser) *restclientwatch.Decoder {
	s := protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme)
	raw := protobuf.NewRawSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme)
	return restclientwatch.NewDecoder(streaming.NewDecoder(protobuf.LengthDelimitedFramer.NewFrameReader(body), raw),
		runtime.WithoutVersionDecoder{Decoder: s})
}

// rawFrame frames a hand-made WatchEvent.
func rawFrame(ev []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(ev))), ev...)
}

// Every event of a pod watch reaches the informer as client-go's decoding makes it: random pods in each event
// type client-go accepts, with and without podWatchBody's pruning in front; after a frame podWatchDecoder does not
// decode (an ERROR event, an envelope it does not read, a Service) client-go decodes the rest, and a stream cut
// inside a frame ends as client-go ends it.
func TestPodWatchDecoderMatchesClientGo(t *testing.T) {
	types := []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark}
	var pods [][]byte
	for seed := range int64(200) {
		p := &corev1.Pod{}
		podFiller(seed).Fill(p)
		p.TypeMeta = metav1.TypeMeta{}
		pods = append(pods, watchFrame(t, types[seed%int64(len(types))], p))
	}
	podEv := pods[0][4:]
	status := watchFrame(t, watch.Error, &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	svc := watchFrame(t, watch.Added, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
	// The same pod event with its type field twice, and with an unknown field added (which decoders skip).
	twice := rawFrame(append(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "ADDED"), podEv...))
	unknownField := rawFrame(protowire.AppendVarint(protowire.AppendTag(append([]byte{}, podEv...), 9, protowire.VarintType), 7))
	badType := rawFrame(append(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "CHANGED"), podEv[len(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "ADDED")):]...))
	head := bytes.Join(pods[:100], nil)
	tail := bytes.Join(pods[100:], nil)
	last := pods[len(pods)-1]
	for _, tc := range []struct {
		name    string
		stream  []byte
		decoded int // events podWatchDecoder decodes itself
	}{
		{"pods", bytes.Join([][]byte{head, tail}, nil), 200},
		{"unknown field", bytes.Join([][]byte{head, unknownField, tail}, nil), 201},
		{"error event", bytes.Join([][]byte{head, status, tail}, nil), 100},
		{"service", bytes.Join([][]byte{head, svc, tail}, nil), 100},
		{"type twice", bytes.Join([][]byte{head, twice, tail}, nil), 100},
		{"unknown type", bytes.Join([][]byte{head, badType, tail}, nil), 100},
		{"cut in a frame", bytes.Join([][]byte{head, last[:len(last)-3]}, nil), 100},
		{"cut in a length", bytes.Join([][]byte{head, last[:2]}, nil), 100},
		{"empty", nil, 0},
	} {
		for _, pruned := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/pruned=%v", tc.name, pruned), func(t *testing.T) {
				want := clientGoPodWatch(tc.stream, pruned)
				got, decoded := decodedPodWatch(tc.stream, pruned)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("events differ from client-go's (-client-go +decoded):\n%s", diff)
				}
				if decoded != int64(tc.decoded) {
					t.Errorf("podWatchDecoder decoded %d events, want %d (of %d)", decoded, tc.decoded, len(want))
				}
				for _, ev := range got {
					if p, ok := ev.Object.(*corev1.Pod); ok && p.TypeMeta != (metav1.TypeMeta{}) {
						t.Fatalf("pod %s decoded with TypeMeta %v", p.Name, p.TypeMeta)
					}
				}
			})
		}
	}
}

// A frame longer than client-go's bound is client-go's to refuse.
func TestPodWatchDecoderLeavesLongFrames(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"a": string(bytes.Repeat([]byte("x"), maxPodFrameBytes))}}}
	stream := append(watchFrame(t, watch.Added, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "first"}}), watchFrame(t, watch.Added, p)...)
	for _, pruned := range []bool{false, true} {
		want := clientGoPodWatch(stream, pruned)
		got, decoded := decodedPodWatch(stream, pruned)
		if diff := cmp.Diff(want, got, cmp.Transformer("kind", func(o runtime.Object) string { return fmt.Sprintf("%T", o) })); diff != "" {
			t.Errorf("pruned=%v: events differ from client-go's (-client-go +decoded):\n%s", pruned, diff)
		}
		if decoded != 1 || len(got) != 2 || got[1].Type != watch.Error {
			t.Errorf("pruned=%v: decoded %d, events %d (%v), want the first decoded and client-go's error", pruned, decoded, len(got), got)
		}
	}
}
