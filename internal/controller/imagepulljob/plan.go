package imagepulljob

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
)

// NodePhase is the state of one node in a job.
type NodePhase string

const (
	// NodeWaiting: selected, no pod yet (waiting for a parallelism slot).
	NodeWaiting NodePhase = "Waiting"
	// NodePulling: a puller pod is running, or a failed attempt waits for its retry.
	NodePulling NodePhase = "Pulling"
	// NodeSucceeded: the node has the image.
	NodeSucceeded NodePhase = "Succeeded"
	// NodeFailed: every attempt failed, or the job's deadline passed.
	NodeFailed NodePhase = "Failed"
)

// observed is everything the planner reads: the job, the cluster's nodes, the job's puller pods, pods created but not
// yet seen in the cache, and (for podSelector) the pods of the job's namespace.
type observed struct {
	job             *mantav1alpha1.ImagePullJob
	nodes           []corev1.Node
	pods            []corev1.Pod
	pendingCreates  []pendingPod
	podSelectorPods []corev1.Pod
	now             time.Time
	retryBase       time.Duration
	podOptions      PodOptions
}

// pendingPod is a puller pod this controller created that the cache does not show yet.
type pendingPod struct {
	name    string
	node    string
	attempt int32
	created time.Time
}

// plan is what one reconcile does: pods to create and delete, the new status, and when to look again.
type plan struct {
	status       mantav1alpha1.ImagePullJobStatus
	create       []*corev1.Pod
	delete       []*corev1.Pod
	requeueAfter time.Duration
	// newlyFailed are nodes that failed in this reconcile, for the event written after the status.
	newlyFailed []mantav1alpha1.FailedNode
	completed   bool
}

func (p *plan) requeueIn(d time.Duration) {
	if d <= 0 {
		d = time.Second
	}
	if p.requeueAfter == 0 || d < p.requeueAfter {
		p.requeueAfter = d
	}
}

// nodeAttempt is the newest attempt on a node, from the cache or from a pending create.
type nodeAttempt struct {
	pod     *corev1.Pod // nil for a pending create
	attempt int32
	created time.Time
}

