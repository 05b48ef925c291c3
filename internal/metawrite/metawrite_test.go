package metawrite

import (
	"context"
	"encoding/json"
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

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// recorder keeps the size and type of each answer to a write (POST or PUT) whose path ends in suffix.
type recorder struct {
	suffix  string
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
		if err != nil || (req.Method != http.MethodPost && req.Method != http.MethodPut) || !strings.HasSuffix(req.URL.Path, r.suffix) {
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

// TestWrites runs both writers against one API server (an envtest control plane costs seconds to start).
func TestWrites(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metawrite"}}
	if err := cl.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Run("PodCreate", func(t *testing.T) { testPodCreate(t, cfg, cl, ns.Name) })
	t.Run("RayClusterStatus", func(t *testing.T) { testRayClusterStatus(t, cfg, cl, ns.Name) })
}

// recording is a REST config whose answers to writes ending in suffix are recorded, and its HTTP client.
func recording(t *testing.T, cfg *rest.Config, suffix string) (*recorder, *rest.Config, *http.Client) {
	rec := &recorder{suffix: suffix}
	wrapped := rest.CopyConfig(cfg)
	wrapped.Wrap(rec.wrap)
	hc, err := rest.HTTPClientFor(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	return rec, wrapped, hc
}

func (r *recorder) got() []answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]answer(nil), r.answers...)
}

func testPodCreate(t *testing.T, cfg *rest.Config, cl client.Client, namespace string) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	rec, wrapped, hc := recording(t, cfg, "/pods")
	c, err := NewPods(wrapped, hc)
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
	got := rec.got()
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

func testRayClusterStatus(t *testing.T, cfg *rest.Config, cl client.Client, namespace string) {
	ctx := context.Background()
	rec, wrapped, hc := recording(t, cfg, "/status")
	w, err := NewRayClusters(wrapped, hc)
	if err != nil {
		t.Fatal(err)
	}
	head := rayPod(namespace)
	rc := &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "rc", Labels: map[string]string{"team": "a"}},
		Spec: rayv1.RayClusterSpec{HeadGroupSpec: rayv1.HeadGroupSpec{RayStartParams: map[string]string{},
			Template: corev1.PodTemplateSpec{Spec: head.Spec}}},
	}
	if err := cl.Create(ctx, rc); err != nil {
		t.Fatal(err)
	}
	// What the informer cache hands the controller: no TypeMeta.
	c := rc.DeepCopy()
	c.TypeMeta = metav1.TypeMeta{}
	before := c.ResourceVersion
	c.Status = rayv1.RayClusterStatus{State: rayv1.Ready, ReadyWorkerReplicas: 3, DesiredWorkerReplicas: 3,
		Conditions: []metav1.Condition{{Type: string(rayv1.HeadPodReady), Status: metav1.ConditionTrue, Reason: "HeadPodRunningAndReady",
			LastTransitionTime: metav1.Now()}}}
	sent := c.DeepCopy()
	if err := w.UpdateStatus(ctx, c); err != nil {
		t.Fatal(err)
	}
	stored := &rayv1.RayCluster{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(rc), stored); err != nil {
		t.Fatal(err)
	}
	if c.ResourceVersion == before || c.ResourceVersion != stored.ResourceVersion || c.UID != rc.UID || c.Labels["team"] != "a" ||
		c.Generation != stored.Generation {
		t.Fatalf("metadata after the status write = %+v, want the stored cluster's %+v (resourceVersion before %s)", c.ObjectMeta, stored.ObjectMeta, before)
	}
	if !equality.Semantic.DeepEqual(c.Spec, sent.Spec) || !equality.Semantic.DeepEqual(c.Status, sent.Status) || c.TypeMeta != sent.TypeMeta {
		t.Fatalf("the cluster's spec, status or TypeMeta changed: %+v", c)
	}
	if stored.Status.State != rayv1.Ready || stored.Status.ReadyWorkerReplicas != 3 || len(stored.Status.Conditions) != 1 {
		t.Fatalf("stored status %+v, want the status sent", stored.Status)
	}

	// The answer was the metadata alone, in JSON.
	full, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(stored.Spec)
	got := rec.got()
	if len(got) != 1 || !strings.HasPrefix(got[0].contentType, "application/json") || got[0].bytes > len(full)-len(spec) {
		t.Fatalf("answers %+v, want one JSON answer without the spec (%d of the whole cluster's %d bytes)", got, len(spec), len(full))
	}
	t.Logf("status write answered with %d bytes; the whole cluster is %d, its spec %d", got[0].bytes, len(full), len(spec))

	// Refusals come back as the API server's errors, and leave the cluster's metadata alone.
	stale := sent.DeepCopy()
	if err := w.UpdateStatus(ctx, stale); !apierrors.IsConflict(err) {
		t.Fatalf("status write at the old resourceVersion: %v, want Conflict", err)
	}
	if stale.ResourceVersion != before {
		t.Fatalf("a refused write changed the metadata: %+v", stale.ObjectMeta)
	}
	gone := sent.DeepCopy()
	gone.Name = "no-such-cluster"
	if err := w.UpdateStatus(ctx, gone); !apierrors.IsNotFound(err) {
		t.Fatalf("status write of a missing cluster: %v, want NotFound", err)
	}
}
