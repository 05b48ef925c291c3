package metawrite

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// countingLimiter counts the requests that waited on it.
type countingLimiter struct {
	flowcontrol.RateLimiter
	mu    sync.Mutex
	waits int
}

func (l *countingLimiter) Wait(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waits++
	return nil
}

func (l *countingLimiter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waits
}

// fakeServer answers each request with the next of its answers.
type fakeServer struct {
	mu      sync.Mutex
	answers []fakeAnswer
	paths   []string
}

type fakeAnswer struct {
	code        int
	contentType string
	body        []byte
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paths = append(f.paths, r.Method+" "+r.URL.Path)
	a := f.answers[0]
	f.answers = f.answers[1:]
	w.Header().Set("Content-Type", a.contentType)
	w.WriteHeader(a.code)
	_, _ = w.Write(a.body)
}

func (f *fakeServer) answer(a ...fakeAnswer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers = append(f.answers, a...)
}

func (f *fakeServer) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.paths...)
}

func startFake(t *testing.T) (*fakeServer, *rest.Config, *http.Client, *countingLimiter) {
	t.Helper()
	fake := &fakeServer{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	limiter := &countingLimiter{}
	cfg := &rest.Config{Host: srv.URL, RateLimiter: limiter}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return fake, cfg, hc, limiter
}

// metadataAnswer is the API server's protobuf answer to a pod create, managedFields and all.
func metadataAnswer(t *testing.T, name string) fakeAnswer {
	t.Helper()
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	b, err := runtime.Encode(codecs.WithoutConversion().EncoderForVersion(info.Serializer, metav1.SchemeGroupVersion),
		&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "7",
			Labels: map[string]string{"ray.io/cluster": name}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "manta",
				Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}}}})
	if err != nil {
		t.Fatal(err)
	}
	return fakeAnswer{http.StatusCreated, runtime.ContentTypeProtobuf, b}
}

// statusAnswer is the API server's JSON Status refusing a write.
func statusAnswer(t *testing.T, err *apierrors.StatusError) fakeAnswer {
	t.Helper()
	st := err.Status()
	st.APIVersion, st.Kind = "v1", "Status"
	b, jerr := json.Marshal(st)
	if jerr != nil {
		t.Fatal(jerr)
	}
	return fakeAnswer{int(st.Code), runtime.ContentTypeJSON, b}
}

