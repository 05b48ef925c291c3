package envtest

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
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
	"k8s.io/client-go/discovery"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/metawrite"
	"github.com/manta-dev/manta/internal/testutil"
)

// recorder keeps the size and type of each answer to a write (POST, PUT or PATCH) whose path ends in suffix.
type recorder struct {
	suffix  string
	mu      sync.Mutex
	answers []answer
}

type answer struct {
	contentType string
	bytes       int
	kind        string   // a JSON answer's kind
	sentFields  []string // the top-level fields of the JSON request body
}

func (r *recorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		var sent []string
		if req.GetBody != nil {
			if body, err := req.GetBody(); err == nil {
				var top map[string]json.RawMessage
				if b, err := io.ReadAll(body); err == nil && json.Unmarshal(b, &top) == nil {
					sent = slices.Sorted(maps.Keys(top))
				}
			}
		}
		resp, err := rt.RoundTrip(req)
		if err != nil || (req.Method != http.MethodPost && req.Method != http.MethodPut && req.Method != http.MethodPatch && req.Method != http.MethodDelete) ||
			!strings.HasSuffix(req.URL.Path, r.suffix) {
			return resp, err
		}
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
		if rerr != nil {
			return nil, rerr
		}
		var typed struct {
			Kind string `json:"kind"`
		}
		_ = json.Unmarshal(b, &typed) // not JSON: no kind
		r.mu.Lock()
		r.answers = append(r.answers, answer{resp.Header.Get("Content-Type"), len(b), typed.Kind, sent})
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
	t.Run("Status", func(t *testing.T) { testStatus(t, cfg, cl, ns.Name) })
	t.Run("Events", func(t *testing.T) { testEvents(t, cfg, cl, ns.Name) })
	t.Run("Creates", func(t *testing.T) { testCreates(t, cfg, cl, ns.Name) })
	t.Run("PatchMetadata", func(t *testing.T) { testPatchMetadata(t, cfg, cl, ns.Name) })
}

// testPatchMetadata: a finalizer put on and taken off a RayJob through Status.PatchMetadata, guarded by the
// resourceVersion, is stored; the answer is the metadata alone, from which the object's resourceVersion and
// finalizers (and nothing else) are set; a stale resourceVersion is a Conflict, a missing object NotFound, and a
// kind it does not write is refused before anything is sent.
func testPatchMetadata(t *testing.T, cfg *rest.Config, cl client.Client, namespace string) {
	ctx := context.Background()
	rec, wrapped, hc := recording(t, cfg, "/rayjobs/finalized")
	w, err := metawrite.NewStatus(wrapped, hc)
	if err != nil {
		t.Fatal(err)
	}
	cluster := rayv1.RayClusterSpec{HeadGroupSpec: rayv1.HeadGroupSpec{RayStartParams: map[string]string{},
		Template: corev1.PodTemplateSpec{Spec: rayPod(namespace).Spec}}}
	created := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "finalized", Labels: map[string]string{"team": "a"}},
		Spec: rayv1.RayJobSpec{Entrypoint: "python job.py", RayClusterSpec: &cluster}}
	if err := cl.Create(ctx, created); err != nil {
		t.Fatal(err)
	}
	// What the informer cache hands the controller: no TypeMeta.
	obj := created.DeepCopy()
	obj.TypeMeta = metav1.TypeMeta{}
	patch := func(finalizers []string, rv string) []byte {
		var f any
		if len(finalizers) > 0 {
			f = finalizers
		}
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": f, "resourceVersion": rv}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	stale := obj.ResourceVersion
	for _, want := range [][]string{{"ray.io/rayjob-finalizer"}, nil} {
		sent := obj.DeepCopy()
		if err := w.PatchMetadata(ctx, obj, patch(want, obj.ResourceVersion)); err != nil {
			t.Fatal(err)
		}
		stored := &rayv1.RayJob{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), stored); err != nil {
			t.Fatal(err)
		}
		if obj.ResourceVersion == sent.ResourceVersion || obj.ResourceVersion != stored.ResourceVersion {
			t.Fatalf("resourceVersion after the patch %s, want the stored one %s (before %s)", obj.ResourceVersion, stored.ResourceVersion, sent.ResourceVersion)
		}
		if !slices.Equal(stored.Finalizers, want) || !slices.Equal(obj.Finalizers, want) {
			t.Fatalf("finalizers stored %v, on the object %v; want %v", stored.Finalizers, obj.Finalizers, want)
		}
		sent.ResourceVersion, sent.Finalizers = obj.ResourceVersion, obj.Finalizers
		if !equality.Semantic.DeepEqual(obj, sent) {
			t.Fatalf("the object changed beyond its resourceVersion and finalizers: %+v, sent %+v", obj, sent)
		}
		if !equality.Semantic.DeepEqual(stored.Spec, created.Spec) || !equality.Semantic.DeepEqual(stored.Labels, created.Labels) {
			t.Fatalf("the patch changed the stored spec or labels: %+v %v", stored.Spec, stored.Labels)
		}
		full, err := json.Marshal(stored)
		if err != nil {
			t.Fatal(err)
		}
		spec, _ := json.Marshal(stored.Spec)
		got := rec.got()
		if last := got[len(got)-1]; last.kind != "PartialObjectMetadata" || !strings.HasPrefix(last.contentType, "application/json") || last.bytes > len(full)-len(spec) {
			t.Fatalf("answer %+v, want the metadata alone in JSON (the whole RayJob is %d bytes, its spec %d)", last, len(full), len(spec))
		}
	}
	if n := len(rec.got()); n != 2 {
		t.Fatalf("%d answers recorded, want 2", n)
	}

	if err := w.PatchMetadata(ctx, obj.DeepCopy(), patch([]string{"x.io/f"}, stale)); !apierrors.IsConflict(err) {
		t.Fatalf("patch at a stale resourceVersion: %v, want Conflict", err)
	}
	gone := obj.DeepCopy()
	gone.Name = "no-such-job"
	if err := w.PatchMetadata(ctx, gone, patch([]string{"x.io/f"}, "")); !apierrors.IsNotFound(err) {
		t.Fatalf("patch of a missing RayJob: %v, want NotFound", err)
	}
	pod := rayPod(namespace)
	pod.Name = "p"
	answers := len(rec.got())
	if err := w.PatchMetadata(ctx, pod, patch([]string{"x.io/f"}, "")); err == nil || !strings.Contains(err.Error(), "/v1, Kind=Pod") {
		t.Errorf("metadata patch of a pod: %v, want an error naming the kind", err)
	}
	if len(rec.got()) != answers {
		t.Error("a refused kind's patch was sent")
	}
}

