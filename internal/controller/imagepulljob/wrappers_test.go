package imagepulljob

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
)

// jobWrapper builds ImagePullJobs for tests: makeJob("j").parallelism(2).always().obj().
type jobWrapper struct{ mantav1alpha1.ImagePullJob }

func makeJob(name string) *jobWrapper {
	return &jobWrapper{mantav1alpha1.ImagePullJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: mantav1alpha1.ImagePullJobSpec{
			Image:            "rayproject/ray:2.9.0",
			ImagePullPolicy:  mantav1alpha1.PullIfNotPresent,
			Parallelism:      ptr.To[int32](1),
			PullPolicy:       &mantav1alpha1.PullPolicy{TimeoutSeconds: ptr.To[int32](600), BackoffLimit: ptr.To[int32](3)},
			CompletionPolicy: mantav1alpha1.CompletionPolicy{Type: mantav1alpha1.CompleteAlways},
		},
	}}
}

func (w *jobWrapper) obj() *mantav1alpha1.ImagePullJob { return w.DeepCopy() }
func (w *jobWrapper) always() *jobWrapper {
	w.Spec.ImagePullPolicy = mantav1alpha1.PullAlways
	return w
}
func (w *jobWrapper) never() *jobWrapper {
	w.Spec.CompletionPolicy.Type = mantav1alpha1.CompleteNever
	return w
}
func (w *jobWrapper) parallelism(n int32) *jobWrapper { w.Spec.Parallelism = &n; return w }
func (w *jobWrapper) backoffLimit(n int32) *jobWrapper {
	w.Spec.PullPolicy.BackoffLimit = &n
	return w
}
func (w *jobWrapper) deadline(n int64) *jobWrapper {
	w.Spec.CompletionPolicy.ActiveDeadlineSeconds = &n
	return w
}
func (w *jobWrapper) names(n ...string) *jobWrapper {
	w.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{Names: n}
	return w
}
func (w *jobWrapper) matchLabels(l map[string]string) *jobWrapper {
	w.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{LabelSelector: metav1.LabelSelector{MatchLabels: l}}
	return w
}
func (w *jobWrapper) tolerations(t ...corev1.Toleration) *jobWrapper {
	w.Spec.Tolerations = append([]corev1.Toleration{}, t...)
	return w
}
func (w *jobWrapper) started(t time.Time) *jobWrapper {
	w.Status.StartTime = &metav1.Time{Time: t}
	return w
}
func (w *jobWrapper) succeededNodes(n ...string) *jobWrapper {
	w.Status.SucceededNodes = n
	return w
}

func (w *jobWrapper) retrying(node string, attempts int32, next time.Time) *jobWrapper {
	w.Status.RetryingNodes = append(w.Status.RetryingNodes, mantav1alpha1.RetryingNode{Name: node, Attempts: attempts,
		Reason: ReasonImageNotFound, Message: "not found", NextAttemptAfter: metav1.Time{Time: next}})
	return w
}

// nodeWrapper builds Ready Linux nodes.
type nodeWrapper struct{ corev1.Node }

func makeNode(name string) *nodeWrapper {
	return &nodeWrapper{corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "linux", corev1.LabelHostname: name}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}}
}

func (w *nodeWrapper) obj() corev1.Node { return *w.DeepCopy() }
func (w *nodeWrapper) label(k, v string) *nodeWrapper {
	w.Labels[k] = v
	return w
}
func (w *nodeWrapper) taint(k string, e corev1.TaintEffect) *nodeWrapper {
	w.Spec.Taints = append(w.Spec.Taints, corev1.Taint{Key: k, Value: "true", Effect: e})
	return w
}
func (w *nodeWrapper) notReady() *nodeWrapper {
	w.Status.Conditions[0].Status = corev1.ConditionFalse
	return w
}
func (w *nodeWrapper) images(names ...string) *nodeWrapper {
	w.Status.Images = append(w.Status.Images, corev1.ContainerImage{Names: names})
	return w
}

func nodes(ws ...*nodeWrapper) []corev1.Node {
	out := make([]corev1.Node, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.obj())
	}
	return out
}

// pullerPod returns the pod the controller creates for (job, node, attempt), created at t, with a status set by fn.
func pullerPod(job *mantav1alpha1.ImagePullJob, node string, attempt int32, created time.Time, fn func(*corev1.Pod)) corev1.Pod {
	p := BuildPullerPod(job, node, attempt, PodOptions{})
	p.UID = types.UID(p.Name)
	p.CreationTimestamp = metav1.Time{Time: created}
	p.Status.Phase = corev1.PodPending
	if fn != nil {
		fn(p)
	}
	return *p
}

func terminating(p *corev1.Pod) {
	p.DeletionTimestamp = &metav1.Time{Time: p.CreationTimestamp.Add(time.Second)}
}

func running(p *corev1.Pod) {
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: PullerContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
}

func succeededPod(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }

func waiting(reason, message string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: PullerContainerName,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}}
	}
}
