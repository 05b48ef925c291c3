package envtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/controller/shared/metawrite"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

// startFlakyOperator runs the RayJob controller with the operator's status writer made to fail a status write with
// a conflict about half the time, as it does when another writer got there first (never when conflicts is nil),
// and opts changing its options. It returns a stop function.
func startFlakyOperator(t *testing.T, cfg *rest.Config, fr *fakeray.Fleet, conflicts *atomic.Int64, opts ...func(*rayjob.Options)) func() {
	t.Helper()
	o := rayjob.Options{PollInterval: 100 * time.Millisecond, MaxConcurrentReconciles: 2}
	if conflicts != nil {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w, err := metawrite.NewStatus(cfg, hc)
		if err != nil {
			t.Fatal(err)
		}
		o.StatusWriter = flakyStatus{w, conflicts}
	}
	return startOperator(t, rest.CopyConfig(cfg), fr, o, opts)
}

// flakyStatus is metawrite's status writer with about half of its RayJob status writes refused as conflicts.
type flakyStatus struct {
	*metawrite.Status
	conflicts *atomic.Int64
}

func (w flakyStatus) UpdateStatus(ctx context.Context, obj client.Object) error {
	if _, ok := obj.(*rayv1.RayJob); ok && rand.IntN(2) == 0 {
		w.conflicts.Add(1)
		return apierrors.NewConflict(schema.GroupResource{Group: "ray.io", Resource: "rayjobs"}, obj.GetName(), fmt.Errorf("injected"))
	}
	return w.Status.UpdateStatus(ctx, obj)
}

// TestExactlyOnce: with half the status writes conflicting, a submit that times out after Ray accepted it, and
// the operator stopped and started again at each step, every RayJob gets one cluster and one submission.
func TestExactlyOnce(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	e := &env{Env: testutil.NewEnv(cl), cl: cl, ray: newRay(t)}
	var conflicts atomic.Int64
	stop := startFlakyOperator(t, cfg, e.ray, &conflicts)
	defer func() { stop() }()
	restart := func() {
		stop()
		stop = startFlakyOperator(t, cfg, e.ray, &conflicts)
	}

	ns := e.Namespace(t)
	const n = 5
	jobs := make([]*rayv1.RayJob, n)
	for i := range jobs {
		jobs[i] = e.create(t, testutil.MakeRayJob(ns, fmt.Sprintf("once-%d", i)))
	}
	restart()
	for i, j := range jobs {
		got := testutil.WaitFor(t, e.Env, j, "rayClusterName", func(j *rayv1.RayJob) bool { return j.Status.RayClusterName != "" })
		if i%2 == 0 {
			e.ray.Cluster(ns, got.Status.RayClusterName).DropNextSubmitAnswer()
		}
	}
	restart()
	for _, j := range jobs {
		e.readyCluster(t, j)
	}
	for _, j := range jobs {
		e.waitJobStatus(t, j, rayv1.JobStatusPending)
	}
	restart()
	for _, j := range jobs {
		got := testutil.Get(t, e.Env, j)
		e.ray.Cluster(ns, got.Status.RayClusterName).SetJob(got.Status.JobId, ray.JobStatusSucceeded, 1, 2)
	}
	for _, j := range jobs {
		e.waitDeployment(t, j, rayv1.JobDeploymentStatusComplete)
	}
	clusters := &rayv1.RayClusterList{}
	if err := cl.List(context.Background(), clusters, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(clusters.Items) != n {
		t.Errorf("%d RayClusters for %d RayJobs", len(clusters.Items), n)
	}
	for _, j := range jobs {
		got := testutil.Get(t, e.Env, j)
		reqs, nJobs, _ := e.requests(ns, got.Status.RayClusterName)
		if reqs != 1 || nJobs != 1 || ptr.Deref(got.Status.Succeeded, 0) != 1 {
			t.Errorf("%s: %d submit calls, %d jobs in Ray, succeeded %v; want 1, 1, 1", j.Name, reqs, nJobs, got.Status.Succeeded)
		}
	}
	if conflicts.Load() == 0 {
		t.Error("no conflict was injected")
	}
	t.Logf("%d status write conflicts injected, 3 operator restarts", conflicts.Load())
}
