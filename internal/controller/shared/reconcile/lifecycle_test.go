package reconcile

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// lifeRig is a Lifecycle over RayJobs on a fake API server, with parts that record what the skeleton asked of them.
type lifeRig struct {
	cl       client.WithWatch
	rec      *events.FakeRecorder
	life     *Lifecycle[*rayv1.RayJob, rayv1.RayJobStatus]
	forgot   []types.NamespacedName
	lives    int
	finalize func(*rayv1.RayJob, *Result) (bool, error)
	step     StatusStep
	// statusWrites counts status writes; refuseFinalizer answers finalizer patches with a conflict.
	statusWrites    int
	refuseFinalizer bool
}

func newLifeRig(t *testing.T, objs ...client.Object) *lifeRig {
	t.Helper()
	s := runtime.NewScheme()
	if err := rayv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	g := &lifeRig{rec: events.NewFakeRecorder(20)}
	g.cl = fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&rayv1.RayJob{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if g.refuseFinalizer {
					return apierrors.NewConflict(schema.GroupResource{Group: "ray.io", Resource: "rayjobs"}, obj.GetName(), errors.New("changed"))
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				g.statusWrites++
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
	g.life = &Lifecycle[*rayv1.RayJob, rayv1.RayJobStatus]{
		Client:         g.cl,
		Recorder:       g.rec,
		New:            func() *rayv1.RayJob { return &rayv1.RayJob{} },
		ManagedBy:      func(j *rayv1.RayJob) *string { return j.Spec.ManagedBy },
		Forget:         func(k types.NamespacedName) { g.forgot = append(g.forgot, k) },
		Finalizer:      testFinalizer,
		WantsFinalizer: func(j *rayv1.RayJob) bool { return j.Labels["no-finalizer"] == "" },
		Finalize: func(_ context.Context, j *rayv1.RayJob, res *Result) (bool, error) {
			return g.finalize(j, res)
		},
		Live: func(_ context.Context, j *rayv1.RayJob, read *rayv1.RayJobStatus, res *Result) (StatusStep, error) {
			g.lives++
			j.Status.Message = j.Annotations["message"]
			res.Eventf(corev1.EventTypeNormal, "Wrote", "Test", "wrote a child")
			res.StatusEventf(corev1.EventTypeNormal, "Changed", "Test", "message %q -> %q", read.Message, j.Status.Message)
			return g.step, nil
		},
		Status:       func(j *rayv1.RayJob) *rayv1.RayJobStatus { return &j.Status },
		CopyStatus:   (*rayv1.RayJobStatus).DeepCopy,
		StatusWriter: ClientStatus(g.cl),
	}
	return g
}

func (g *lifeRig) reconcile(t *testing.T, name string) (ctrl.Result, error) {
	t.Helper()
	return g.life.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}})
}

func (g *lifeRig) get(t *testing.T, name string) *rayv1.RayJob {
	t.Helper()
	j := &rayv1.RayJob{}
	if err := g.cl.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, j); err != nil {
		t.Fatal(err)
	}
	return j
}

// reasons drains the recorded events' reasons.
func (g *lifeRig) reasons() []string {
	var out []string
	for len(g.rec.Events) > 0 {
		out = append(out, strings.Fields(<-g.rec.Events)[1])
	}
	return out
}

func job(name string, mutate ...func(*rayv1.RayJob)) *rayv1.RayJob {
	j := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: map[string]string{"message": "hello"}}}
	for _, m := range mutate {
		m(j)
	}
	return j
}

// A live object gets the finalizer, its Live runs once, and its changed status is written once with the change's
// events; a second reconcile finds nothing to write and asks nothing.
func TestLifecycleLive(t *testing.T) {
	g := newLifeRig(t, job("j"))
	g.finalize = func(*rayv1.RayJob, *Result) (bool, error) {
		t.Fatal("Finalize called on a live object")
		return false, nil
	}
	var unchanged, written, stored int
	g.step = StatusStep{Unchanged: func() { unchanged++ }, Write: func() { written++ }, Stored: func() { stored++ }}
	if _, err := g.reconcile(t, "j"); err != nil {
		t.Fatal(err)
	}
	j := g.get(t, "j")
	if !slices.Contains(j.Finalizers, testFinalizer) || j.Status.Message != "hello" || g.statusWrites != 1 {
		t.Errorf("finalizers %v, message %q, %d status writes; want the finalizer, hello, 1", j.Finalizers, j.Status.Message, g.statusWrites)
	}
	if got := g.reasons(); !slices.Equal(got, []string{"Wrote", "Changed"}) || written != 1 || stored != 1 || unchanged != 0 {
		t.Errorf("events %v, write %d, stored %d, unchanged %d; want [Wrote Changed], 1, 1, 0", got, written, stored, unchanged)
	}
	if _, err := g.reconcile(t, "j"); err != nil {
		t.Fatal(err)
	}
	if g.statusWrites != 1 || unchanged != 1 || written != 1 {
		t.Errorf("after a reconcile with nothing new: %d status writes, unchanged %d, write %d; want 1, 1, 1", g.statusWrites, unchanged, written)
	}
}

