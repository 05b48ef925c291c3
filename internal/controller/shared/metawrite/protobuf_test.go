package metawrite

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The pooled encoding is byte for byte what rest.Request.Body(obj) sends, and leaves the object as it was.
func TestEncodeProtobufIsTheClientsEncoding(t *testing.T) {
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	for _, tc := range []struct {
		obj interface {
			runtime.Object
			DeepCopyObject() runtime.Object
		}
		encoder runtime.Encoder
	}{
		{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "rc-head-", Namespace: "ns", Labels: map[string]string{"ray.io/cluster": "rc"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray:2.52.0", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}}}},
			codecs.WithoutConversion().EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)},
		{&eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "rc.1", Namespace: "ns"}, Reason: "CreatedHeadPod", Note: "Created head Pod ns/rc-head-x",
			Regarding: corev1.ObjectReference{Kind: "RayCluster", Name: "rc"}},
			codecs.WithoutConversion().EncoderForVersion(info.Serializer, eventsv1.SchemeGroupVersion)},
	} {
		before := tc.obj.DeepCopyObject()
		want, err := runtime.Encode(tc.encoder, tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		gvk := podKind
		if _, ok := tc.obj.(*eventsv1.Event); ok {
			gvk = eventKind
		}
		// Twice: the second encoding reuses the pool's buffer.
		for range 2 {
			got, err := encodeProtobuf(tc.obj, gvk)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.bytes, want) {
				t.Fatalf("%T: encoded %q, want the client's %q", tc.obj, got.bytes, want)
			}
			got.release()
		}
		if !equality.Semantic.DeepEqual(tc.obj, before) {
			t.Fatalf("%T changed by its encoding: %+v", tc.obj, tc.obj)
		}
	}
}

// objectMetaOf decodes an answer to the metadata the API server sent, managedFields left out.
func TestObjectMetaOfLeavesManagedFieldsOut(t *testing.T) {
	created := metav1.Now().Rfc3339Copy()
	meta := metav1.ObjectMeta{
		Name: "rc-head-abcde", GenerateName: "rc-head-", Namespace: "ns", UID: "u-1", ResourceVersion: "42", Generation: 1,
		CreationTimestamp: created, Labels: map[string]string{"ray.io/cluster": "rc"}, Annotations: map[string]string{"a": "b"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc", UID: "u-0"}},
		Finalizers:      []string{"f"},
	}
	withManaged := meta
	withManaged.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "manta", Operation: metav1.ManagedFieldsOperationUpdate,
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}}
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	raw, err := runtime.Encode(codecs.WithoutConversion().EncoderForVersion(info.Serializer, metav1.SchemeGroupVersion),
		&metav1.PartialObjectMetadata{ObjectMeta: withManaged})
	if err != nil {
		t.Fatal(err)
	}
	got, err := objectMetaOf(bytes.Clone(raw)) // it overwrites what it decodes
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(*got, meta) {
		t.Fatalf("decoded %+v, want %+v", *got, meta)
	}
	// Nothing decoded aliases the answer, which the pod create reuses for the next one.
	scribbled := bytes.Clone(raw)
	got, err = objectMetaOf(scribbled)
	if err != nil {
		t.Fatal(err)
	}
	for i := range scribbled {
		scribbled[i] = 'x'
	}
	if !equality.Semantic.DeepEqual(*got, meta) {
		t.Fatalf("decoded %+v changed with the answer's bytes, want %+v", *got, meta)
	}
	// The general decoder agrees but for managedFields.
	full, err := decodeMetadata(raw)
	if err != nil || !equality.Semantic.DeepEqual(*full, withManaged) {
		t.Fatalf("decodeMetadata: %+v, %v", full, err)
	}

	// Not what was asked for: an error naming the kind, never a half-read object.
	pod, err := runtime.Encode(codecs.WithoutConversion().EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion),
		&corev1.Pod{ObjectMeta: meta})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := objectMetaOf(pod); err == nil || !bytes.Contains([]byte(err.Error()), []byte(`"Pod"`)) {
		t.Fatalf("a Pod answer: %v, want an error naming kind Pod", err)
	}
	for _, bad := range [][]byte{[]byte(`{"kind":"PartialObjectMetadata"}`), append([]byte("k8s\x00"), 0x0a, 0x05, 0x01)} {
		if _, err := objectMetaOf(bad); err == nil {
			t.Fatalf("objectMetaOf(%q) took it", bad)
		}
	}
}
