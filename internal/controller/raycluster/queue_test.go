package raycluster

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	crevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestOwnerHandler(t *testing.T) {
	pod := func(name, apiVersion, kind, owner string, controller bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "1"}}
		if kind != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: owner, Controller: ptr.To(controller)}}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		obj  *corev1.Pod
		want string // "" for none
	}{
		{"controlled by a RayCluster", pod("a", "ray.io/v1", "RayCluster", "rc", true), "rc"},
		{"another version of ray.io", pod("b", "ray.io/v1alpha1", "RayCluster", "rc", true), "rc"},
		{"not the controller", pod("c", "ray.io/v1", "RayCluster", "rc", false), ""},
		{"another group's RayCluster", pod("d", "example.com/v1", "RayCluster", "rc", true), ""},
		{"another kind", pod("e", "ray.io/v1", "RayJob", "rc", true), ""},
		{"no owner", pod("f", "", "", "", false), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r, ok := clusterOf(tc.obj); ok != (tc.want != "") || (ok && r.NamespacedName != (types.NamespacedName{Namespace: "ns", Name: tc.want})) {
				t.Errorf("clusterOf = %v, %v; want %q", r, ok, tc.want)
			}
		})
	}

	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	h := ownerHandler()
	old, changed := pod("p", "ray.io/v1", "RayCluster", "rc", true), pod("p", "ray.io/v1", "RayCluster", "rc", true)
	changed.ResourceVersion = "2"
	h.Update(context.Background(), crevent.UpdateEvent{ObjectOld: old, ObjectNew: changed}, q)
	h.Create(context.Background(), crevent.CreateEvent{Object: pod("q", "ray.io/v1", "RayCluster", "listed", true), IsInInitialList: true}, q)
	got := map[string]int{}
	for q.Len() > 0 {
		item, prio, _ := q.GetWithPriority()
		got[item.Name] = prio
		q.Done(item)
	}
	// A pod change is one request at progressPriority; a pod from the initial list stays low.
	if len(got) != 2 || got["rc"] != progressPriority || got["listed"] != handler.LowPriority {
		t.Errorf("queued %v, want rc at %d and listed at %d", got, progressPriority, handler.LowPriority)
	}
}

// A pod's binding to a node is not reconciled; every change the controller reads is.
func TestPodUpdateMatters(t *testing.T) {
	base := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "1", Labels: map[string]string{"a": "b"}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	scheduled := base.DeepCopy()
	scheduled.ResourceVersion = "2"
	scheduled.Spec.NodeName = "node-1"
	scheduled.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	if !onlyScheduled(base, scheduled) {
		t.Error("binding a pod to a node is reconciled")
	}
	for name, change := range map[string]func(p *corev1.Pod){
		"phase": func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning },
		"ready": func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
		},
		"pod IP":     func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.1" },
		"labels":     func(p *corev1.Pod) { p.Labels = map[string]string{"a": "c"} },
		"deletion":   func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} },
		"containers": func(p *corev1.Pod) { p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "ray"}} },
		"owner":      func(p *corev1.Pod) { p.OwnerReferences = []metav1.OwnerReference{{UID: "u"}} },
		"message":    func(p *corev1.Pod) { p.Status.Message = "evicted" },
		"ready reason": func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"})
		},
	} {
		changed := scheduled.DeepCopy()
		change(changed)
		if onlyScheduled(scheduled, changed) {
			t.Errorf("a change of %s is not reconciled", name)
		}
	}
}
