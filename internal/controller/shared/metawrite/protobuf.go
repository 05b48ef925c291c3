package metawrite

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

// The kinds written in protobuf, stamped on the object while it is encoded (a cached or built object's TypeMeta is
// empty; the API server needs it in the envelope).
var (
	podKind   = corev1.SchemeGroupVersion.WithKind("Pod")
	eventKind = eventsv1.SchemeGroupVersion.WithKind("Event")
)

var protobufSerializer = protobuf.NewSerializer(scheme, scheme)

// protobufMagic starts every object the API server encodes as protobuf (a runtime.Unknown follows).
var protobufMagic = []byte("k8s\x00")

// encoded is a request body encoded into a pooled buffer: a Ray pod is several KB, and rest.Request.Body(obj)
// encodes each into two fresh buffers (the message, then the stream it is copied to). release returns the buffer
// once the request is done with the bytes (the request has returned: its retries resend the same bytes).
type encoded struct {
	bytes []byte
	alloc *reusingAllocator
}

var allocators = sync.Pool{New: func() any { return &reusingAllocator{} }}

// maxPooledBody bounds the buffers kept: a rare huge pod's is left to the collector rather than held for good.
const maxPooledBody = 1 << 20

func (e encoded) release() {
	if cap(e.alloc.buf) <= maxPooledBody {
		allocators.Put(e.alloc)
	}
}

// reusingAllocator hands the serializer its one buffer again, grown when too small. (runtime.SimpleAllocator,
// pooled here before, makes a new slice at every call: 14.5 MB of a 1,000-cluster trial's pod creates.) The bytes
// are not zeroed: the serializer writes every one of the n it asks for.
type reusingAllocator struct{ buf []byte }

func (a *reusingAllocator) Allocate(n uint64) []byte {
	if uint64(cap(a.buf)) < n {
		a.buf = make([]byte, n, n+n/4) // room for the next pod's few more bytes
	}
	a.buf = a.buf[:n]
	return a.buf
}

// keepWriter keeps the one slice the serializer writes (the allocator's buffer, already the whole message).
type keepWriter struct{ b []byte }

func (w *keepWriter) Write(p []byte) (int, error) {
	if w.b != nil {
		return 0, errors.New("the protobuf serializer wrote twice")
	}
	w.b = p
	return len(p), nil
}

// encodeProtobuf encodes obj as the API server's protobuf envelope of kind gvk.
func encodeProtobuf(obj runtime.Object, gvk schema.GroupVersionKind) (encoded, error) {
	alloc := allocators.Get().(*reusingAllocator)
	kind := obj.GetObjectKind()
	was := kind.GroupVersionKind()
	kind.SetGroupVersionKind(gvk)
	var w keepWriter
	err := protobufSerializer.EncodeWithAllocator(obj, &w, alloc)
	kind.SetGroupVersionKind(was)
	if err != nil {
		allocators.Put(alloc)
		return encoded{}, fmt.Errorf("encode the %s: %w", gvk.Kind, err)
	}
	return encoded{bytes: w.b, alloc: alloc}, nil
}

// Field numbers (k8s.io/apimachinery's generated.proto) of what objectMetaOf walks.
const (
	unknownTypeMeta       = 1 // runtime.Unknown
	unknownRaw            = 2
	typeMetaKind          = 2 // runtime.TypeMeta
	partialObjectMetadata = 1 // PartialObjectMetadata.metadata
	objectMetaManaged     = 17
)

// objectMetaOf decodes a protobuf PartialObjectMetadata answer into its ObjectMeta, leaving managedFields out: they
// list every field the writer set (for a Ray pod, most of the answer) and nothing in the operator reads them. The
// rest of the metadata is decoded by ObjectMeta's own Unmarshal, which copies what it keeps. raw is overwritten.
func objectMetaOf(raw []byte) (*metav1.ObjectMeta, error) {
	unknown, ok := bytes.CutPrefix(raw, protobufMagic)
	if !ok {
		return nil, errors.New("the answer is not protobuf")
	}
	var kind string
	var partial []byte
	err := eachField(unknown, func(num protowire.Number, field, value []byte) error {
		switch num {
		case unknownTypeMeta:
			return eachField(value, func(num protowire.Number, _, v []byte) error {
				if num == typeMetaKind {
					kind = string(v)
				}
				return nil
			})
		case unknownRaw:
			partial = value
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if kind != "PartialObjectMetadata" {
		return nil, fmt.Errorf("the API server answered with kind %q, not PartialObjectMetadata", kind)
	}
	var objectMeta []byte
	if err := eachField(partial, func(num protowire.Number, _, v []byte) error {
		if num == partialObjectMetadata {
			objectMeta = v
		}
		return nil
	}); err != nil {
		return nil, err
	}
	// Pruned in place (each field kept moves down over the ones dropped, never past the one being read): the
	// answer is read into a buffer of send's, of no further use once decoded, and a copy was the second largest
	// allocation of a pod create.
	pruned := objectMeta[:0]
	if err := eachField(objectMeta, func(num protowire.Number, field, _ []byte) error {
		if num != objectMetaManaged {
			pruned = append(pruned, field...)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	meta := &metav1.ObjectMeta{}
	if err := meta.Unmarshal(pruned); err != nil {
		return nil, err
	}
	return meta, nil
}

// eachField calls f with each field of the protobuf message m: its number, the whole field (tag included) and, for
// a length-delimited field, its value (else nil).
func eachField(m []byte, f func(num protowire.Number, field, value []byte) error) error {
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return protowire.ParseError(n)
		}
		var value []byte
		var vn int
		if typ == protowire.BytesType {
			value, vn = protowire.ConsumeBytes(m[n:])
		} else {
			vn = protowire.ConsumeFieldValue(num, typ, m[n:])
		}
		if vn < 0 {
			return protowire.ParseError(vn)
		}
		if err := f(num, m[:n+vn], value); err != nil {
			return err
		}
		m = m[n+vn:]
	}
	return nil
}
