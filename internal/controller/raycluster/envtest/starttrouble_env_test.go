package envtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/podtrouble"
	"github.com/manta-dev/manta/internal/testutil"
)

// testStartTrouble plays the kubelet and the scheduler: a head whose image cannot be pulled and a worker no node
// can take are named in status.reason, each with a Warning event about the cluster naming the pod; a new cause of
// the head (its container now crash-looping) is a new event; once every pod is Running and Ready the reason is
// empty again.
func testStartTrouble(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	e.Create(t, rc)
	pods := e.waitPods(t, rc, 2)
	var head, worker *corev1.Pod
	for i := range pods {
		if pods[i].Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead {
			head = &pods[i]
		} else {
			worker = &pods[i]
		}
	}
	image := head.Spec.Containers[0].Image
	pullErr := fmt.Sprintf(`failed to pull and unpack image %q: failed to resolve image: %s: not found`, image, image)
	head.Status.Phase = corev1.PodPending
	head.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: head.Spec.Containers[0].Name, Image: image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
			Message: fmt.Sprintf("Back-off pulling image %q: ErrImagePull: %s", image, pullErr)}}}}
	e.setStatus(t, head)
	worker.Status.Phase = corev1.PodPending
	worker.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 Insufficient cpu."}}
	e.setStatus(t, worker)

	wantHead := fmt.Sprintf("pod %s: ErrImagePull: container %s cannot pull image %q: %s", head.Name, head.Spec.Containers[0].Name, image, pullErr)
	wantWorker := fmt.Sprintf("pod %s: Unschedulable: no node can run it: 0/3 nodes are available: 3 Insufficient cpu.", worker.Name)
	testutil.WaitFor(t, e.Env, rc, "status.reason naming both pods", func(c *rayv1.RayCluster) bool {
		return c.Status.Reason == wantHead+"; "+wantWorker
	})
	if note := e.WaitEvent(t, rc, corev1.EventTypeWarning, podtrouble.ReasonImagePull); note != wantHead {
		t.Errorf("ErrImagePull event: %q, want %q", note, wantHead)
	}
	if note := e.WaitEvent(t, rc, corev1.EventTypeWarning, podtrouble.ReasonUnschedulable); note != wantWorker {
		t.Errorf("Unschedulable event: %q, want %q", note, wantWorker)
	}

	// The image is fixed by hand on the node; the container now exits 3.
	head = testutil.Get(t, e.Env, head)
	head.Status.Phase = corev1.PodRunning
	head.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
		Message: "back-off 10s restarting failed container"}}
	head.Status.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 3, Reason: "Error", Message: "ValueError: bad config\n"}}
	e.setStatus(t, head)
	note := e.WaitEvent(t, rc, corev1.EventTypeWarning, podtrouble.ReasonCrashLoop)
	if want := "last exit code 3 (Error), termination message: ValueError: bad config"; !strings.Contains(note, want) || !strings.HasPrefix(note, "pod "+head.Name+": ") {
		t.Errorf("CrashLoopBackOff event: %q, want it to name pod %s and %q", note, head.Name, want)
	}
	testutil.WaitFor(t, e.Env, rc, "status.reason naming the crash loop", func(c *rayv1.RayCluster) bool {
		return strings.HasPrefix(c.Status.Reason, "pod "+head.Name+": CrashLoopBackOff: ") && strings.HasSuffix(c.Status.Reason, "; "+wantWorker)
	})

	for _, p := range []*corev1.Pod{testutil.Get(t, e.Env, head), testutil.Get(t, e.Env, worker)} {
		p.Status.ContainerStatuses = nil
		testutil.SetPodPhase(t, e.cl, p, corev1.PodRunning, true, "10.0.9.1")
	}
	got := e.waitState(t, rc, rayv1.Ready)
	testutil.WaitFor(t, e.Env, got, "status.reason cleared", func(c *rayv1.RayCluster) bool { return c.Status.Reason == "" })
}

func (e *env) setStatus(t *testing.T, p *corev1.Pod) {
	t.Helper()
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].LastTransitionTime.IsZero() {
			p.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	if err := e.cl.Status().Update(context.Background(), p); err != nil {
		t.Fatalf("set the status of pod %s: %v", p.Name, err)
	}
}
