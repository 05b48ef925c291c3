package raycluster

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
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
	h := ownerHandler(true, nil, nil, nil)
	ctx := context.Background()
	old, changed := pod("p", "ray.io/v1", "RayCluster", "rc", true), pod("p", "ray.io/v1", "RayCluster", "rc", true)
	changed.ResourceVersion = "2"
	changed.Status.PodIP = "10.0.0.1"
	deleted := pod("d", "ray.io/v1", "RayCluster", "deleting", true)
	deleted.ResourceVersion = "2"
	deleted.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	start := time.Now()
	h.Update(ctx, crevent.UpdateEvent{ObjectOld: old, ObjectNew: changed}, q)
	h.Update(ctx, crevent.UpdateEvent{ObjectOld: pod("d", "ray.io/v1", "RayCluster", "deleting", true), ObjectNew: deleted}, q)
	h.Create(ctx, crevent.CreateEvent{Object: pod("q", "ray.io/v1", "RayCluster", "listed", true), IsInInitialList: true}, q)
	got := map[string]int{}
	take := func(n int, within time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(within); len(got) < n; {
			if time.Now().After(deadline) {
				t.Fatalf("after %s: queued %v, want %d requests", time.Since(start), got, n)
			}
			if q.Len() == 0 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			item, prio, _ := q.GetWithPriority()
			got[item.Name] = prio
			q.Done(item)
		}
	}
	// A pod being deleted is reconciled at once, at progressPriority.
	take(1, podBatch/2)
	if got["deleting"] != progressPriority {
		t.Fatalf("queued at once %v, want deleting at %d", got, progressPriority)
	}
	// A pod that got its IP, and one from the initial list, wait podBatch; the first is at progressPriority, the
	// other stays low.
	take(3, 3*podBatch)
	if waited := time.Since(start); waited < podBatch-50*time.Millisecond {
		t.Errorf("progress events reconciled after %s, want about %s", waited, podBatch)
	}
	if got["rc"] != progressPriority || got["listed"] != handler.LowPriority {
		t.Errorf("queued %v, want rc at %d and listed at %d", got, progressPriority, handler.LowPriority)
	}

	// Without pods (Services, Jobs), every event but a Service's creation is reconciled at once.
	q2 := priorityqueue.New[reconcile.Request]("test2")
	defer q2.ShutDown()
	ownerHandler(false, nil, nil, nil).Update(ctx, crevent.UpdateEvent{ObjectOld: old, ObjectNew: changed}, q2)
	for deadline := time.Now().Add(podBatch / 2); q2.Len() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a Service or Job event waited")
		}
	}
	item, _ := q2.Get()
	q2.Done(item)
	svc := &corev1.Service{ObjectMeta: *pod("head-svc", "ray.io/v1", "RayCluster", "svc", true).ObjectMeta.DeepCopy()}
	added := time.Now()
	ownerHandler(false, nil, nil, nil).Create(ctx, crevent.CreateEvent{Object: svc}, q2)
	job := &batchv1.Job{ObjectMeta: *pod("cleanup", "ray.io/v1", "RayCluster", "job", true).ObjectMeta.DeepCopy()}
	ownerHandler(false, nil, nil, nil).Create(ctx, crevent.CreateEvent{Object: job}, q2)
	if item, _ := q2.Get(); item.Name != "job" {
		t.Fatalf("first reconciled %v, want the cluster of the created Job (at once)", item)
	} else {
		q2.Done(item)
	}
	item, prio, _ := q2.GetWithPriority()
	if waited := time.Since(added); item.Name != "svc" || waited < podBatch-50*time.Millisecond || prio != progressPriority {
		t.Errorf("the created Service's cluster %v reconciled after %s at priority %d, want svc after about %s at %d", item, waited, prio, podBatch, progressPriority)
	}
	q2.Done(item)
}

func TestPodProgress(t *testing.T) {
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if !podProgress(nil, pending) {
		t.Error("a new pending pod is not progress")
	}
	ready := pending.DeepCopy()
	ready.Status.Phase = corev1.PodRunning
	ready.Status.PodIP = "10.0.0.1"
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	ready.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "wait-gcs-ready", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
	ready.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "ray", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	if !podProgress(pending, ready) {
		t.Error("a pod turning Running and Ready (its init container done) is not progress")
	}
	for name, change := range map[string]func(p *corev1.Pod){
		"deleted":   func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} },
		"failed":    func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed },
		"succeeded": func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded },
		"container exited": func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}
		},
		"container restarts": func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = 1 },
		"init failed": func(p *corev1.Pod) {
			p.Status.InitContainerStatuses[0].State.Terminated.ExitCode = 1
		},
		"relabelled":      func(p *corev1.Pod) { p.Labels = map[string]string{"a": "c"} },
		"annotated":       func(p *corev1.Pod) { p.Annotations = map[string]string{"x": "y"} },
		"owner":           func(p *corev1.Pod) { p.OwnerReferences = []metav1.OwnerReference{{UID: "u"}} },
		"no longer ready": func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse },
	} {
		changed := ready.DeepCopy()
		change(changed)
		if podProgress(ready, changed) {
			t.Errorf("%s is taken for progress", name)
		}
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
		"the scheduler's refusal": func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu."}}
		},
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
