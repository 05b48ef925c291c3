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
	"github.com/manta-dev/manta/internal/metrics"
	"github.com/manta-dev/manta/internal/reconcile"
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

// plan is what one reconcile does: pods to create and delete, the new status, and (its Result) when to look again.
type plan struct {
	reconcile.Result
	status mantav1alpha1.ImagePullJobStatus
	create []*corev1.Pod
	delete []*corev1.Pod
	// newlyFailed are nodes that failed in this reconcile, for the event written after the status.
	newlyFailed []mantav1alpha1.FailedNode
	// excludedChanged says the NodesExcluded condition changed, for the event written after the status.
	excludedChanged bool
	// priorityClassChanged says the PriorityClassNotUsed condition appeared or changed, for its event.
	priorityClassChanged bool
	completed            bool
	// pulls are the attempts whose outcome this reconcile records in the status (each is classified once: the
	// next reconcile sees it in the observed status), counted in the metrics once that status is written.
	pulls []finishedPull
}

// finishedPull is one puller pod's outcome (metrics.OutcomeSucceeded or OutcomeFailed) and how long it took.
type finishedPull struct {
	outcome  string
	duration time.Duration
}

// pullDuration is the time from the pod's creation to its container's end (or now, for a pull that timed out).
func pullDuration(pod *corev1.Pod, now time.Time) time.Duration {
	end := now
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && !t.FinishedAt.IsZero() {
			end = t.FinishedAt.Time
		}
	}
	return max(end.Sub(pod.CreationTimestamp.Time), 0)
}

