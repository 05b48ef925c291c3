package testutil

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
