package operator

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/manta-dev/manta/internal/controller/shared/optimize"
)

// The Ray pod watch is most of what the operator decodes: every pod is sent again, whole, on each change to its
// status, and client-go copies each event three times on the way in before the cache's transform (stripPod) throws
// most of it away (docs/benchmarks.md, "Why each mechanism exists"). pruneRayPodWatches drops the same fields (podCacheDrops, from which both are derived) from the protobuf bytes of
// each event as they arrive, before client-go reads them, so that client-go copies and decodes only what the cache
// keeps. stripPod still runs on every cached pod (the initial list, and any event this leaves alone) and
// TestPrunedPodIsStrippedPod holds the two to the same result.

// prune names, by protobuf field number, the fields of a message to drop (nil) or to prune in turn (a message
// field, or each element of a repeated one).
type prune map[protowire.Number]prune

// podPrune (podcache.go) is derived from podCacheDrops.

// protobufMagic starts every object the API server encodes as protobuf (runtime.Unknown follows).
var protobufMagic = []byte("k8s\x00")

// prunedPodFrames counts the watch events pruneRayPodWatches rewrote (read by its tests).
var prunedPodFrames atomic.Int64

// pruneRayPodWatches wraps the operator's transport: the response of a protobuf watch of pods selected by exactly
// selector (the Ray pod cache's; the ImagePullJob controller's puller pods and every other request pass untouched)
// is read through a podWatchBody.
func pruneRayPodWatches(selector string, sw *optimize.Switches) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err != nil || resp.StatusCode != http.StatusOK || !isRayPodWatch(r, selector) || !isProtobufWatch(resp) {
				return resp, err
			}
			resp.Body = &podWatchBody{rewrittenStream: rewrittenStream{body: resp.Body}, sw: sw}
			return resp, nil
		})
	}
}

// isRayPodWatch says whether r watches pods (of all namespaces, or of one) selected by selector.
func isRayPodWatch(r *http.Request, selector string) bool {
	if r.Method != http.MethodGet {
		return false
	}
	q := r.URL.Query()
	if w := q.Get("watch"); (w != "true" && w != "1") || q.Get("labelSelector") != selector {
		return false
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) == 3: // api/v1/pods
		return parts[0] == "api" && parts[1] == "v1" && parts[2] == "pods"
	case len(parts) == 5: // api/v1/namespaces/<ns>/pods
		return parts[0] == "api" && parts[1] == "v1" && parts[2] == "namespaces" && parts[4] == "pods"
	}
	return false
}

func isProtobufWatch(resp *http.Response) bool {
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && mt == "application/vnd.kubernetes.protobuf" && params["stream"] == "watch" &&
		resp.Header.Get("Content-Encoding") == ""
}

// podWatchBody reads a protobuf watch stream (each frame a 4-byte big-endian length and a metav1.WatchEvent) and
// hands on each frame with the Pod in it pruned by podPrune. A frame it cannot parse as a Pod event (an ERROR
// event's Status, anything unexpected) is handed on as it came.
type podWatchBody struct {
	rewrittenStream
	in       []byte
	scratch  [][]byte
	outer    [3][]byte
	pruneErr error // the last frame that could not be pruned (read by tests)
	sw       *optimize.Switches
}

func (b *podWatchBody) Read(p []byte) (int, error) { return b.read(p, b) }

// rewrittenStream hands on a watch stream's events as its owner's next rewrote them into out, one at a time, and
// the error that ended the stream once they are read.
type rewrittenStream struct {
	body io.ReadCloser
	out  []byte
	off  int
	err  error
}

// rewriter rewrites the stream's next event into its rewrittenStream's out.
type rewriter interface{ next() error }

func (s *rewrittenStream) read(p []byte, r rewriter) (int, error) {
	for s.off == len(s.out) {
		if s.err != nil {
			return 0, s.err
		}
		s.err = r.next()
	}
	n := copy(p, s.out[s.off:])
	s.off += n
	return n, nil
}

func (s *rewrittenStream) Close() error { return s.body.Close() }

