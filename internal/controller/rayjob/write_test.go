package rayjob

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

// writeEnv is one running HTTPMode RayJob on a ready cluster, with a fake client whose Service creates fail while
// failServices is set, and a fake Ray head.
type writeEnv struct {
	cl           client.Client
	r            *Reconciler
	rec          *events.FakeRecorder
	ray          *fakeray.Fleet
	j            *rayv1.RayJob
	c            *rayv1.RayCluster
	failServices bool
}

func newWriteEnv(t *testing.T, mutate func(j *rayv1.RayJob)) *writeEnv {
	t.Helper()
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	e := &writeEnv{ray: fakeray.NewFleet(fakeray.Options{Manual: true}), rec: events.NewFakeRecorder(100)}
	t.Cleanup(e.ray.Close)
	e.j = planJob(rayv1.HTTPMode, startedStatus(rayv1.JobDeploymentStatusRunning, rayv1.JobStatusRunning), func(j *rayv1.RayJob) {
		controllerutil.AddFinalizer(j, Finalizer)
		if mutate != nil {
			mutate(j)
		}
	})
	e.c = ownedCluster(e.j, rayv1.Ready)
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(e.j, e.c).
		WithStatusSubresource(&rayv1.RayJob{}, &rayv1.RayCluster{}).
		WithIndex(&corev1.Pod{}, clusterpods.Index, clusterpods.IndexValue).
		Build()
	e.cl = interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.Service); ok && e.failServices {
				return errors.New("injected: services are refused")
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	e.r = &Reconciler{client: e.cl, reader: e.cl, recorder: e.rec, rays: e.ray, opts: Options{
		Clock: clocktesting.NewFakeClock(planNow), StatusWriter: reconcile.ClientStatus(e.cl),
		StatusCheckTimeout: DefaultStatusCheckTimeout, TransitionGracePeriod: DefaultTransitionGracePeriod,
		SubmitterFinishedTimeout: DefaultSubmitterFinishedTimeout, PollInterval: DefaultPollInterval, StopOnDeleteTimeout: time.Minute,
	}}
	e.r.life = e.r.lifecycle()
	return e
}

func (e *writeEnv) reconcile(t *testing.T) (ctrl.Result, error) {
	t.Helper()
	return e.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(e.j)})
}

func (e *writeEnv) stored(t *testing.T) *rayv1.RayJob {
	t.Helper()
	got := &rayv1.RayJob{}
	if err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(e.j), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// events drains the recorder: each "<type> <reason> <note>".
func (e *writeEnv) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func reasonsOf(evs []string) []string {
	var out []string
	for _, ev := range evs {
		if f := strings.Fields(ev); len(f) > 1 {
			out = append(out, f[1])
		}
	}
	return out
}

// A write that fails ends the reconcile where the plan made it: Ray's SUCCEEDED, read before the head Service could
// be made, is not recorded, and the reconcile's error is the write's. Once the Service can be made, the same
// reconcile completes the job.
func TestWriteStopsAtTheFirstFailedWrite(t *testing.T) {
	e := newWriteEnv(t, nil)
	e.ray.Cluster("ns", planCluster).SetJob(planJobID, ray.JobStatusSucceeded, 0, 0)
	e.failServices = true
	if _, err := e.reconcile(t); err == nil || !strings.Contains(err.Error(), "services are refused") {
		t.Fatalf("reconcile error %v, want the Service create's", err)
	}
	got := e.stored(t)
	if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusRunning || got.Status.JobStatus != rayv1.JobStatusRunning {
		t.Errorf("after the failed write: %s/%s, want Running/RUNNING (nothing past the failed write recorded)", got.Status.JobDeploymentStatus, got.Status.JobStatus)
	}
	if got.Status.RayClusterStatus.State != rayv1.Ready {
		t.Errorf("the cluster's status, mirrored before the failed write, was not recorded: %+v", got.Status.RayClusterStatus)
	}
	if r := reasonsOf(e.events()); !equalStrings(r, []string{ReasonFailedCreateService}) {
		t.Errorf("events %v, want only %s", r, ReasonFailedCreateService)
	}

	e.failServices = false
	if _, err := e.reconcile(t); err != nil {
		t.Fatal(err)
	}
	got = e.stored(t)
	if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusComplete || ptr.Deref(got.Status.Succeeded, 0) != 1 {
		t.Errorf("once the Service is made: %s, succeeded %v; want Complete, 1", got.Status.JobDeploymentStatus, got.Status.Succeeded)
	}
	// The deployment status and the Ray job's status changed in one write: one event says both.
	want := []string{ReasonCreatedService, ReasonStatusChanged}
	evs := e.events()
	if r := reasonsOf(evs); !equalStrings(r, want) {
		t.Fatalf("events %v, want %v", r, want)
	}
	if n := evs[1]; !strings.Contains(n, `-> "Complete"`) || !strings.HasSuffix(n, "; Ray job "+planJobID+" is SUCCEEDED") {
		t.Errorf("status event %q, want the deployment status and the Ray job's", n)
	}
}

// A job past activeDeadlineSeconds: the writer stops the Ray job the plan gave up on, and the event of the stop
// comes before the status change it led to.
func TestWriteStopsTheRayJobPastItsDeadline(t *testing.T) {
	e := newWriteEnv(t, func(j *rayv1.RayJob) { j.Spec.ActiveDeadlineSeconds = ptr.To[int32](60) })
	e.ray.Cluster("ns", planCluster).SetJob(planJobID, ray.JobStatusRunning, 0, 0)
	if _, err := e.reconcile(t); err != nil {
		t.Fatal(err)
	}
	got := e.stored(t)
	if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusFailed || got.Status.Reason != rayv1.DeadlineExceeded {
		t.Errorf("status %s reason %s, want Failed, DeadlineExceeded", got.Status.JobDeploymentStatus, got.Status.Reason)
	}
	if stops := e.ray.Cluster("ns", planCluster).Stops(); !equalStrings(stops, []string{planJobID}) {
		t.Errorf("stops %v, want [%s]", stops, planJobID)
	}
	want := []string{ReasonStoppedJob, ReasonStatusChanged}
	if r := reasonsOf(e.events()); !equalStrings(r, want) {
		t.Errorf("events %v, want %v", r, want)
	}
	// The status as written names when the deadline passed.
	if got.Status.EndTime == nil || !got.Status.EndTime.Equal(ptr.To(metav1.NewTime(planNow))) {
		t.Errorf("endTime %v, want %v", got.Status.EndTime, planNow)
	}
}

func equalStrings(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00") && len(a) == len(b)
}