// testCreates: a Service (in protobuf) and a RayCluster (in JSON) created through metawrite.Creates are stored as
// sent, the answers the metadata alone, which is all the create reads back; a refused create is the API server's
// error, and a kind it does not write is refused before anything is sent.
func testCreates(t *testing.T, cfg *rest.Config, cl client.Client, namespace string) {
	ctx := context.Background()
	rec, wrapped, hc, sent := recordingSent(t, cfg, "", true)
	c, err := metawrite.NewCreates(wrapped, hc)
	if err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "job-head-svc", Labels: map[string]string{"ray.io/node-type": "head"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"ray.io/cluster": "rc"}, Ports: []corev1.ServicePort{{Name: "dashboard", Port: 8265}}}}
	rc := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "job-cluster", Annotations: map[string]string{"ray.io/note": "kept"}},
		Spec: rayv1.RayClusterSpec{HeadGroupSpec: rayv1.HeadGroupSpec{Template: corev1.PodTemplateSpec{Spec: rayPod(namespace).Spec}}}}
	for _, o := range []client.Object{svc, rc} {
		if !c.Handles(o) {
			t.Fatalf("Handles(%T) = false", o)
		}
	}
	sentSpec := rc.Spec.DeepCopy()
	for _, o := range []client.Object{svc, rc} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
	storedSvc, storedRC := &corev1.Service{}, &rayv1.RayCluster{}
	for o, stored := range map[client.Object]client.Object{svc: storedSvc, rc: storedRC} {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(o), stored); err != nil {
			t.Fatal(err)
		}
		m := stored.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta).DeepCopy()
		m.ManagedFields = nil
		if got := o.(metav1.ObjectMetaAccessor).GetObjectMeta(); o.GetUID() == "" || !equality.Semantic.DeepEqual(got, m) {
			t.Errorf("%T metadata after create = %+v, want the stored one's but its managedFields: %+v", o, got, m)
		}
	}
	if svc.Spec.ClusterIP != "" || storedSvc.Spec.ClusterIP == "" {
		t.Errorf("Service cluster IP %q after create (stored %q): want the spec as sent, nothing read back", svc.Spec.ClusterIP, storedSvc.Spec.ClusterIP)
	}
	if !equality.Semantic.DeepEqual(rc.Spec, *sentSpec) || storedRC.Spec.HeadGroupSpec.Template.Spec.Containers[0].Image != "rayproject/ray:2.52.0" {
		t.Errorf("RayCluster spec after create %+v, stored %+v: want both as sent", rc.Spec, storedRC.Spec)
	}
	accept := func(ct string) string { return ct + " accept " + ct + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1" }
	if want := []string{
		"POST /api/v1/namespaces/" + namespace + "/services " + accept(runtime.ContentTypeProtobuf),
		"POST /apis/ray.io/v1/namespaces/" + namespace + "/rayclusters " + accept(runtime.ContentTypeJSON),
	}; !slices.Equal(*sent, want) {
		t.Errorf("requests sent %q, want %q", *sent, want)
	}
	if a := rec.got(); len(a) != 2 || a[0].contentType != runtime.ContentTypeProtobuf || a[1].contentType != runtime.ContentTypeJSON || a[1].kind != "PartialObjectMetadata" {
		t.Errorf("answers %+v, want the Service's in protobuf and the RayCluster's metadata alone in JSON", a)
	}
	again := rc.DeepCopy()
	again.ResourceVersion = ""
	if err := c.Create(ctx, again); !apierrors.IsAlreadyExists(err) {
		t.Errorf("a second create of %s: %v, want AlreadyExists", rc.Name, err)
	}
	n := len(*sent)
	pod := rayPod(namespace)
	if c.Handles(pod) || c.Create(ctx, pod) == nil || len(*sent) != n {
		t.Errorf("a Pod: Handles true, or created, or sent (%q); want refused before sending", (*sent)[n:])
	}
	testDeletes(t, c, rec, sent, cl, rc, svc)
}

