package raycluster

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manta-dev/manta/internal/controller/shared/podtrouble"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// Why a cluster's pods cannot start (internal/controller/shared/podtrouble) is reported in status.reason, KubeRay's
// free-text field that it clears once the cluster is ready (and never fills otherwise): the causes of up to
// podtrouble.MaxListed pods, the head's first, empty once none has one. Each pod's cause is also a Warning event,
// recorded once: when the status that first names it is stored.

// startTroubleReason is status.reason from the cluster's pods (those not terminating).
func startTroubleReason(pods []corev1.Pod) string { return podtrouble.Summary(podtrouble.Pods(pods)) }

// reportStartTrouble asks for a Warning event for each cause the new status names that the old one did not, about
// the pod (so causes of two pods are two events, not one series).
func reportStartTrouble(res *reconcile.Result, run *run, oldReason string) {
	for _, c := range podtrouble.New(oldReason, podtrouble.Pods(run.obs.pods)) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: run.c.Namespace, Name: c.Pod}}
		res.Events = append(res.Events, reconcile.Event{Type: corev1.EventTypeWarning, Reason: c.Reason, Action: "Start",
			Note: c.Line(), StatusChange: true, Related: pod})
	}
}