// A pod create reads its answer into a pooled buffer: the pod keeps nothing of it (a second create, and scribbling
// over every pooled buffer, leave the first pod's metadata as answered), and each create waits on the token bucket.
func TestPodCreatesKeepNothingOfTheBuffer(t *testing.T) {
	fake, cfg, hc, limiter := startFake(t)
	pods, err := NewPods(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	fake.answer(metadataAnswer(t, "first"), metadataAnswer(t, "second"))
	first := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", GenerateName: "rc-"}}
	if err := pods.Create(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	want := first.ObjectMeta.DeepCopy()
	if want.Name != "first" || want.Labels["ray.io/cluster"] != "first" || want.ManagedFields != nil {
		t.Fatalf("metadata after create %+v, want the answer's but managedFields", want)
	}
	second := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", GenerateName: "rc-"}}
	if err := pods.Create(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	var held []*bytes.Buffer
	for range 4 {
		buf := answers.Get().(*bytes.Buffer)
		b := buf.Bytes()[:buf.Cap()]
		for i := range b {
			b[i] = 'x'
		}
		held = append(held, buf)
	}
	for _, buf := range held {
		answers.Put(buf)
	}
	if second.Name != "second" || !equality.Semantic.DeepEqual(first.ObjectMeta, *want) {
		t.Fatalf("first pod %+v (want %+v), second named %q", first.ObjectMeta, want, second.Name)
	}
	if n := limiter.count(); n != 2 {
		t.Fatalf("%d waits on the rate limiter for 2 creates", n)
	}
}

// Refusals are the API server's errors, as rest.Request.Do makes them, for each write; a create with no namespace
// is refused before anything is sent, as Do refuses it.
func TestWritesReturnTheAPIServersErrors(t *testing.T) {
	fake, cfg, hc, limiter := startFake(t)
	ctx := context.Background()
	pods, err := NewPods(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	events, err := NewEvents(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	status, err := NewStatus(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	podsGR := schema.GroupResource{Resource: "pods"}
	fake.answer(statusAnswer(t, apierrors.NewAlreadyExists(podsGR, "p")),
		statusAnswer(t, apierrors.NewAlreadyExists(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, "e")),
		statusAnswer(t, apierrors.NewNotFound(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, "e")),
		statusAnswer(t, apierrors.NewConflict(schema.GroupResource{Group: "ray.io", Resource: "rayclusters"}, "rc", nil)),
		fakeAnswer{http.StatusOK, runtime.ContentTypeJSON, []byte(`{"kind":"Event"}`)},
		fakeAnswer{http.StatusOK, runtime.ContentTypeJSON, []byte(`{"kind":"PartialObjectMetadata","metadata":{"resourceVersion":"9"}}`)})

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	if err := pods.Create(ctx, pod); !apierrors.IsAlreadyExists(err) || pod.UID != "" {
		t.Errorf("pod create: %v (metadata %+v), want AlreadyExists and the pod as sent", err, pod.ObjectMeta)
	}
	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "e"}}
	if err := events.Create(ctx, ev); !apierrors.IsAlreadyExists(err) {
		t.Errorf("event create: %v, want AlreadyExists", err)
	}
	if err := events.MergePatch(ctx, "ns", "e", []byte(`{}`)); !apierrors.IsNotFound(err) {
		t.Errorf("event patch: %v, want NotFound", err)
	}
	rc := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rc", ResourceVersion: "8"}}
	if err := status.UpdateStatus(ctx, rc); !apierrors.IsConflict(err) || rc.ResourceVersion != "8" {
		t.Errorf("status write: %v (resourceVersion %s), want Conflict and the object as sent", err, rc.ResourceVersion)
	}
	if err := events.MergePatch(ctx, "ns", "e", []byte(`{}`)); err != nil {
		t.Errorf("event patch: %v", err)
	}
	if err := status.UpdateStatus(ctx, rc); err != nil || rc.ResourceVersion != "9" {
		t.Errorf("status write: %v, resourceVersion %s, want 9", err, rc.ResourceVersion)
	}
	wantSent := []string{"POST /api/v1/namespaces/ns/pods", "POST /apis/events.k8s.io/v1/namespaces/ns/events",
		"PATCH /apis/events.k8s.io/v1/namespaces/ns/events/e", "PUT /apis/ray.io/v1/namespaces/ns/rayclusters/rc/status",
		"PATCH /apis/events.k8s.io/v1/namespaces/ns/events/e", "PUT /apis/ray.io/v1/namespaces/ns/rayclusters/rc/status"}
	if got := fake.sent(); strings.Join(got, "\n") != strings.Join(wantSent, "\n") {
		t.Errorf("sent %q, want %q", got, wantSent)
	}
	if n := limiter.count(); n != len(wantSent) {
		t.Errorf("%d waits on the rate limiter for %d writes", n, len(wantSent))
	}

	for _, create := range []func() error{
		func() error { return pods.Create(ctx, &corev1.Pod{}) },
		func() error { return events.Create(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e"}}) },
		func() error {
			return status.UpdateStatus(ctx, &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: "rc"}})
		},
	} {
		if err := create(); err == nil || !strings.Contains(err.Error(), "an empty namespace may not be set") {
			t.Errorf("a write with no namespace: %v, want Do's refusal", err)
		}
	}
	if n := len(fake.sent()); n != len(wantSent) {
		t.Errorf("the writes with no namespace sent %d requests", n-len(wantSent))
	}
}
