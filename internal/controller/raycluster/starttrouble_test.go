package raycluster

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/testutil"
)

// Each pod's cause is reported once however many reconciles see it: the kubelet flipping between ErrImagePull and
// ImagePullBackOff is one cause, a reconcile that changes nothing reports nothing, a new cause of the same pod is
// reported, and a cause a reconcile could not store is reported by the reconcile that stores it, once.
func TestStartTroubleEventsOnce(t *testing.T) {
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rc := testutil.MakeRayCluster("ns", "rc").Workers("small", 1).Obj()
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rc).WithStatusSubresource(rc).Build()
	r := newReconciler(cl, cl, nil, Options{StatusCoalesceWindow: -1})
	key := client.ObjectKeyFromObject(rc)
	read := func() *rayv1.RayCluster {
		c := &rayv1.RayCluster{}
		if err := cl.Get(ctx, key, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	rec := events.NewFakeRecorder(100)
	// reconcile runs the status step of a reconcile that read the cluster as c and listed pods, and returns the
	// events it recorded.
	reconcileWith := func(c *rayv1.RayCluster, pods ...corev1.Pod) []string {
		t.Helper()
		rn := newRun(c, key)
		rn.obs = observed{reconcileOK: true, pods: pods, podsListed: true}
		read := c.Status.DeepCopy()
		var res reconcile.Result
		if _, err := res.Finish(rec, c, nil, r.life.WriteStatus(ctx, c, read, r.statusStep(rn, read, &res), &res)); err != nil {
			t.Fatal(err)
		}
		var got []string
		for len(rec.Events) > 0 {
			got = append(got, <-rec.Events)
		}
		return got
	}
	waitingPod := func(name, nodeType, reason, msg string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{rayv1.LabelNodeType: nodeType}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-" + nodeType, Image: "rayproject/ray:nope"}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "ray-" + nodeType,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}}}
	}
	const pullErr = `rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/rayproject/ray:nope": not found`
	worker := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rc-worker", Labels: map[string]string{rayv1.LabelNodeType: rayv1.NodeTypeWorker}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu."}}}}
	pulling := waitingPod("rc-head", rayv1.NodeTypeHead, "ErrImagePull", pullErr)
	backingOff := waitingPod("rc-head", rayv1.NodeTypeHead, "ImagePullBackOff", `Back-off pulling image "rayproject/ray:nope": ErrImagePull: `+pullErr)
	crashing := waitingPod("rc-head", rayv1.NodeTypeHead, "CrashLoopBackOff", "back-off 10s")

	got := reconcileWith(read(), pulling, worker)
	if len(got) != 2 || !strings.HasPrefix(got[0], "Warning ErrImagePull pod rc-head: ErrImagePull: ") || !strings.HasPrefix(got[1], "Warning Unschedulable pod rc-worker: ") {
		t.Fatalf("first reconcile's events: %q", got)
	}
	for i, pods := range [][]corev1.Pod{{backingOff, worker}, {backingOff, worker}, {pulling, worker}} {
		if got := reconcileWith(read(), pods...); len(got) != 0 {
			t.Errorf("reconcile %d of the same causes recorded %q", i+2, got)
		}
	}
	stale := read()
	reconcileWith(read(), backingOff) // the worker is gone: stored
	// A reconcile that read the cluster before that write (a cache behind, reconcile.StatusWrites) stores
	// nothing, and the new cause's event waits for the reconcile that stores it.
	if got := reconcileWith(stale, crashing); len(got) != 0 {
		t.Errorf("a reconcile that stored no status recorded %q", got)
	}
	if got := reconcileWith(read(), crashing); len(got) != 1 || !strings.HasPrefix(got[0], "Warning CrashLoopBackOff pod rc-head: ") {
		t.Errorf("the head's new cause: events %q", got)
	}
	if got := reconcileWith(read(), crashing); len(got) != 0 {
		t.Errorf("the crash loop seen again recorded %q", got)
	}
	if reason := read().Status.Reason; !strings.HasPrefix(reason, "pod rc-head: CrashLoopBackOff: ") {
		t.Errorf("status.reason %q", reason)
	}
}