// computePlan is the whole ImagePullJob state machine as a pure function. Its rules:
//   - A node's outcome is recorded in status (succeededNodes / failedNodes) before its pod is deleted, and a pod is
//     deleted only once the observed status already holds the record. A stale cache therefore never loses an
//     outcome nor pulls a node twice.
//   - A retry creates attempt k+1 before attempt k is deleted, so the attempt count lives on the pods.
//   - At most parallelism nodes are Pulling; new pods go to Waiting nodes in name order.
func computePlan(o observed) (plan, error) {
	job := o.job
	old := job.Status
	var p plan
	p.status = *old.DeepCopy()
	st := &p.status
	st.ObservedGeneration = job.Generation
	if st.StartTime == nil {
		st.StartTime = &metav1.Time{Time: o.now}
	}

	if old.CompletionTime != nil {
		// Finished: only clean up and wait for the TTL.
		for i := range o.pods {
			p.delete = append(p.delete, &o.pods[i])
		}
		st.Active = 0
		return p, nil
	}

	nodesByName := make(map[string]*corev1.Node, len(o.nodes))
	for i := range o.nodes {
		nodesByName[o.nodes[i].Name] = &o.nodes[i]
	}
	selected, err := SelectNodes(job, o.nodes, o.podSelectorPods)
	if err != nil {
		return p, err
	}

	// Records of nodes that no longer exist are dropped: a node that comes back under the same name is a new machine.
	succeeded := sets.New[string]()
	for _, n := range old.SucceededNodes {
		if nodesByName[n] != nil {
			succeeded.Insert(n)
		}
	}
	failed := map[string]mantav1alpha1.FailedNode{}
	for _, f := range old.FailedNodes {
		if nodesByName[f.Name] != nil {
			failed[f.Name] = f
		}
	}
	universe := sets.New(selected...)
	universe = universe.Union(succeeded)
	for n := range failed {
		universe.Insert(n)
	}

	// Group pods by node; keep the newest attempt, delete older ones once a newer one is visible.
	latest := map[string]nodeAttempt{}
	podsByNode := map[string][]*corev1.Pod{}
	for i := range o.pods {
		pod := &o.pods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		podsByNode[pod.Spec.NodeName] = append(podsByNode[pod.Spec.NodeName], pod)
	}
	for node, pods := range podsByNode {
		if !universe.Has(node) {
			p.delete = append(p.delete, pods...)
			continue
		}
		sort.Slice(pods, func(i, j int) bool { return podAttempt(pods[i]) < podAttempt(pods[j]) })
		newest := pods[len(pods)-1]
		latest[node] = nodeAttempt{pod: newest, attempt: podAttempt(newest), created: newest.CreationTimestamp.Time}
		p.delete = append(p.delete, pods[:len(pods)-1]...)
	}
	for _, pc := range o.pendingCreates {
		if cur, ok := latest[pc.node]; (!ok || pc.attempt > cur.attempt) && universe.Has(pc.node) {
			if ok && cur.pod != nil {
				p.delete = append(p.delete, cur.pod)
			}
			latest[pc.node] = nodeAttempt{attempt: pc.attempt, created: pc.created}
		}
	}

	// A slot is taken by every node that has a puller pod in the cache or a create in flight, finished or not, so no
	// more than parallelism puller pods exist per job (a retry briefly overlaps its predecessor on the same node).
	slots := sets.New[string]()
	for i := range o.pods {
		slots.Insert(o.pods[i].Spec.NodeName)
	}
	for _, pc := range o.pendingCreates {
		slots.Insert(pc.node)
	}

	timeout := time.Duration(timeoutSeconds(job)) * time.Second
	limit := backoffLimit(job)
	var waiting []string
	var active int32
	for _, node := range sets.List(universe) {
		a, hasPod := latest[node]
		if succeeded.Has(node) || failed[node].Name != "" {
			if hasPod && a.pod != nil {
				p.delete = append(p.delete, a.pod)
			}
			continue
		}
		if !hasPod {
			if job.Spec.ImagePullPolicy != mantav1alpha1.PullAlways && nodeHasImage(nodesByName[node], job.Spec.Image) {
				succeeded.Insert(node)
				continue
			}
			waiting = append(waiting, node)
			continue
		}
		if a.pod == nil { // created, not yet in the cache
			active++
			p.requeueIn(timeout - o.now.Sub(a.created))
			continue
		}
		result, reason, message := classifyAttempt(a.pod, o.now, timeout)
		switch result {
		case attemptSucceeded:
			succeeded.Insert(node)
		case attemptRunning:
			active++
			p.requeueIn(timeout - o.now.Sub(a.created))
		case attemptFailed:
			if a.attempt > limit {
				f := mantav1alpha1.FailedNode{Name: node, Reason: reason, Message: message, Attempts: a.attempt}
				failed[node] = f
				p.newlyFailed = append(p.newlyFailed, f)
				continue
			}
			active++
			retryAt := a.created.Add(retryBackoff(o.retryBase, a.attempt))
			if o.now.Before(retryAt) {
				p.requeueIn(retryAt.Sub(o.now))
				continue
			}
			p.create = append(p.create, BuildPullerPod(job, node, a.attempt+1, o.podOptions))
			p.requeueIn(timeout)
		}
	}

	deadlinePassed := false
	cp := job.Spec.CompletionPolicy
	if cp.Type != mantav1alpha1.CompleteNever && cp.ActiveDeadlineSeconds != nil {
		deadline := st.StartTime.Add(time.Duration(*cp.ActiveDeadlineSeconds) * time.Second)
		if !o.now.Before(deadline) {
			deadlinePassed = true
		} else {
			p.requeueIn(deadline.Sub(o.now))
		}
	}

	if deadlinePassed {
		// Every node not done fails; their pods go away on the next reconcile, once the records are stored.
		p.create = nil
		for _, node := range sets.List(universe) {
			if succeeded.Has(node) || failed[node].Name != "" {
				continue
			}
			f := mantav1alpha1.FailedNode{Name: node, Reason: ReasonDeadlineExceeded, Message: MessageDeadlineExceeded, Attempts: latest[node].attempt}
			failed[node] = f
			p.newlyFailed = append(p.newlyFailed, f)
		}
		waiting, active = nil, 0
	} else if free := parallelism(job) - int32(slots.Len()); free > 0 {
		n := min(int(free), len(waiting))
		for _, node := range waiting[:n] {
			p.create = append(p.create, BuildPullerPod(job, node, 1, o.podOptions))
			p.requeueIn(timeout)
		}
		active += int32(n)
		waiting = waiting[n:]
	}

	st.SucceededNodes = sets.List(succeeded)
	st.FailedNodes = make([]mantav1alpha1.FailedNode, 0, len(failed))
	for _, n := range sets.List(sets.KeySet(failed)) {
		st.FailedNodes = append(st.FailedNodes, failed[n])
	}
	if len(st.FailedNodes) == 0 {
		st.FailedNodes = nil
	}
	if len(st.SucceededNodes) == 0 {
		st.SucceededNodes = nil
	}
	st.Desired = int32(universe.Len())
	st.Succeeded = int32(succeeded.Len())
	st.Failed = int32(len(failed))
	st.Active = active

	if cp.Type != mantav1alpha1.CompleteNever && (deadlinePassed || (active == 0 && len(waiting) == 0)) {
		st.CompletionTime = &metav1.Time{Time: o.now}
		st.Active = 0
		p.completed = true
		p.requeueAfter = 0
		reason, msg := ReasonCompleted, fmt.Sprintf("%d of %d nodes have the image", st.Succeeded, st.Desired)
		if deadlinePassed {
			reason, msg = ReasonDeadlineExceeded, MessageDeadlineExceeded
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: ConditionComplete, Status: metav1.ConditionTrue, Reason: reason, Message: msg,
			ObservedGeneration: job.Generation, LastTransitionTime: metav1.Time{Time: o.now},
		})
	}
	st.Message = StatusMessage(st, deadlinePassed)
	return p, nil
}

// StatusMessage is the one-line summary in status.message, worded as OpenKruise's ImagePullJob.
func StatusMessage(st *mantav1alpha1.ImagePullJobStatus, deadlineExceeded bool) string {
	switch {
	case deadlineExceeded:
		return MessageDeadlineExceeded
	case st.CompletionTime != nil:
		return MessageCompleted
	case st.Desired == 0:
		return MessageNoProgress
	}
	return fmt.Sprintf("job is running, progress %.1f%%", 100*float64(st.Succeeded+st.Failed)/float64(st.Desired))
}

// ttlExpiry returns when a finished job is to be deleted; ok is false when it is kept.
func ttlExpiry(job *mantav1alpha1.ImagePullJob) (time.Time, bool) {
	ttl := job.Spec.CompletionPolicy.TTLSecondsAfterFinished
	if job.Status.CompletionTime == nil || ttl == nil || job.Spec.CompletionPolicy.Type == mantav1alpha1.CompleteNever {
		return time.Time{}, false
	}
	return job.Status.CompletionTime.Add(time.Duration(*ttl) * time.Second), true
}
