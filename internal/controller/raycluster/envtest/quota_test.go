package envtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// testQuotaBackoff: a ResourceQuota of no pods refuses the head; raised to one pod, it lets the head in and refuses
// every worker. The controller retries the refused creates with a growing interval, one streak from the first
// refusal (the head getting in while its workers are refused does not start it again), reports each refusal once
// on ReplicaFailure and in one event per kind (not one per retry), and creates the workers once the quota allows.
func testQuotaBackoff(t *testing.T, e *env) {
	ns := e.Namespace(t)
	ctx := context.Background()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	e.Create(t, q)
	// envtest runs no quota controller: the status it would fill in, which the admission plugin then keeps.
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
	if err := e.cl.Status().Update(ctx, q); err != nil {
		t.Fatal(err)
	}
	setQuota := func(pods string) {
		t.Helper()
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(q), q); err != nil {
			t.Fatal(err)
		}
		q.Spec.Hard[corev1.ResourcePods] = resource.MustParse(pods)
		if err := e.cl.Update(ctx, q); err != nil {
			t.Fatal(err)
		}
		q.Status.Hard = q.Spec.Hard.DeepCopy()
		if err := e.cl.Status().Update(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 2).Obj()
	e.Create(t, rc)
	refused := func() int {
		n := 0
		for _, a := range e.creates.in(ns) {
			if a.failed {
				n++
			}
		}
		return n
	}
	testutil.Eventually(t, time.Minute, "2 refused head creates", func() (bool, string) {
		return refused() >= 2, fmt.Sprintf("%d refused", refused())
	})
	setQuota("1")

	const wantFailures = 7
	testutil.Eventually(t, time.Minute, fmt.Sprintf("%d refused creates", wantFailures), func() (bool, string) {
		return refused() >= wantFailures, fmt.Sprintf("%d refused", refused())
	})
	var fails []time.Time
	for _, a := range e.creates.in(ns) {
		if a.failed {
			fails = append(fails, a.at)
		}
	}
	// CheckBackoff wants the i-th interval at least base<<i, so the sixth is at least 32 times the first wait: the
	// intervals grow, and a streak restarted when the head got in would fail it. Intervals are not compared with
	// each other: on a loaded machine the first can come seconds late (2.8 s once, in CI), and that proves nothing.
	testutil.CheckBackoff(t, fails, testCreateBackoffBase)

	got := testutil.Get(t, e.Env, rc)
	cond := meta.FindStatusCondition(got.Status.Conditions, string(rayv1.RayClusterReplicaFailure))
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != rayv1.FailedCreateWorkerPod {
		t.Errorf("ReplicaFailure condition %+v; want True, %s", cond, rayv1.FailedCreateWorkerPod)
	}
	// Without the generated pod name, which differs on every retry (the condition is then written once).
	if cond != nil && strings.Contains(cond.Message, "rc-small-worker-") {
		t.Errorf("ReplicaFailure message names a refused pod: %q", cond.Message)
	}
	for _, reason := range []string{raycluster.EventFailedToCreateHeadPod, raycluster.EventFailedToCreateWorkerPod} {
		waitEvent(t, e, ns, reason)
		evs := e.events(t, ns, reason)
		if len(evs) != 1 || !strings.HasSuffix(evs[0], "(×1)") {
			t.Errorf("%d %s events for %d refused creates; want one: %v", len(evs), reason, len(fails), evs)
		}
	}

	// The quota grows: the next retry creates both workers and the failure is cleared.
	setQuota("3")
	e.waitPods(t, rc, 3)
	testutil.Eventually(t, time.Minute, "ReplicaFailure cleared", func() (bool, string) {
		got := testutil.Get(t, e.Env, rc)
		c := meta.FindStatusCondition(got.Status.Conditions, string(rayv1.RayClusterReplicaFailure))
		return c == nil, fmt.Sprintf("%+v", c)
	})
}

// events lists the events of namespace ns with the reason, each as "<note> (series count)".
func (e *env) events(t *testing.T, ns, reason string) []string {
	t.Helper()
	list := &corev1.EventList{}
	if err := e.cl.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.Reason != reason {
			continue
		}
		n := int32(1)
		if ev.Series != nil {
			n = ev.Series.Count
		}
		out = append(out, fmt.Sprintf("%s (×%d)", ev.Message, n))
	}
	return out
}
