package raycluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/testutil"
)

// stalenessLog records what a Reconciler reports at each status write.
type stalenessLog struct {
	mu  sync.Mutex
	got []time.Duration
}

func (l *stalenessLog) observe(d time.Duration) {
	l.mu.Lock()
	l.got = append(l.got, d)
	l.mu.Unlock()
}

func (l *stalenessLog) all() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.got...)
}

// heldSince is when the cluster's unwritten change was first held back, if one is.
func (p *pendingStatus) heldSince(key types.NamespacedName) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.since[key]
	return t, ok
}

// TestStatusCoalescingBound proves the bound outside a burst on a fake clock, in the case a user met: a group
// scaled 0 -> 2 (as the autoscaler does) whose workers turn Ready. The clock only moves when the test moves it,
// and only ever to the moment a held change falls due (quietStatusHold after it was first held): if the controller
// held a change longer, the status would never show the Ready workers. Every status write must then carry changes
// held exactly that long or not at all. With the window 0 (coalescing off) every change is written at once.
// The controller runs reconcile by reconcile on a fake client, as its watches and requeues would run it: what it
// reports at each status write, and since when it holds a change, are its own.
func TestStatusCoalescingBound(t *testing.T) {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// run plays the autoscaler scenario with a controller of the given window and clock, and returns what it
	// reported at each status write. advance, when set, is called before each reconcile: it moves the clock.
	run := func(t *testing.T, window time.Duration, clk *clocktesting.FakeClock, advance func(*Reconciler, types.NamespacedName)) []time.Duration {
		rc := testutil.MakeRayCluster("ns", "rc").Workers("small", 0).Obj()
		cl := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&corev1.Pod{}, clusterpods.Index, clusterpods.IndexValue).
			WithObjects(rc).WithStatusSubresource(&rayv1.RayCluster{}, &corev1.Pod{}).Build()
		opts := Options{StatusCoalesceWindow: window}
		if clk != nil {
			opts.Clock = clk
		}
		r := newReconciler(cl, cl, events.NewFakeRecorder(1000), opts)
		log := &stalenessLog{}
		r.observeStaleness = log.observe
		key := client.ObjectKeyFromObject(rc)
		get := func() *rayv1.RayCluster {
			got := &rayv1.RayCluster{}
			if err := cl.Get(ctx, key, got); err != nil {
				t.Fatal(err)
			}
			return got
		}
		// until reconciles until cond holds.
		until := func(what string, cond func() (bool, string)) {
			t.Helper()
			last := ""
			for range 100 {
				if advance != nil {
					advance(r, key)
				}
				if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
					t.Fatal(err)
				}
				var ok bool
				if ok, last = cond(); ok {
					return
				}
			}
			t.Fatalf("%s: not after 100 reconciles: %s", what, last)
		}
		pods := func(n int) []corev1.Pod {
			var ps []corev1.Pod
			until(fmt.Sprintf("%d pods", n), func() (bool, string) {
				list := &corev1.PodList{}
				if err := cl.List(ctx, list, client.InNamespace(rc.Namespace), client.MatchingLabels{rayv1.LabelCluster: rc.Name}); err != nil {
					t.Fatal(err)
				}
				ps = list.Items
				return len(ps) == n, fmt.Sprintf("%d pods", len(ps))
			})
			return ps
		}
		waitStatus := func(what string, ok func(*rayv1.RayCluster) bool) {
			until(what, func() (bool, string) {
				got := get()
				return ok(got), fmt.Sprintf("status %+v", got.Status)
			})
		}
		for i, p := range pods(1) {
			testutil.SetPodPhase(t, cl, &p, corev1.PodRunning, true, fmt.Sprintf("10.1.0.%d", i+1))
		}
		waitStatus("ready", func(c *rayv1.RayCluster) bool { return c.Status.State == rayv1.Ready })
		c := get()
		c.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](2)
		if err := cl.Update(ctx, c); err != nil {
			t.Fatal(err)
		}
		for i, p := range pods(3) {
			if !clusterbuild.PodRunningAndReady(&p) {
				testutil.SetPodPhase(t, cl, &p, corev1.PodRunning, true, fmt.Sprintf("10.1.1.%d", i+1))
			}
		}
		waitStatus("2 ready workers", func(c *rayv1.RayCluster) bool {
			return c.Status.ReadyWorkerReplicas == 2 && c.Status.ObservedGeneration == c.Generation
		})
		return log.all()
	}

	t.Run("bounded", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		// advance moves the clock to the moment the held change falls due, once per held change: it waits for
		// that change to be written (or superseded by a later hold) before moving again.
		var due time.Time
		advance := func(r *Reconciler, key types.NamespacedName) {
			since, held := r.pending.heldSince(key)
			if !held || !since.Add(quietStatusHold).After(due) {
				return
			}
			due = since.Add(quietStatusHold)
			clk.SetTime(due)
		}
		got := run(t, DefaultStatusCoalesceWindow, clk, advance)
		t.Logf("held back at each status write: %v", got)
		held := 0
		for _, d := range got {
			switch d {
			case 0:
			case quietStatusHold:
				held++
			default:
				t.Errorf("a status write carried a change held %s; want 0 or %s (stalenesses %v)", d, quietStatusHold, got)
			}
		}
		if held == 0 {
			t.Errorf("no status write carried a held change (stalenesses %v): nothing was coalesced", got)
		}
	})

	t.Run("window 0 turns coalescing off", func(t *testing.T) {
		got := run(t, -1, nil, nil)
		if len(got) == 0 {
			t.Fatal("no status write recorded")
		}
		for _, d := range got {
			if d != 0 {
				t.Errorf("a status write carried a change held %s with coalescing off (stalenesses %v)", d, got)
			}
		}
	})
}
