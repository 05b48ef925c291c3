package imagepulljob

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	"github.com/manta-dev/manta/internal/controller/shared/createbackoff"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/testutil"
)

// clientCache serves the reconciler's cache reads from a client: an always fresh cache, so a step-driven test
// controls exactly what each reconcile sees.
type clientCache struct {
	cache.Cache
	c client.Client
}

func (c clientCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.c.List(ctx, list, opts...)
}

// faultRig is a Reconciler on a fake API server whose writes a test can spoil, stepped by hand.
type faultRig struct {
	r     *Reconciler
	cl    client.Client
	key   types.NamespacedName
	clock *clocktesting.FakeClock
	// deletes and creates count the pod writes sent, by pod name (the controller sends them in parallel).
	mu               sync.Mutex
	deletes, creates map[string]int
}

// newFaultRig makes the job and three Ready nodes; refuse, when set, answers a pod delete instead of the API server
// (nil lets it through).
func newFaultRig(t *testing.T, job *mantav1alpha1.ImagePullJob, refuse func(pod string, try int) error) *faultRig {
	t.Helper()
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	rig := &faultRig{key: client.ObjectKeyFromObject(job), deletes: map[string]int{}, creates: map[string]int{}}
	objs := []client.Object{job}
	for _, n := range nodes(makeNode("node-0"), makeNode("node-1"), makeNode("node-2")) {
		objs = append(objs, n.DeepCopy())
	}
	rig.cl = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&mantav1alpha1.ImagePullJob{}, &corev1.Pod{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if pod, ok := obj.(*corev1.Pod); ok {
					rig.mu.Lock()
					rig.creates[pod.Name]++
					rig.mu.Unlock()
					pod.UID = types.UID(pod.Name) // the fake gives none, and deletes are expected by UID
				}
				return c.Create(ctx, obj, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				if pod, ok := obj.(*corev1.Pod); ok {
					rig.mu.Lock()
					rig.deletes[pod.Name]++
					try := rig.deletes[pod.Name]
					rig.mu.Unlock()
					if refuse != nil {
						if err := refuse(pod.Name, try); err != nil {
							return err
						}
					}
				}
				return c.Delete(ctx, obj, opts...)
			},
		}).Build()
	rig.clock = clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rig.r = &Reconciler{
		client: rig.cl, apiReader: rig.cl, cache: clientCache{c: rig.cl},
		recorder: events.NewFakeRecorder(1000),
		opts:     Options{RetryBackoff: time.Second, PodSelectorResync: time.Second, Clock: rig.clock, StatusWriter: reconcile.ClientStatus(rig.cl)},
		exp:      newExpectations(rig.clock.Now),
		backoff:  createbackoff.New(0, 0),
	}
	rig.r.life = rig.r.lifecycle()
	return rig
}

// step runs one reconcile, then plays the kubelet: every puller pod that exists has pulled its image.
func (rig *faultRig) step(t *testing.T) (ctrl.Result, error) {
	t.Helper()
	ctx := context.Background()
	res, err := rig.r.Reconcile(ctx, ctrl.Request{NamespacedName: rig.key})
	var pods corev1.PodList
	if lerr := rig.cl.List(ctx, &pods); lerr != nil {
		t.Fatal(lerr)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Status.Phase != corev1.PodSucceeded {
			p.Status.Phase = corev1.PodSucceeded
			if uerr := rig.cl.Status().Update(ctx, p); uerr != nil {
				t.Fatal(uerr)
			}
		}
	}
	return res, err
}

func (rig *faultRig) job(t *testing.T) *mantav1alpha1.ImagePullJob {
	t.Helper()
	job := &mantav1alpha1.ImagePullJob{}
	if err := rig.cl.Get(context.Background(), rig.key, job); err != nil {
		t.Fatal(err)
	}
	return job
}