// testDeletes: an object deleted through Creates.Delete is gone, the request carries the delete options and asks
// for the metadata alone, and nothing of the answer is read into the object; a failed UID precondition is a
// Conflict, a missing object NotFound, a kind it does not write refused before anything is sent.
func testDeletes(t *testing.T, c *metawrite.Creates, rec *recorder, sent *[]string, cl client.Client, rc *rayv1.RayCluster, svc *corev1.Service) {
	ctx := context.Background()
	answers, n := len(rec.got()), len(*sent)
	wrong := types.UID("not-" + string(rc.UID))
	if err := c.Delete(ctx, rc, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrong}}); !apierrors.IsConflict(err) {
		t.Errorf("delete with another UID as precondition: %v, want Conflict", err)
	}
	before := rc.DeepCopy()
	background := metav1.DeletePropagationBackground
	for _, o := range []client.Object{rc, svc} {
		uid := o.GetUID()
		if err := c.Delete(ctx, o, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &background}); err != nil {
			t.Fatalf("delete %T: %v", o, err)
		}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object)); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s after delete: %v, want NotFound", o, o.GetName(), err)
		}
	}
	if !equality.Semantic.DeepEqual(rc, before) {
		t.Errorf("the RayCluster changed by its delete: %+v, was %+v", rc, before)
	}
	if err := c.Delete(ctx, rc, &metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a second delete of %s: %v, want NotFound", rc.Name, err)
	}
	accept := func(ct string) string { return " accept " + ct + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1" }
	rcLine := "DELETE /apis/ray.io/v1/namespaces/" + rc.Namespace + "/rayclusters/" + rc.Name + " " + runtime.ContentTypeJSON + accept(runtime.ContentTypeJSON)
	want := []string{rcLine, rcLine,
		"DELETE /api/v1/namespaces/" + svc.Namespace + "/services/" + svc.Name + " " + runtime.ContentTypeJSON + accept(runtime.ContentTypeProtobuf), rcLine}
	if got := (*sent)[n:]; !slices.Equal(got, want) {
		t.Errorf("requests sent %q, want %q", got, want)
	}
	// The API server answers a custom resource deleted at once with a Status, a built-in one with the object: here
	// its metadata alone, in protobuf.
	if a := rec.got()[answers:]; len(a) != 4 || a[1].kind != "Status" || a[2].contentType != runtime.ContentTypeProtobuf || a[2].bytes > 1024 {
		t.Errorf("answers %+v, want a Status for the RayCluster and the Service's metadata alone in protobuf", a)
	}
	n = len(*sent)
	if err := c.Delete(ctx, rayPod(rc.Namespace), &metav1.DeleteOptions{}); err == nil || len(*sent) != n {
		t.Errorf("a Pod deleted (%v) or sent (%q); want refused before sending", err, (*sent)[n:])
	}
}

