package raycluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
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

// startCoalescer runs a RayCluster controller of its own on ns, with the given window and clock.
func startCoalescer(t *testing.T, cfg *rest.Config, ns string, window time.Duration, clk *clocktesting.FakeClock) (*Reconciler, *stalenessLog) {
	t.Helper()
	opts := Options{StatusCoalesceWindow: window}
	if clk != nil {
		opts.Clock = clk
	}
	log := &stalenessLog{}
	r := startNamespaced(t, cfg, ns, opts, func(r *Reconciler) { r.observeStaleness = log.observe })
	return r, log
}

// startNamespaced runs a RayCluster controller of its own, with opts, that sees namespace ns only; prepare, when
// set, adjusts it before it starts. It stops when t ends.
func startNamespaced(t *testing.T, cfg *rest.Config, ns string, opts Options, prepare func(*Reconciler)) *Reconciler {
	t.Helper()
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := labels.NewRequirement(rayv1.LabelNodeType, selection.Exists, nil)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.NewSelector().Add(*req)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := NewReconciler(mgr, opts)
	if prepare != nil {
		prepare(r)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	return r
}

// TestStatusCoalescingBound proves the bound outside a burst on a fake clock, in the case a user met: a group
// scaled 0 -> 2 (as the autoscaler does) whose workers turn Ready. The clock only moves when the test moves it,
// and only ever to the moment a held change falls due (quietStatusHold after it was first held): if the controller
// held a change longer, the status would never show the Ready workers. Every status write must then carry changes
// held exactly that long or not at all. With the window 0 (coalescing off) every change is written at once.
func TestStatusCoalescingBound(t *testing.T) {
	restCfg, cl := testutil.StartEnvtest(t)
	ctx := context.Background()
	for _, ns := range []string{"coalesced", "uncoalesced"} {
		mustCreate(t, cl, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	coalesced, coalescedLog := startCoalescer(t, restCfg, "coalesced", DefaultStatusCoalesceWindow, clk)
	_, offLog := startCoalescer(t, restCfg, "uncoalesced", -1, nil)

	// run plays the autoscaler scenario on ns. advance, when set, is called while waiting: it moves the clock.
	run := func(t *testing.T, ns string, advance func(types.NamespacedName)) {
		rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 0).Obj()
		mustCreate(t, cl, rc)
		key := client.ObjectKeyFromObject(rc)
		get := func() *rayv1.RayCluster {
			got := &rayv1.RayCluster{}
			if err := cl.Get(ctx, key, got); err != nil {
				t.Fatal(err)
			}
			return got
		}
		pods := func(n int) []corev1.Pod {
			var ps []corev1.Pod
			eventually(t, fmt.Sprintf("%d pods", n), func() (bool, string) {
				if advance != nil {
					advance(key)
				}
				list := &corev1.PodList{}
				if err := cl.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelCluster: rc.Name}); err != nil {
					t.Fatal(err)
				}
				ps = list.Items
				return len(ps) == n, fmt.Sprintf("%d pods", len(ps))
			})
			return ps
		}
		waitStatus := func(what string, ok func(*rayv1.RayCluster) bool) {
			eventually(t, what, func() (bool, string) {
				if advance != nil {
					advance(key)
				}
				got := get()
				return ok(got), fmt.Sprintf("status %+v", got.Status)
			})
		}
		for i, p := range pods(1) {
			setPhase(t, cl, &p, corev1.PodRunning, true, fmt.Sprintf("10.1.0.%d", i+1))
		}
		waitStatus("ready", func(c *rayv1.RayCluster) bool { return c.Status.State == rayv1.Ready })
		eventually(t, "scale to 2", func() (bool, string) {
			c := get()
			c.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](2)
			err := cl.Update(ctx, c)
			return err == nil, fmt.Sprint(err)
		})
		for i, p := range pods(3) {
			if !clusterbuild.PodRunningAndReady(&p) {
				setPhase(t, cl, &p, corev1.PodRunning, true, fmt.Sprintf("10.1.1.%d", i+1))
			}
		}
		waitStatus("2 ready workers", func(c *rayv1.RayCluster) bool {
			return c.Status.ReadyWorkerReplicas == 2 && c.Status.ObservedGeneration == c.Generation
		})
	}

	t.Run("bounded", func(t *testing.T) {
		// advance moves the clock to the moment the held change falls due, once per held change: it waits for
		// that change to be written (or superseded by a later hold) before moving again.
		var due time.Time
		advance := func(key types.NamespacedName) {
			since, held := coalesced.pending.heldSince(key)
			if !held || !since.Add(quietStatusHold).After(due) {
				return
			}
			due = since.Add(quietStatusHold)
			clk.SetTime(due)
		}
		run(t, "coalesced", advance)
		got := coalescedLog.all()
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
		run(t, "uncoalesced", nil)
		got := offLog.all()
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