// next reads one frame into b.out. A stream that ends between frames ends with io.EOF, as the body's would.
func (b *podWatchBody) next() error {
	var hdr [4]byte
	if _, err := io.ReadFull(b.body, hdr[:]); err != nil {
		return err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if cap(b.in) < n {
		b.in = make([]byte, n)
	}
	b.in = b.in[:n]
	if _, err := io.ReadFull(b.body, b.in); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	out, err := b.event(append(b.out[:0], hdr[:]...), b.in)
	if err != nil {
		b.pruneErr = err
		out = append(append(b.out[:0], hdr[:]...), b.in...)
	} else {
		prunedPodFrames.Add(1)
		b.sw.Acted(optimize.PodWatchPruning)
	}
	binary.BigEndian.PutUint32(out, uint32(len(out)-len(hdr)))
	b.out, b.off = out, 0
	return nil
}

// event appends to dst the WatchEvent ev with its object (field 2, a RawExtension whose raw bytes, field 1, are a
// runtime.Unknown of kind Pod behind protobufMagic) pruned.
func (b *podWatchBody) event(dst, ev []byte) ([]byte, error) {
	return b.replace(dst, ev, 2, 0, func(dst, ext []byte) ([]byte, error) {
		return b.replace(dst, ext, 1, 1, func(dst, raw []byte) ([]byte, error) {
			unknown, ok := bytes.CutPrefix(raw, protobufMagic)
			if !ok {
				return nil, errors.New("object is not protobuf")
			}
			if err := checkPodUnknown(unknown); err != nil {
				return nil, err
			}
			dst = append(dst, protobufMagic...)
			return b.replace(dst, unknown, 2, 2, func(dst, pod []byte) ([]byte, error) {
				return b.message(dst, pod, podPrune, 0)
			})
		})
	})
}

// checkPodUnknown says whether a runtime.Unknown holds a v1 Pod, neither compressed nor in another encoding.
func checkPodUnknown(u []byte) error {
	var kind, apiVersion []byte
	err := eachField(u, func(num protowire.Number, typ protowire.Type, _, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType: // typeMeta
			return eachField(v, func(num protowire.Number, typ protowire.Type, _, v []byte) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					apiVersion = v
				case num == 2 && typ == protowire.BytesType:
					kind = v
				}
				return nil
			})
		case (num == 3 || num == 4) && len(v) > 0: // contentEncoding, contentType
			return fmt.Errorf("object has content encoding or type %q", v)
		}
		return nil
	})
	if err == nil && (string(kind) != "Pod" || string(apiVersion) != "v1") {
		err = fmt.Errorf("object is %s %s, not a v1 Pod", apiVersion, kind)
	}
	return err
}

// eachField calls f with each field of the protobuf message m: its number, its wire type, the whole field (tag
// included) and its value (a length-delimited field's content, or the raw value of any other).
func eachField(m []byte, f func(num protowire.Number, typ protowire.Type, field, v []byte) error) error {
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return protowire.ParseError(n)
		}
		l := protowire.ConsumeFieldValue(num, typ, m[n:])
		if l < 0 {
			return protowire.ParseError(l)
		}
		v := m[n : n+l]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := f(num, typ, m[:n+l], v); err != nil {
			return err
		}
		m = m[n+l:]
	}
	return nil
}

// appendMessage appends a length-delimited field num holding inner.
func appendMessage(dst []byte, num protowire.Number, inner []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(dst, num, protowire.BytesType), inner)
}

// replace appends to dst the message m with the value of its length-delimited field num rewritten by f, which
// writes into a buffer of its own (scratch slot slot) so the length can be written before it.
func (b *podWatchBody) replace(dst, m []byte, num protowire.Number, slot int, f func(dst, v []byte) ([]byte, error)) ([]byte, error) {
	found := false
	err := eachField(m, func(n protowire.Number, typ protowire.Type, field, v []byte) error {
		if n != num {
			dst = append(dst, field...)
			return nil
		}
		if typ != protowire.BytesType || found {
			return fmt.Errorf("field %d: wire type %d or repeated", num, typ)
		}
		found = true
		inner, err := f(b.outer[slot][:0], v)
		if err != nil {
			return err
		}
		b.outer[slot] = inner
		dst = appendMessage(dst, num, inner)
		return nil
	})
	if err == nil && !found {
		err = fmt.Errorf("field %d missing", num)
	}
	if err != nil {
		return nil, err
	}
	return dst, nil
}

// message appends to dst the message m pruned by p; depth picks the scratch buffer of the nested messages.
func (b *podWatchBody) message(dst, m []byte, p prune, depth int) ([]byte, error) {
	err := eachField(m, func(num protowire.Number, typ protowire.Type, field, v []byte) error {
		sub, listed := p[num]
		switch {
		case !listed:
			dst = append(dst, field...)
		case sub == nil: // dropped
		case typ != protowire.BytesType:
			return fmt.Errorf("field %d: wire type %d, want a message", num, typ)
		default:
			for len(b.scratch) <= depth {
				b.scratch = append(b.scratch, nil)
			}
			inner, err := b.message(b.scratch[depth][:0], v, sub, depth+1)
			if err != nil {
				return err
			}
			b.scratch[depth] = inner
			dst = appendMessage(dst, num, inner)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return dst, nil
}
