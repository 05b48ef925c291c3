package testutil

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EndPod sets what a kubelet reports when a pod's containers exited with code: Succeeded for 0, Failed otherwise;
// not Ready, every container terminated. The caller writes it with a status update.
func EndPod(p *corev1.Pod, code int32) {
	now := metav1.Now()
	reason := "Completed"
	p.Status.Phase = corev1.PodSucceeded
	if code != 0 {
		p.Status.Phase, reason = corev1.PodFailed, "Error"
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
	for i := range p.Status.ContainerStatuses {
		cs := &p.Status.ContainerStatuses[i]
		cs.Ready, cs.State = false, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, FinishedAt: now}}
	}
}

// PodReady says whether the pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SetPodPhase writes p's status as a kubelet would report it: phase, Ready or not, and ip (none when empty).
func SetPodPhase(t testing.TB, cl client.Client, p *corev1.Pod, phase corev1.PodPhase, ready bool, ip string) {
	t.Helper()
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Phase = phase
	p.Status.PodIP = ip
	if ip != "" {
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}
	if err := cl.Status().Update(context.Background(), p); err != nil {
		t.Fatalf("set pod %s %s: %v", p.Name, phase, err)
	}
}