// Objects another controller manages, objects gone and objects that want no finalizer.
func TestLifecycleSkips(t *testing.T) {
	g := newLifeRig(t,
		job("theirs", func(j *rayv1.RayJob) { j.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue") }),
		job("ours", func(j *rayv1.RayJob) { j.Spec.ManagedBy = ptr.To(rayv1.KubeRayController) }),
		job("plain", func(j *rayv1.RayJob) { j.Labels = map[string]string{"no-finalizer": "yes"} }))
	if _, err := g.reconcile(t, "theirs"); err != nil || g.lives != 0 || len(g.get(t, "theirs").Finalizers) != 0 {
		t.Errorf("another controller's RayJob: %v, %d lives, finalizers %v; want it untouched", err, g.lives, g.get(t, "theirs").Finalizers)
	}
	if _, err := g.reconcile(t, "ours"); err != nil || g.lives != 1 {
		t.Errorf("a RayJob managed by KubeRay's name: %v, %d lives; want it reconciled", err, g.lives)
	}
	if _, err := g.reconcile(t, "plain"); err != nil || g.lives != 2 || len(g.get(t, "plain").Finalizers) != 0 {
		t.Errorf("a RayJob that wants no finalizer: %v, %d lives, finalizers %v; want it reconciled without one", err, g.lives, g.get(t, "plain").Finalizers)
	}
	if _, err := g.reconcile(t, "gone"); err != nil || !slices.Equal(g.forgot, []types.NamespacedName{{Namespace: "ns", Name: "gone"}}) {
		t.Errorf("a RayJob that is gone: %v, forgot %v; want ns/gone forgotten", err, g.forgot)
	}
}

// A held status is not written, its events wait, and the reconcile looks again when the hold ends; a status read
// before the cache showed the last write is not decided on.
func TestLifecycleStatusHeldAndCacheBehind(t *testing.T) {
	g := newLifeRig(t, job("j"))
	g.step = StatusStep{Hold: func() time.Duration { return 3 * time.Second }}
	res, err := g.reconcile(t, "j")
	if err != nil || res.RequeueAfter != 3*time.Second || g.statusWrites != 0 {
		t.Fatalf("held: %v, %v, %d status writes; want a requeue after 3s and no write", res, err, g.statusWrites)
	}
	if got := g.reasons(); !slices.Equal(got, []string{"Wrote"}) {
		t.Errorf("held: events %v, want only [Wrote]: the status change's event waits for its write", got)
	}

	g.step = StatusStep{}
	g.life.Writes = &StatusWrites{}
	if _, err := g.reconcile(t, "j"); err != nil || g.statusWrites != 1 {
		t.Fatalf("%v, %d status writes; want 1", err, g.statusWrites)
	}
	g.reasons()
	// Read the cluster as it was before that write: the cache has not shown it yet.
	stale := g.get(t, "j")
	g.life.Client = interceptor.NewClient(g.cl, interceptor.Funcs{Get: func(_ context.Context, _ client.WithWatch, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
		s := stale.DeepCopy()
		s.ResourceVersion = g.life.Writes.wroteOver[client.ObjectKeyFromObject(stale)]
		s.Status = rayv1.RayJobStatus{}
		s.DeepCopyInto(obj.(*rayv1.RayJob))
		return nil
	}})
	res, err = g.reconcile(t, "j")
	if err != nil || res.RequeueAfter != CacheLagRequeue || g.statusWrites != 1 {
		t.Errorf("cache behind: %v, %v, %d status writes; want a requeue after CacheLagRequeue and no write", res, err, g.statusWrites)
	}
	if got := g.reasons(); !slices.Equal(got, []string{"Wrote"}) {
		t.Errorf("cache behind: events %v, want only [Wrote]", got)
	}
}

// A deleted object runs Finalize until it is done; its release events are recorded only once the finalizer is off,
// and a release that conflicted is a quiet look again.
func TestLifecycleDeletion(t *testing.T) {
	deleting := func(j *rayv1.RayJob) {
		j.Finalizers = []string{testFinalizer}
		j.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	}
	g := newLifeRig(t, job("j", deleting), job("bare", func(j *rayv1.RayJob) {
		j.Finalizers = []string{"someone.else/finalizer"}
		j.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	}))
	calls := 0
	done := false
	g.finalize = func(_ *rayv1.RayJob, res *Result) (bool, error) {
		calls++
		res.Eventf(corev1.EventTypeNormal, "Stopped", "Delete", "stopped a child")
		res.StatusEventf(corev1.EventTypeNormal, "Released", "Delete", "released")
		res.Requeue(5 * time.Second)
		return done, nil
	}
	if _, err := g.reconcile(t, "bare"); err != nil || calls != 0 || g.lives != 0 {
		t.Errorf("a deleted object without our finalizer: %v, %d finalize calls, %d lives; want nothing", err, calls, g.lives)
	}
	res, err := g.reconcile(t, "j")
	if err != nil || res.RequeueAfter != 5*time.Second || calls != 1 || g.lives != 0 {
		t.Fatalf("not done: %v, %v, %d calls, %d lives; want a requeue after 5s, one call, no live reconcile", res, err, calls, g.lives)
	}
	if got := g.reasons(); !slices.Equal(got, []string{"Stopped"}) || len(g.get(t, "j").Finalizers) != 1 {
		t.Errorf("not done: events %v, finalizers %v; want [Stopped] and the finalizer kept", got, g.get(t, "j").Finalizers)
	}

	done = true
	g.refuseFinalizer = true
	res, err = g.reconcile(t, "j")
	if err != nil || res.RequeueAfter != ConflictRequeue {
		t.Errorf("release conflicted: %v, %v; want a quiet requeue after ConflictRequeue", res, err)
	}
	if got := g.reasons(); !slices.Equal(got, []string{"Stopped"}) {
		t.Errorf("release conflicted: events %v, want [Stopped]: the release did not happen", got)
	}

	g.refuseFinalizer = false
	if _, err := g.reconcile(t, "j"); err != nil {
		t.Fatal(err)
	}
	if got := g.reasons(); !slices.Equal(got, []string{"Stopped", "Released"}) {
		t.Errorf("released: events %v, want [Stopped Released]", got)
	}
	if err := g.cl.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "j"}, &rayv1.RayJob{}); !apierrors.IsNotFound(err) {
		t.Errorf("the RayJob after its last finalizer went: %v, want NotFound", err)
	}
}