// TestDeleteRefusedWithConflict replays issue 39's stall: three nodes, parallelism 2, and the first delete of every
// puller answered 409 by something in front of the API server (the pod stays). The two first pullers succeed,
// their nodes are recorded, and their deletes are refused. A controller that takes the 409 for a done delete keeps
// the delete expectations, never sends the deletes again, and the two leftover pods hold both slots: the third
// node never gets a puller and nothing wakes the job (no requeue, no pod event). The job must instead send the
// deletes again and complete on the three nodes, each pulled once.
func TestDeleteRefusedWithConflict(t *testing.T) {
	job := makeJob("j").always().parallelism(2).obj()
	rig := newFaultRig(t, job, func(pod string, try int) error {
		if try == 1 {
			return apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, pod, errors.New("injected: the object has been modified"))
		}
		return nil
	})
	// Each step is one reconcile on a fresh cache: the job needs about eight (two creates, their records, deletes
	// refused then sent again, the third create, its record). The bound only ends a stalled loop.
	for range 30 {
		if _, err := rig.step(t); err != nil && !apierrors.IsConflict(err) {
			t.Fatalf("reconcile: %v", err)
		}
		if rig.job(t).Status.CompletionTime != nil {
			break
		}
	}
	got := rig.job(t).Status
	if got.CompletionTime == nil || got.Succeeded != 3 || got.Desired != 3 {
		t.Fatalf("job did not complete on 3 nodes after its puller deletes were refused once: %+v", got)
	}
	for _, node := range []string{"node-0", "node-1", "node-2"} {
		name := PodName(job.Name, node, 1)
		if rig.creates[name] != 1 {
			t.Errorf("pod %s created %d times; want once", name, rig.creates[name])
		}
	}
	for _, node := range []string{"node-0", "node-1"} {
		if name := PodName(job.Name, node, 1); rig.deletes[name] < 2 {
			t.Errorf("pod %s: %d deletes sent; want the refused one sent again", name, rig.deletes[name])
		}
	}
}

// errSwallowed, from a test's refuse func, drops a delete as if the API server had taken it but its pod event never
// reached the cache.
var errSwallowed = errors.New("swallowed")

// TestDeleteExpectationLapseWakesTheJob: a delete that went through but whose pod the cache keeps showing alive
// holds its expectation, and with it the job's slots, only until the expectation lapses. Nothing else may wake the
// job then, so the reconcile that leaves an expectation outstanding asks to look again by the lapse, and the
// reconcile after it sends the delete again.
func TestDeleteExpectationLapseWakesTheJob(t *testing.T) {
	job := makeJob("j").always().parallelism(2).obj()
	rig := newFaultRig(t, job, func(_ string, try int) error {
		if try == 1 {
			return errSwallowed
		}
		return nil
	})
	wrap := rig.cl
	rig.cl = interceptor.NewClient(wrap.(client.WithWatch), interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := c.Delete(ctx, obj, opts...); !errors.Is(err, errSwallowed) {
				return err
			}
			return nil
		},
	})
	rig.r.client = rig.cl
	var res ctrl.Result
	for range 30 {
		var err error
		if res, err = rig.step(t); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		if rig.deletes[PodName(job.Name, "node-0", 1)] > 0 {
			break
		}
	}
	if rig.deletes[PodName(job.Name, "node-0", 1)] != 1 {
		t.Fatalf("the first puller was never deleted: %+v", rig.job(t).Status)
	}
	// The same reconcile and the next ones (nothing changed) ask to come back by the lapse.
	for i := range 2 {
		if res.RequeueAfter <= 0 || res.RequeueAfter > expectationsTimeout {
			t.Fatalf("reconcile %d with a delete outstanding asks for requeue after %v; want at most %v", i, res.RequeueAfter, expectationsTimeout)
		}
		var err error
		if res, err = rig.step(t); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	rig.clock.Step(res.RequeueAfter + time.Second)
	for range 30 {
		if _, err := rig.step(t); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		if rig.job(t).Status.CompletionTime != nil {
			break
		}
	}
	if got := rig.job(t).Status; got.CompletionTime == nil || got.Succeeded != 3 {
		t.Fatalf("job did not complete once the lapsed deletes were sent again: %+v", got)
	}
}
