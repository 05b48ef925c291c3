package envtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/idle"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

// TestSuspendAndResume runs the idle controller on envtest against a fake Ray head, with a fake clock stepped by
// the test: one check per step (the interval is 1s of the fake clock), so every wait is on a counter or an object.
func TestSuspendAndResume(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	e := testutil.NewEnv(cl)
	mgr := testutil.NewManager(t, cfg)
	heads := fakeray.NewFleet(fakeray.Options{})
	t.Cleanup(heads.Close)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, err := idle.NewReconciler(mgr, heads, idle.Options{CheckInterval: time.Second, Clock: clk,
		HeadTarget: func(c *rayv1.RayCluster) ray.Target {
			return ray.Target{Namespace: c.Namespace, HeadServiceName: c.Name + "-head-svc"}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx := testutil.RunManager(t, mgr)

	ns := "idle"
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: ns, Name: "sleepy"}
	head := heads.Cluster(ns, key.Name)
	c := testutil.MakeRayCluster(ns, key.Name).Obj()
	c.Annotations = map[string]string{idle.AnnotationIdleTimeout: "10s"}
	if err := cl.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	head.SetActors("ALIVE", "DEAD") // a detached actor keeps it up
	c.Status.State = rayv1.Ready
	if err := cl.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}

	// waitReads steps the clock by step and waits for the check it allows (one more state API read, or for a
	// busy head one jobs read: the fake counts only state reads, so busy checks here are on actors).
	waitReads := func(step time.Duration, want int) {
		t.Helper()
		clk.SetTime(clk.Now().Add(step))
		testutil.Eventually(t, 30*time.Second, "state reads", func() (bool, string) {
			n := head.StateReads()
			return n >= want, fmt.Sprintf("%d state reads, want %d", n, want)
		})
	}
	waitReads(0, 1)
	waitReads(time.Minute, 2) // a minute past the timeout, still busy
	if got := testutil.Get(t, e, c); ptr.Deref(got.Spec.Suspend, false) {
		t.Fatal("a cluster with a live actor was suspended")
	}

	head.SetActors("DEAD")
	head.SetTasks("FINISHED", "FAILED")
	waitReads(time.Second, 4) // first idle check: actors then tasks
	waitReads(5*time.Second, 6)
	if got := testutil.Get(t, e, c); ptr.Deref(got.Spec.Suspend, false) {
		t.Fatal("suspended after 5s of a 10s timeout")
	}
	clk.SetTime(clk.Now().Add(5 * time.Second))
	testutil.Eventually(t, 30*time.Second, "idle suspension", func() (bool, string) {
		got := testutil.Get(t, e, c)
		cond := meta.FindStatusCondition(got.Status.Conditions, idle.ConditionIdleSuspended)
		return ptr.Deref(got.Spec.Suspend, false) && got.Annotations[idle.AnnotationIdleSuspendedAt] != "" && cond != nil && cond.Status == metav1.ConditionTrue,
			fmt.Sprintf("suspend %v annotations %v condition %+v", ptr.Deref(got.Spec.Suspend, false), got.Annotations, cond)
	})
	got := testutil.Get(t, e, c)
	cond := meta.FindStatusCondition(got.Status.Conditions, idle.ConditionIdleSuspended)
	at := got.Annotations[idle.AnnotationIdleSuspendedAt]
	if cond.Message != "suspended at "+at+": no Ray job, Serve application, actor or task for 10s ("+idle.AnnotationIdleTimeout+")" ||
		cond.Reason != idle.ReasonIdleSuspended || cond.LastTransitionTime.UTC().Format(time.RFC3339) != at {
		t.Fatalf("condition %+v, marker %s", cond, at)
	}
	if got.Spec.HeadGroupSpec.Template.Spec.Containers[0].Image != c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Image {
		t.Fatal("the spec changed beyond spec.suspend")
	}
	if note := e.WaitEvent(t, c, corev1.EventTypeNormal, idle.ReasonIdleSuspended); !strings.Contains(note, "suspended after 10s idle") {
		t.Errorf("event note %q", note)
	}
	if !idle.SuspendedForIdleness(got) {
		t.Fatal("SuspendedForIdleness is false for a cluster this controller suspended")
	}

	// A RayJob's resume (idle.Resume) clears spec.suspend; the controller drops the marker and flips the condition.
	got = testutil.UpdateStatus(t, e, c, func(c *rayv1.RayCluster) { c.Status.State = rayv1.Suspended })
	if resumed, err := idle.Resume(ctx, cl, got); err != nil || !resumed {
		t.Fatalf("Resume = %v, %v", resumed, err)
	}
	testutil.Eventually(t, 30*time.Second, "resumed", func() (bool, string) {
		got := testutil.Get(t, e, c)
		cond := meta.FindStatusCondition(got.Status.Conditions, idle.ConditionIdleSuspended)
		_, marked := got.Annotations[idle.AnnotationIdleSuspendedAt]
		return !marked && cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == idle.ReasonResumed,
			fmt.Sprintf("annotations %v condition %+v", got.Annotations, cond)
	})
	// A cluster a user suspended by hand is not ours to resume.
	testutil.Update(t, e, c, func(c *rayv1.RayCluster) { c.Spec.Suspend = ptr.To(true) })
	if resumed, err := idle.Resume(ctx, cl, testutil.Get(t, e, c)); err != nil || resumed {
		t.Fatalf("Resume of a cluster suspended by hand = %v, %v; want false", resumed, err)
	}

	// A bad value is reported on the cluster, naming the annotation.
	bad := testutil.MakeRayCluster(ns, "bad").Obj()
	bad.Annotations = map[string]string{idle.AnnotationIdleTimeout: "5s"}
	if err := cl.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	bad.Status.State = rayv1.Ready
	if err := cl.Status().Update(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if note := e.WaitEvent(t, bad, corev1.EventTypeWarning, idle.ReasonInvalidIdleTimeout); !strings.Contains(note, idle.AnnotationIdleTimeout+`: "5s" is shorter than the minimum 10s`) {
		t.Errorf("event note %q", note)
	}
}