// testEvents: an Event created and its series patched through metawrite.Events are stored as sent, the requests
// in protobuf and merge patch, the answers the metadata alone; a refused write is the API server's error.
func testEvents(t *testing.T, cfg *rest.Config, cl client.Client, namespace string) {
	ctx := context.Background()
	rec, wrapped, hc, sent := recordingSent(t, cfg, "/events", false)
	w, err := metawrite.NewEvents(wrapped, hc)
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NowMicro()
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "rc.1"},
		EventTime:  now, ReportingController: "manta.dev/raycluster-controller", ReportingInstance: "raycluster-controller-x",
		Action: "Create", Reason: "CreatedHeadPod", Note: "Created head Pod metawrite/rc-head", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{Kind: "RayCluster", Namespace: namespace, Name: "rc", APIVersion: "ray.io/v1"},
	}
	if err := w.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := w.MergePatch(ctx, namespace, ev.Name, []byte(`{"series":{"count":2,"lastObservedTime":"`+now.Format(metav1.RFC3339Micro)+`"}}`)); err != nil {
		t.Fatal(err)
	}
	stored := &eventsv1.Event{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(ev), stored); err != nil {
		t.Fatal(err)
	}
	if stored.Reason != ev.Reason || stored.Note != ev.Note || stored.Regarding.Name != "rc" || stored.Series == nil || stored.Series.Count != 2 {
		t.Fatalf("stored Event %+v, want the one sent with a series of 2", stored)
	}
	if err := w.Create(ctx, ev); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("a second create of %s: %v, want AlreadyExists", ev.Name, err)
	}
	if err := w.MergePatch(ctx, namespace, "gone.1", []byte(`{"series":{"count":2}}`)); !apierrors.IsNotFound(err) {
		t.Fatalf("a patch of a missing Event: %v, want NotFound", err)
	}
	accept := " accept " + runtime.ContentTypeProtobuf + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
	if want := []string{"POST " + runtime.ContentTypeProtobuf + accept, "PATCH " + string(types.MergePatchType) + accept}; !slices.Equal((*sent)[:2], want) {
		t.Errorf("requests sent %q, want %q first", *sent, want)
	}
	if a := rec.got(); len(a) == 0 || a[0].contentType != runtime.ContentTypeProtobuf {
		t.Errorf("answers %+v, want the create's in protobuf", a)
	}
}