// computePlan is the whole ImagePullJob state machine as a pure function. Its rules:
//   - A node's outcome is recorded in status (succeededNodes / failedNodes) before its pod is deleted, and a pod is
//     deleted only once the observed status already holds the record. A stale cache therefore never loses an
//     outcome nor pulls a node twice.
//   - A failed attempt that gets a retry is recorded the same way, in status.retryingNodes (attempt count, reason,
//     when the next attempt may start). Its pod is deleted once the observed status holds that record, and the next
//     attempt is created only once no pod of the node is left in the cache (terminating ones included), so the
//     attempt count lives in status and a node never has two puller pods.
//   - No more than parallelism puller pods exist per job: every pod in the cache counts, terminating or not, and so
//     does every create the cache does not show yet. No more than parallelism nodes are Pulling (a node with a pod,
//     a create in flight, or a retry record); retries go first, then new pods go to Waiting nodes in name order.
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
			if o.pods[i].DeletionTimestamp == nil {
				p.delete = append(p.delete, &o.pods[i])
			}
		}
		st.Active = 0
		st.RetryingNodes = nil
		return p, nil
	}

	nodesByName := make(map[string]*corev1.Node, len(o.nodes))
	for i := range o.nodes {
		nodesByName[o.nodes[i].Name] = &o.nodes[i]
	}
	selected, excluded, err := SelectNodes(job, o.nodes, o.podSelectorPods, o.podOptions.Policy)
	if err != nil {
		return p, err
	}
	setExcluded(&p, excluded, job.Generation, o.now)
	setPriorityClassNotUsed(&p, job, o.podOptions.Policy.PriorityClassName, o.now)

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
	// Retry records of nodes no longer selected (or gone) are dropped with their pods.
	retrying := map[string]mantav1alpha1.RetryingNode{}
	for _, r := range old.RetryingNodes {
		if universe.Has(r.Name) {
			retrying[r.Name] = r
		}
	}

	// Every pod in the cache exists, terminating or not, and so does every create the cache does not show yet.
	podCount := len(o.pods) + len(o.pendingCreates)
	nodesWithPods := sets.New[string]()
	live := map[string][]*corev1.Pod{}
	for i := range o.pods {
		pod := &o.pods[i]
		nodesWithPods.Insert(pod.Spec.NodeName)
		if pod.DeletionTimestamp != nil {
			continue
		}
		if !universe.Has(pod.Spec.NodeName) {
			p.delete = append(p.delete, pod)
			continue
		}
		live[pod.Spec.NodeName] = append(live[pod.Spec.NodeName], pod)
	}
	pending := map[string]pendingPod{}
	for _, pc := range o.pendingCreates {
		if cur, ok := pending[pc.node]; !ok || pc.attempt > cur.attempt {
			pending[pc.node] = pc
		}
	}

	timeout := time.Duration(timeoutSeconds(job)) * time.Second
	limit := backoffLimit(job)
	var startable, retryReady []string
	waiting := 0 // nodes not started yet
	var active int32
	lastAttempt := map[string]int32{}
	for _, node := range sets.List(universe) {
		pods := live[node]
		sort.Slice(pods, func(i, j int) bool { return podAttempt(pods[i]) < podAttempt(pods[j]) })
		if succeeded.Has(node) || failed[node].Name != "" {
			delete(retrying, node)
			p.delete = append(p.delete, pods...)
			continue
		}
		r, isRetrying := retrying[node]
		lastAttempt[node] = r.Attempts
		// Pods of attempts recorded as failed go: the observed status holds their outcome. Of the others the newest
		// is the current attempt (older unrecorded ones are leftovers and go too).
		var cur *corev1.Pod
		for _, pod := range pods {
			if podAttempt(pod) <= r.Attempts {
				p.delete = append(p.delete, pod)
				continue
			}
			if cur != nil {
				p.delete = append(p.delete, cur)
			}
			cur = pod
			lastAttempt[node] = podAttempt(pod)
		}
		if pc, ok := pending[node]; ok && pc.attempt > r.Attempts && (cur == nil || pc.attempt > podAttempt(cur)) {
			// Created, not yet in the cache.
			lastAttempt[node] = pc.attempt
			active++
			p.Requeue(timeout - o.now.Sub(pc.created))
			continue
		}
		if cur != nil {
			a := podAttempt(cur)
			result, reason, message := classifyAttempt(cur, o.now, timeout)
			switch result {
			case attemptSucceeded:
				succeeded.Insert(node)
				delete(retrying, node)
				p.pulls = append(p.pulls, finishedPull{metrics.OutcomeSucceeded, pullDuration(cur, o.now)})
			case attemptRunning:
				active++
				p.Requeue(timeout - o.now.Sub(cur.CreationTimestamp.Time))
			case attemptFailed:
				p.pulls = append(p.pulls, finishedPull{metrics.OutcomeFailed, pullDuration(cur, o.now)})
				if a > limit {
					f := mantav1alpha1.FailedNode{Name: node, Reason: reason, Message: message, Attempts: a}
					failed[node] = f
					delete(retrying, node)
					p.newlyFailed = append(p.newlyFailed, f)
					continue
				}
				// Recorded now; the pod is deleted once the observed status holds the record (the status write
				// brings the next reconcile), and the next attempt starts once the pod is gone.
				retrying[node] = mantav1alpha1.RetryingNode{Name: node, Attempts: a, Reason: reason, Message: message,
					NextAttemptAfter: metav1.Time{Time: ceilSecond(cur.CreationTimestamp.Add(retryBackoff(o.retryBase, a)))}}
				active++
			}
			continue
		}
		if job.Spec.ImagePullPolicy != mantav1alpha1.PullAlways && nodeHasImage(nodesByName[node], job.Spec.Image) {
			succeeded.Insert(node)
			delete(retrying, node)
			continue
		}
		if isRetrying {
			active++
			if nodesWithPods.Has(node) {
				continue // the failed attempt's pod still exists; its deletion brings the next reconcile
			}
			if o.now.Before(r.NextAttemptAfter.Time) {
				p.Requeue(r.NextAttemptAfter.Sub(o.now))
				continue
			}
			retryReady = append(retryReady, node)
			continue
		}
		waiting++
		if !nodesWithPods.Has(node) {
			startable = append(startable, node)
		}
	}

	deadlinePassed := false
	cp := job.Spec.CompletionPolicy
	if cp.Type != mantav1alpha1.CompleteNever && cp.ActiveDeadlineSeconds != nil {
		deadline := st.StartTime.Add(time.Duration(*cp.ActiveDeadlineSeconds) * time.Second)
		if !o.now.Before(deadline) {
			deadlinePassed = true
		} else {
			p.Requeue(deadline.Sub(o.now))
		}
	}

	if deadlinePassed {
		// Every node not done fails; their pods go away on the next reconcile, once the records are stored.
		for _, node := range sets.List(universe) {
			if succeeded.Has(node) || failed[node].Name != "" {
				continue
			}
			f := mantav1alpha1.FailedNode{Name: node, Reason: ReasonDeadlineExceeded, Message: MessageDeadlineExceeded, Attempts: lastAttempt[node]}
			failed[node] = f
			p.newlyFailed = append(p.newlyFailed, f)
		}
		retrying = map[string]mantav1alpha1.RetryingNode{}
		waiting, active = 0, 0
	} else {
		par := int(parallelism(job))
		// Retries first: their nodes already hold a parallelism slot.
		for _, node := range retryReady {
			if podCount >= par {
				break // a pod deletion brings the next reconcile
			}
			p.create = append(p.create, BuildPullerPod(job, node, retrying[node].Attempts+1, o.podOptions))
			podCount++
			p.Requeue(timeout)
		}
		// A slot is taken by every node that has a puller pod in the cache (finished or not), a create in flight or a
		// retry record.
		busy := nodesWithPods.Clone()
		for n := range pending {
			busy.Insert(n)
		}
		for n := range retrying {
			busy.Insert(n)
		}
		if n := min(par-busy.Len(), par-podCount, len(startable)); n > 0 {
			for _, node := range startable[:n] {
				p.create = append(p.create, BuildPullerPod(job, node, 1, o.podOptions))
				p.Requeue(timeout)
			}
			active += int32(n)
			waiting -= n
		}
	}

	st.RetryingNodes = nil
	for _, n := range sets.List(sets.KeySet(retrying)) {
		st.RetryingNodes = append(st.RetryingNodes, retrying[n])
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

	if cp.Type != mantav1alpha1.CompleteNever && (deadlinePassed || (active == 0 && waiting == 0)) {
		st.CompletionTime = &metav1.Time{Time: o.now}
		st.Active = 0
		p.completed = true
		p.ForgetRequeue()
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

// setExcluded records in the NodesExcluded condition how many nodes the job selects that the operator's policy
// keeps pullers off, so that a job that reaches fewer nodes than its user expects says why.
func setExcluded(p *plan, e Excluded, generation int64, now time.Time) {
	conds := &p.status.Conditions
	old := meta.FindStatusCondition(*conds, ConditionNodesExcluded)
	msg := e.Message()
	if msg == "" {
		meta.RemoveStatusCondition(conds, ConditionNodesExcluded)
		return
	}
	p.excludedChanged = old == nil || old.Message != msg
	meta.SetStatusCondition(conds, metav1.Condition{Type: ConditionNodesExcluded, Status: metav1.ConditionTrue,
		Reason: ReasonOperatorPolicy, Message: msg, ObservedGeneration: generation, LastTransitionTime: metav1.Time{Time: now}})
}

// setPriorityClassNotUsed says, in the PriorityClassNotUsed condition, that the job's spec.priorityClassName is not
// what its pullers get: the operator chooses their class (--image-pull-priority-class), so that a namespace user
// cannot give them one meant for system pods. A field the user set is reported, never silently dropped.
func setPriorityClassNotUsed(p *plan, job *mantav1alpha1.ImagePullJob, allowed string, now time.Time) {
	conds := &p.status.Conditions
	want := job.Spec.PriorityClassName
	if want == "" || want == allowed {
		meta.RemoveStatusCondition(conds, ConditionPriorityClassNotUsed)
		return
	}
	got := "no priority class"
	if allowed != "" {
		got = fmt.Sprintf("priority class %q", allowed)
	}
	msg := fmt.Sprintf("spec.priorityClassName %q is not used: the operator gives puller pods %s (--image-pull-priority-class)", want, got)
	old := meta.FindStatusCondition(*conds, ConditionPriorityClassNotUsed)
	p.priorityClassChanged = old == nil || old.Message != msg
	meta.SetStatusCondition(conds, metav1.Condition{Type: ConditionPriorityClassNotUsed, Status: metav1.ConditionTrue,
		Reason: ReasonOperatorPolicy, Message: msg, ObservedGeneration: job.Generation, LastTransitionTime: metav1.Time{Time: now}})
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

// ceilSecond rounds t up to a whole second: status times are stored with second precision, and rounding up keeps
// the retry backoff and the stored record equal to what was computed.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// ttlExpiry returns when a finished job is to be deleted; ok is false when it is kept.
func ttlExpiry(job *mantav1alpha1.ImagePullJob) (time.Time, bool) {
	ttl := job.Spec.CompletionPolicy.TTLSecondsAfterFinished
	if job.Status.CompletionTime == nil || ttl == nil || job.Spec.CompletionPolicy.Type == mantav1alpha1.CompleteNever {
		return time.Time{}, false
	}
	return job.Status.CompletionTime.Add(time.Duration(*ttl) * time.Second), true
}