// patchingStatus is a StatusWriter that is a MetadataPatcher: it records the patches and applies them through the
// client.
type patchingStatus struct {
	StatusWriter
	cl      client.Client
	patches []string
}

func (p *patchingStatus) PatchMetadata(ctx context.Context, obj client.Object, patch []byte) error {
	p.patches = append(p.patches, string(patch))
	return p.cl.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
}

// A StatusWriter that is a MetadataPatcher writes the finalizer, on and off, and the Client writes none; with a
// plain StatusWriter the Client writes it (the rig's other tests).
func TestLifecycleFinalizerThroughStatusWriter(t *testing.T) {
	g := newLifeRig(t, job("j"))
	base := g.cl
	clientPatches := 0
	g.life.Client = interceptor.NewClient(base, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			clientPatches++
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	ps := &patchingStatus{StatusWriter: ClientStatus(base), cl: base}
	g.life.StatusWriter = ps
	if _, err := g.reconcile(t, "j"); err != nil {
		t.Fatal(err)
	}
	if got := g.get(t, "j").Finalizers; !slices.Equal(got, []string{testFinalizer}) {
		t.Fatalf("finalizers %v, want [%s]", got, testFinalizer)
	}
	if err := base.Delete(context.Background(), g.get(t, "j")); err != nil {
		t.Fatal(err)
	}
	g.finalize = func(*rayv1.RayJob, *Result) (bool, error) { return true, nil }
	if _, err := g.reconcile(t, "j"); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "j"}, &rayv1.RayJob{}); !apierrors.IsNotFound(err) {
		t.Errorf("the RayJob after its finalizer went: %v, want NotFound", err)
	}
	if len(ps.patches) != 2 || !strings.Contains(ps.patches[0], testFinalizer) || !strings.Contains(ps.patches[1], `"finalizers":null`) {
		t.Errorf("patches through the status writer %q, want the finalizer put on, then taken off", ps.patches)
	}
	if clientPatches != 0 {
		t.Errorf("the Lifecycle's client patched %d times; want none while its status writer is a MetadataPatcher", clientPatches)
	}
}