// recordingSent is recording whose requests are also listed, each as "METHOD [path ]Content-Type accept Accept".
func recordingSent(t *testing.T, cfg *rest.Config, suffix string, withPath bool) (*recorder, *rest.Config, *http.Client, *[]string) {
	rec, wrapped, _ := recording(t, cfg, suffix)
	sent := new([]string)
	wrapped.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			line := req.Method + " "
			if withPath {
				line += req.URL.Path + " "
			}
			*sent = append(*sent, line+req.Header.Get("Content-Type")+" accept "+req.Header.Get("Accept"))
			return rt.RoundTrip(req)
		})
	})
	hc, err := rest.HTTPClientFor(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	return rec, wrapped, hc, sent
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
	c, err := metawrite.NewPods(wrapped, hc)
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
	storedMeta := stored.ObjectMeta.DeepCopy()
	storedMeta.ManagedFields = nil
	if pod.ManagedFields != nil || !equality.Semantic.DeepEqual(pod.ObjectMeta, *storedMeta) {
		t.Fatalf("metadata after create = %+v, want the stored pod's but its managedFields: %+v", pod.ObjectMeta, *storedMeta)
	}
	if pod.Kind != "" || pod.APIVersion != "" {
		t.Fatalf("the create left the pod's TypeMeta %+v, want it as sent (empty)", pod.TypeMeta)
	}
	if !equality.Semantic.DeepEqual(pod.Spec, *sent) {
		t.Fatalf("the spec changed: %+v", pod.Spec)
	}
	if stored.Spec.SchedulerName != corev1.DefaultSchedulerName || !equality.Semantic.DeepEqual(stored.Spec.Containers[0].Env, sent.Containers[0].Env) {
		t.Fatalf("the stored pod is not the pod sent, defaulted: %+v", stored.Spec)
	}

	// The answer was the metadata alone (managedFields, the larger part of it, cannot be left out).
	info, _ := runtime.SerializerInfoForMediaType(kscheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	full, err := runtime.Encode(kscheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion), stored)
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

// statusCase is one kind's object to create and the status to write to it.
type statusCase struct {
	obj    client.Object
	status func(client.Object)
}

func statusCases(namespace string) []statusCase {
	head := rayPod(namespace)
	cluster := rayv1.RayClusterSpec{HeadGroupSpec: rayv1.HeadGroupSpec{RayStartParams: map[string]string{},
		Template: corev1.PodTemplateSpec{Spec: head.Spec}}}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"team": "a"}}
	}
	now := metav1.Now()
	return []statusCase{
		{&rayv1.RayCluster{ObjectMeta: meta("rc"), Spec: cluster}, func(o client.Object) {
			o.(*rayv1.RayCluster).Status = rayv1.RayClusterStatus{State: rayv1.Ready, ReadyWorkerReplicas: 3, DesiredWorkerReplicas: 3,
				Conditions: []metav1.Condition{{Type: string(rayv1.HeadPodReady), Status: metav1.ConditionTrue, Reason: "HeadPodRunningAndReady",
					LastTransitionTime: now}}}
		}},
		{&rayv1.RayJob{ObjectMeta: meta("job"), Spec: rayv1.RayJobSpec{Entrypoint: "python job.py", RayClusterSpec: &cluster}}, func(o client.Object) {
			o.(*rayv1.RayJob).Status = rayv1.RayJobStatus{JobDeploymentStatus: rayv1.JobDeploymentStatusRunning, JobStatus: rayv1.JobStatusRunning,
				JobId: "job-1", RayClusterName: "job-raycluster-abcde", StartTime: &now,
				Failed: ptr.To[int32](0), Succeeded: ptr.To[int32](0)} // the schema's defaults, which the API server would add
		}},
		{&rayv1.RayService{ObjectMeta: meta("svc"), Spec: rayv1.RayServiceSpec{RayClusterSpec: cluster}}, func(o client.Object) {
			o.(*rayv1.RayService).Status = rayv1.RayServiceStatuses{NumServeEndpoints: 2, ObservedGeneration: 1, LastUpdateTime: &now}
		}},
		{&rayv1.RayCronJob{ObjectMeta: meta("cron"), Spec: rayv1.RayCronJobSpec{Schedule: "*/5 * * * *",
			JobTemplate: rayv1.RayJobSpec{Entrypoint: "python job.py", RayClusterSpec: &cluster}}}, func(o client.Object) {
			o.(*rayv1.RayCronJob).Status = rayv1.RayCronJobStatus{LastScheduleTime: &now, ObservedGeneration: 1}
		}},
		{&mantav1alpha1.ImagePullJob{ObjectMeta: meta("pull"), Spec: mantav1alpha1.ImagePullJobSpec{Image: "rayproject/ray:2.52.0"}}, func(o client.Object) {
			o.(*mantav1alpha1.ImagePullJob).Status = mantav1alpha1.ImagePullJobStatus{Desired: 3, Active: 1, Succeeded: 2, StartTime: &now, ObservedGeneration: 1}
		}},
	}
}

// testStatus writes the status of each of Manta's custom resources.
func testStatus(t *testing.T, cfg *rest.Config, cl client.Client, namespace string) {
	rec, wrapped, hc := recording(t, cfg, "/status")
	w, err := metawrite.NewStatus(wrapped, hc)
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[schema.GroupVersionKind]bool{}
	for _, tc := range statusCases(namespace) {
		gvk, err := apiutil.GVKForObject(tc.obj, scheme)
		if err != nil {
			t.Fatal(err)
		}
		kinds[gvk] = true
		t.Run(gvk.Kind, func(t *testing.T) { testStatusOf(t, w, rec, cl, tc) })
	}

	// Every custom resource the API server serves with a status is written above, each to the resource the API
	// server names (a wrong one would answer NotFound). That the writer's table holds no other kind, and names the
	// CRDs' resources, is metawrite's TestStatusResourcesAreTheCRDs.
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := map[schema.GroupVersionKind]bool{}
	for _, gv := range []schema.GroupVersion{rayv1.GroupVersion, mantav1alpha1.GroupVersion} {
		list, err := dc.ServerResourcesForGroupVersion(gv.String())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			if strings.HasSuffix(r.Name, "/status") {
				served[gv.WithKind(r.Kind)] = true
			}
		}
	}
	if !maps.Equal(served, kinds) {
		t.Errorf("the API server serves the status of %v; the test writes %v", served, kinds)
	}

	// A kind outside the table is refused before anything is sent.
	pod := rayPod(namespace)
	pod.Name = "p"
	if err := w.UpdateStatus(context.Background(), pod); err == nil || !strings.Contains(err.Error(), "/v1, Kind=Pod") {
		t.Errorf("status write of a pod: %v, want an error naming the kind", err)
	}
}

