package podcreate

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/testutil"
)

// recorder keeps the size and type of each answer to a pod create.
type recorder struct {
	mu      sync.Mutex
	answers []answer
}

type answer struct {
	contentType string
	bytes       int
}

func (r *recorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/pods") {
			return resp, err
		}
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
		if rerr != nil {
			return nil, rerr
		}
		r.mu.Lock()
		r.answers = append(r.answers, answer{resp.Header.Get("Content-Type"), len(b)})
		r.mu.Unlock()
		return resp, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func rayPod(ns string) *corev1.Pod {
	env := make([]corev1.EnvVar, 40)
	for i := range env {
		env[i] = corev1.EnvVar{Name: "VAR_" + strings.Repeat("X", i), Value: strings.Repeat("v", 40)}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "rc-head-", Labels: map[string]string{"ray.io/cluster": "rc"},
			Annotations: map[string]string{"ray.io/note": "kept"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray:2.52.0",
			Command: []string{"/bin/bash", "-c", "--"}, Args: []string{strings.Repeat("ray start --head; ", 30)}, Env: env}}},
	}
}

func TestCreate(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "podcreate"}}
	if err := cl.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	wrapped := rest.CopyConfig(cfg)
	wrapped.Wrap(rec.wrap)
	hc, err := rest.HTTPClientFor(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(wrapped, hc)
	if err != nil {
		t.Fatal(err)
	}

	pod := rayPod(ns.Name)
	sent := pod.Spec.DeepCopy()
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	stored := &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(pod), stored); err != nil {
		t.Fatalf("get the created pod %q: %v", pod.Name, err)
	}
	if !strings.HasPrefix(pod.Name, "rc-head-") || pod.UID == "" || pod.UID != stored.UID || pod.ResourceVersion != stored.ResourceVersion ||
		pod.CreationTimestamp.IsZero() || pod.Labels["ray.io/cluster"] != "rc" || pod.Annotations["ray.io/note"] != "kept" {
		t.Fatalf("metadata after create = %+v, want the stored pod's %+v", pod.ObjectMeta, stored.ObjectMeta)
	}
	if !equality.Semantic.DeepEqual(pod.Spec, *sent) {
		t.Fatalf("the spec changed: %+v", pod.Spec)
	}
	if stored.Spec.SchedulerName != corev1.DefaultSchedulerName || !equality.Semantic.DeepEqual(stored.Spec.Containers[0].Env, sent.Containers[0].Env) {
		t.Fatalf("the stored pod is not the pod sent, defaulted: %+v", stored.Spec)
	}

	// The answer was the metadata alone (managedFields, the larger part of it, cannot be left out).
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	full, err := runtime.Encode(codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion), stored)
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	got := rec.answers
	rec.mu.Unlock()
	if len(got) != 1 || !strings.HasPrefix(got[0].contentType, "application/vnd.kubernetes.protobuf") || got[0].bytes > len(full)-stored.Spec.Size() {
		t.Fatalf("answers %+v, want one protobuf answer without the spec (%d of the whole pod's %d bytes)", got, stored.Spec.Size(), len(full))
	}
	t.Logf("create answered with %d bytes; the whole pod is %d, its spec %d", got[0].bytes, len(full), stored.Spec.Size())

	// Refusals come back as the API server's errors.
	again := rayPod(ns.Name)
	again.GenerateName, again.Name = "", pod.Name
	if err := c.Create(ctx, again); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create %s again: %v, want AlreadyExists", pod.Name, err)
	}
	bad := rayPod(ns.Name)
	bad.Spec.Containers[0].Name = "Ray_Head"
	if err := c.Create(ctx, bad); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.containers[0].name") {
		t.Fatalf("create an invalid pod: %v, want Invalid naming spec.containers[0].name", err)
	}
	if bad.Name != "" || bad.UID != "" {
		t.Fatalf("a refused create changed the pod's metadata: %+v", bad.ObjectMeta)
	}
	if err := c.Create(ctx, rayPod("no-such-namespace")); !apierrors.IsNotFound(err) {
		t.Fatalf("create in a missing namespace: %v, want NotFound", err)
	}
}
