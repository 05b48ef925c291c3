package raycronjob

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// fakeReconciler reconciles against the fake client, for what the API server cannot be made to do on cue: a run's
// name already taken, by this RayCronJob's own earlier attempt or by a stranger.
func fakeReconciler(t *testing.T, now time.Time, objs ...client.Object) (*Reconciler, client.Client, *events.FakeRecorder) {
	t.Helper()
	s := runtime.NewScheme()
	if err := rayv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	cl := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&rayv1.RayCronJob{}).Build()
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{client: cl, reader: cl, recorder: rec, opts: Options{Clock: clocktesting.NewFakeClock(now), Local: time.UTC,
		StatusWriter: reconcile.ClientStatus(cl)}}
	r.life = r.lifecycle()
	return r, cl, rec
}

func TestReconcileRunNameAlreadyTaken(t *testing.T) {
	run := at("2024-01-01T00:05:00Z")
	for _, tc := range []struct {
		name      string
		ours      bool
		wantEvent string // "" for none
	}{
		{"by an earlier attempt of this RayCronJob: the run is recorded, nothing reported", true, ""},
		{"by a RayJob it does not own: the run is skipped with a warning", false, "Warning RayJobNameTaken RayJob nightly-28401125 exists and is not this RayCronJob's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cj := cronJob("*/5 * * * *", "2024-01-01T00:00:10Z")
			existing := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Name: ChildName(cj.Name, run), Namespace: cj.Namespace}}
			if tc.ours {
				existing = buildRayJob(cj, run)
			}
			r, cl, rec := fakeReconciler(t, at("2024-01-01T00:05:30Z"), cj, existing)
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cj)})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != 4*time.Minute+30*time.Second {
				t.Errorf("requeueAfter %v, want 4m30s (the 00:10 run)", res.RequeueAfter)
			}
			got := &rayv1.RayCronJob{}
			if err := cl.Get(context.Background(), client.ObjectKeyFromObject(cj), got); err != nil {
				t.Fatal(err)
			}
			if lst := got.Status.LastScheduleTime; lst == nil || !lst.Time.Equal(run) {
				t.Errorf("lastScheduleTime %v, want %v", lst, run)
			}
			select {
			case e := <-rec.Events:
				if tc.wantEvent == "" || !strings.HasPrefix(e, tc.wantEvent) {
					t.Errorf("event %q, want %q", e, tc.wantEvent)
				}
			default:
				if tc.wantEvent != "" {
					t.Errorf("no event, want %q", tc.wantEvent)
				}
			}
		})
	}
}

// A cache that has not seen the last status write still shows the previous run due. The RayJob of that run may be
// gone already (finished and deleted by its own deletion settings); the controller must read the RayCronJob as
// stored before creating, or it would run the job a second time.
func TestReconcileStaleCacheDoesNotRepeatARun(t *testing.T) {
	cj := cronJob("*/5 * * * *", "2024-01-01T00:00:10Z", lastRun("2024-01-01T00:05:00Z"))
	r, cl, _ := fakeReconciler(t, at("2024-01-01T00:05:30Z"), cj)
	r.client = interceptor.NewClient(cl.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if stale, ok := obj.(*rayv1.RayCronJob); ok {
				stale.Status.LastScheduleTime = nil
			}
			return nil
		},
	})
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cj)})
	if err != nil {
		t.Fatal(err)
	}
	jobs := &rayv1.RayJobList{}
	if err := cl.List(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 0 {
		t.Errorf("created %s for a run already recorded", jobs.Items[0].Name)
	}
	if res.RequeueAfter != 4*time.Minute+30*time.Second {
		t.Errorf("requeueAfter %v, want 4m30s (the 00:10 run)", res.RequeueAfter)
	}
}