func testStatusOf(t *testing.T, w *metawrite.Status, rec *recorder, cl client.Client, tc statusCase) {
	ctx := context.Background()
	if err := cl.Create(ctx, tc.obj); err != nil {
		t.Fatal(err)
	}
	// What the informer cache hands the controller: no TypeMeta.
	obj := tc.obj.DeepCopyObject().(client.Object)
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	before := obj.GetResourceVersion()
	tc.status(obj)
	sent := obj.DeepCopyObject().(client.Object)
	answers := len(rec.got())
	if err := w.UpdateStatus(ctx, obj); err != nil {
		t.Fatal(err)
	}
	stored := tc.obj.DeepCopyObject().(client.Object)
	if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), stored); err != nil {
		t.Fatal(err)
	}
	if obj.GetResourceVersion() == before || obj.GetResourceVersion() != stored.GetResourceVersion() {
		t.Fatalf("resourceVersion after the status write %s, want the stored one %s (before %s)", obj.GetResourceVersion(), stored.GetResourceVersion(), before)
	}
	// Nothing else of the object moved: its metadata (but the resourceVersion), TypeMeta, spec and status are as sent.
	sent.SetResourceVersion(obj.GetResourceVersion())
	if !equality.Semantic.DeepEqual(obj, sent) {
		t.Fatalf("the object changed beyond its resourceVersion: %+v, sent %+v", obj, sent)
	}
	got, want := fields(t, stored), fields(t, sent)
	if !equality.Semantic.DeepEqual(got["status"], want["status"]) {
		t.Fatalf("stored status %v, want the status sent %v", got["status"], want["status"])
	}

	// Only the status was sent, and the API server kept the spec and who set it.
	created := fields(t, tc.obj)
	if !equality.Semantic.DeepEqual(got["spec"], created["spec"]) {
		t.Fatalf("stored spec %v, want the spec created %v", got["spec"], created["spec"])
	}
	for _, mf := range stored.GetManagedFields() {
		owns := mf.FieldsV1 != nil && strings.Contains(mf.FieldsV1.GetRawString(), `"f:spec"`)
		if (mf.Subresource == "status") == owns {
			t.Errorf("field manager %q (subresource %q) owns the spec: %v; want the creator alone to", mf.Manager, mf.Subresource, owns)
		}
	}

	// The answer was the metadata alone, in JSON.
	full, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(got["spec"])
	answered := rec.got()[answers:]
	if len(answered) != 1 || !strings.HasPrefix(answered[0].contentType, "application/json") || answered[0].bytes > len(full)-len(spec) {
		t.Fatalf("answers %+v, want one JSON answer without the spec (%d of the whole object's %d bytes)", answered, len(spec), len(full))
	}
	if want := []string{"apiVersion", "kind", "metadata", "status"}; !slices.Equal(answered[0].sentFields, want) {
		t.Fatalf("status write sent the fields %v, want %v", answered[0].sentFields, want)
	}
	t.Logf("status write answered with %d bytes; the whole object is %d, its spec %d", answered[0].bytes, len(full), len(spec))

	// Refusals come back as the API server's errors, and leave the object's metadata alone.
	stale := sent.DeepCopyObject().(client.Object)
	stale.SetResourceVersion(before)
	if err := w.UpdateStatus(ctx, stale); !apierrors.IsConflict(err) {
		t.Fatalf("status write at the old resourceVersion: %v, want Conflict", err)
	}
	if stale.GetResourceVersion() != before {
		t.Fatalf("a refused write changed the resourceVersion to %s", stale.GetResourceVersion())
	}
	gone := sent.DeepCopyObject().(client.Object)
	gone.SetName("no-such-" + gone.GetName())
	if err := w.UpdateStatus(ctx, gone); !apierrors.IsNotFound(err) {
		t.Fatalf("status write of a missing object: %v, want NotFound", err)
	}
}

// fields is obj as JSON fields (its times in JSON's precision, as stored).
func fields(t *testing.T, obj client.Object) map[string]any {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
