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
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/metrics"
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
	var p plan
	p.status = *job.Status.DeepCopy()
	p.status.ObservedGeneration = job.Generation
	if p.status.StartTime == nil {
		p.status.StartTime = &metav1.Time{Time: o.now}
	}
	if job.Status.CompletionTime != nil {
		planFinished(o, &p)
		return p, nil
	}
	selected, excluded, err := SelectNodes(job, o.nodes, o.podSelectorPods, o.podOptions.Policy)
	if err != nil {
		return p, err
	}
	setExcluded(&p, excluded, job.Generation, o.now)
	setPriorityClassNotUsed(&p, job, o.podOptions.Policy.PriorityClassName, o.now)

	s := observeProgress(o, &p, selected)
	timeout := time.Duration(timeoutSeconds(job)) * time.Second
	for _, node := range sets.List(s.universe) {
		planNode(o, &p, s, node, timeout)
	}
	deadlinePassed := deadlineReached(o, &p)
	if deadlinePassed {
		failRemaining(&p, s)
	} else {
		planCreates(o, &p, s, timeout)
	}
	recordProgress(&p.status, s)
	planCompletion(o, &p, s, deadlinePassed)
	p.status.Message = StatusMessage(&p.status, deadlinePassed)
	return p, nil
}

// progress is the per-node state computePlan's steps hand on: the records as this reconcile decides them, what the
// cache and the creates in flight hold, and the count of the nodes still pulling or waiting.
type progress struct {
	nodesByName map[string]*corev1.Node
	// universe is every node the job covers: the selected ones and those with a recorded outcome.
	universe  sets.Set[string]
	succeeded sets.Set[string]
	failed    map[string]mantav1alpha1.FailedNode
	retrying  map[string]mantav1alpha1.RetryingNode

	// podCount counts every pod in the cache, terminating or not, and every create the cache does not show yet.
	podCount      int
	nodesWithPods sets.Set[string]
	// live are the non-terminating pods by node; pending the newest create in flight by node.
	live    map[string][]*corev1.Pod
	pending map[string]pendingPod

	// startable are Waiting nodes without any pod left; retryReady are nodes whose next attempt may start.
	startable, retryReady []string
	// waiting counts the nodes not started yet; active the nodes Pulling.
	waiting int
	active  int32
	// lastAttempt is, by node, the newest attempt known (for the failure record a passed deadline writes).
	lastAttempt map[string]int32
}

// planFinished only cleans up a finished job: its pods go, and it waits for the TTL.
func planFinished(o observed, p *plan) {
	for i := range o.pods {
		if o.pods[i].DeletionTimestamp == nil {
			p.delete = append(p.delete, &o.pods[i])
		}
	}
	p.status.Active = 0
	p.status.RetryingNodes = nil
}

// observeProgress reads the observed status records and the job's pods. Records of nodes that no longer exist are
// dropped (a node that comes back under the same name is a new machine), and so are retry records of nodes no longer
// selected, with their pods.
func observeProgress(o observed, p *plan, selected []string) *progress {
	old := &o.job.Status
	s := &progress{
		nodesByName:   make(map[string]*corev1.Node, len(o.nodes)),
		succeeded:     sets.New[string](),
		failed:        map[string]mantav1alpha1.FailedNode{},
		retrying:      map[string]mantav1alpha1.RetryingNode{},
		nodesWithPods: sets.New[string](),
		live:          map[string][]*corev1.Pod{},
		pending:       map[string]pendingPod{},
		lastAttempt:   map[string]int32{},
	}
	for i := range o.nodes {
		s.nodesByName[o.nodes[i].Name] = &o.nodes[i]
	}
	for _, n := range old.SucceededNodes {
		if s.nodesByName[n] != nil {
			s.succeeded.Insert(n)
		}
	}
	for _, f := range old.FailedNodes {
		if s.nodesByName[f.Name] != nil {
			s.failed[f.Name] = f
		}
	}
	s.universe = sets.New(selected...)
	s.universe = s.universe.Union(s.succeeded)
	for n := range s.failed {
		s.universe.Insert(n)
	}
	for _, r := range old.RetryingNodes {
		if s.universe.Has(r.Name) {
			s.retrying[r.Name] = r
		}
	}

	s.podCount = len(o.pods) + len(o.pendingCreates)
	for i := range o.pods {
		pod := &o.pods[i]
		s.nodesWithPods.Insert(pod.Spec.NodeName)
		if pod.DeletionTimestamp != nil {
			continue
		}
		if !s.universe.Has(pod.Spec.NodeName) {
			p.delete = append(p.delete, pod)
			continue
		}
		s.live[pod.Spec.NodeName] = append(s.live[pod.Spec.NodeName], pod)
	}
	for _, pc := range o.pendingCreates {
		if cur, ok := s.pending[pc.node]; !ok || pc.attempt > cur.attempt {
			s.pending[pc.node] = pc
		}
	}
	return s
}

// planNode decides one node of the job: its leftover pods go, and its current attempt (in the cache or in flight),
// its retry, or its wait for a slot is counted.
func planNode(o observed, p *plan, s *progress, node string, timeout time.Duration) {
	pods := s.live[node]
	sort.Slice(pods, func(i, j int) bool { return podAttempt(pods[i]) < podAttempt(pods[j]) })
	if s.succeeded.Has(node) || s.failed[node].Name != "" {
		delete(s.retrying, node)
		p.delete = append(p.delete, pods...)
		return
	}
	r, isRetrying := s.retrying[node]
	s.lastAttempt[node] = r.Attempts
	cur := currentPod(p, s, node, pods, r.Attempts)
	if pc, ok := s.pending[node]; ok && pc.attempt > r.Attempts && (cur == nil || pc.attempt > podAttempt(cur)) {
		// Created, not yet in the cache.
		s.lastAttempt[node] = pc.attempt
		s.active++
		p.Requeue(timeout - o.now.Sub(pc.created))
		return
	}
	if cur != nil {
		planAttempt(o, p, s, node, cur, timeout)
		return
	}
	if o.job.Spec.ImagePullPolicy != mantav1alpha1.PullAlways && nodeHasImage(s.nodesByName[node], o.job.Spec.Image) {
		s.succeeded.Insert(node)
		delete(s.retrying, node)
		return
	}
	if isRetrying {
		planRetry(o, p, s, node, r)
		return
	}
	s.waiting++
	if !s.nodesWithPods.Has(node) {
		s.startable = append(s.startable, node)
	}
}

// currentPod returns the node's current attempt, the newest of its pods (sorted by attempt) not recorded as failed.
// Pods of attempts recorded as failed go: the observed status holds their outcome. Older unrecorded ones are
// leftovers and go too.
func currentPod(p *plan, s *progress, node string, pods []*corev1.Pod, recorded int32) *corev1.Pod {
	var cur *corev1.Pod
	for _, pod := range pods {
		if podAttempt(pod) <= recorded {
			p.delete = append(p.delete, pod)
			continue
		}
		if cur != nil {
			p.delete = append(p.delete, cur)
		}
		cur = pod
		s.lastAttempt[node] = podAttempt(pod)
	}
	return cur
}

// planAttempt records the outcome of the node's current attempt: succeeded, still running, or failed (a retry record,
// or the node's failure once the backoff limit is spent).
func planAttempt(o observed, p *plan, s *progress, node string, cur *corev1.Pod, timeout time.Duration) {
	a := podAttempt(cur)
	result, reason, message := classifyAttempt(cur, o.now, timeout)
	switch result {
	case attemptSucceeded:
		s.succeeded.Insert(node)
		delete(s.retrying, node)
		p.pulls = append(p.pulls, finishedPull{metrics.OutcomeSucceeded, pullDuration(cur, o.now)})
	case attemptRunning:
		s.active++
		p.Requeue(timeout - o.now.Sub(cur.CreationTimestamp.Time))
	case attemptFailed:
		p.pulls = append(p.pulls, finishedPull{metrics.OutcomeFailed, pullDuration(cur, o.now)})
		if a > backoffLimit(o.job) {
			f := mantav1alpha1.FailedNode{Name: node, Reason: reason, Message: message, Attempts: a}
			s.failed[node] = f
			delete(s.retrying, node)
			p.newlyFailed = append(p.newlyFailed, f)
			return
		}
		// Recorded now; the pod is deleted once the observed status holds the record (the status write brings the
		// next reconcile), and the next attempt starts once the pod is gone.
		s.retrying[node] = mantav1alpha1.RetryingNode{Name: node, Attempts: a, Reason: reason, Message: message,
			NextAttemptAfter: metav1.Time{Time: ceilSecond(cur.CreationTimestamp.Add(retryBackoff(o.retryBase, a)))}}
		s.active++
	}
}

// planRetry counts a retrying node as Pulling and makes it ready for its next attempt once no pod of it is left and
// its backoff has passed.
func planRetry(o observed, p *plan, s *progress, node string, r mantav1alpha1.RetryingNode) {
	s.active++
	if s.nodesWithPods.Has(node) {
		return // the failed attempt's pod still exists; its deletion brings the next reconcile
	}
	if o.now.Before(r.NextAttemptAfter.Time) {
		p.Requeue(r.NextAttemptAfter.Sub(o.now))
		return
	}
	s.retryReady = append(s.retryReady, node)
}

// deadlineReached says whether the job's activeDeadlineSeconds has passed, and requeues for it when not.
func deadlineReached(o observed, p *plan) bool {
	cp := o.job.Spec.CompletionPolicy
	if cp.Type == mantav1alpha1.CompleteNever || cp.ActiveDeadlineSeconds == nil {
		return false
	}
	deadline := p.status.StartTime.Add(time.Duration(*cp.ActiveDeadlineSeconds) * time.Second)
	if !o.now.Before(deadline) {
		return true
	}
	p.Requeue(deadline.Sub(o.now))
	return false
}

// failRemaining fails every node not done once the deadline passed; their pods go away on the next reconcile, once
// the records are stored.
func failRemaining(p *plan, s *progress) {
	for _, node := range sets.List(s.universe) {
		if s.succeeded.Has(node) || s.failed[node].Name != "" {
			continue
		}
		f := mantav1alpha1.FailedNode{Name: node, Reason: ReasonDeadlineExceeded, Message: MessageDeadlineExceeded, Attempts: s.lastAttempt[node]}
		s.failed[node] = f
		p.newlyFailed = append(p.newlyFailed, f)
	}
	s.retrying = map[string]mantav1alpha1.RetryingNode{}
	s.waiting, s.active = 0, 0
}

// planCreates starts puller pods within parallelism: retries first (their nodes already hold a slot), then Waiting
// nodes in name order.
func planCreates(o observed, p *plan, s *progress, timeout time.Duration) {
	par := int(parallelism(o.job))
	for _, node := range s.retryReady {
		if s.podCount >= par {
			break // a pod deletion brings the next reconcile
		}
		p.create = append(p.create, BuildPullerPod(o.job, node, s.retrying[node].Attempts+1, o.podOptions))
		s.podCount++
		p.Requeue(timeout)
	}
	// A slot is taken by every node that has a puller pod in the cache (finished or not), a create in flight or a
	// retry record.
	busy := s.nodesWithPods.Clone()
	for n := range s.pending {
		busy.Insert(n)
	}
	for n := range s.retrying {
		busy.Insert(n)
	}
	if n := min(par-busy.Len(), par-s.podCount, len(s.startable)); n > 0 {
		for _, node := range s.startable[:n] {
			p.create = append(p.create, BuildPullerPod(o.job, node, 1, o.podOptions))
			p.Requeue(timeout)
		}
		s.active += int32(n)
		s.waiting -= n
	}
}

// recordProgress writes the records and counts into the status, in name order.
func recordProgress(st *mantav1alpha1.ImagePullJobStatus, s *progress) {
	st.RetryingNodes = nil
	for _, n := range sets.List(sets.KeySet(s.retrying)) {
		st.RetryingNodes = append(st.RetryingNodes, s.retrying[n])
	}
	st.SucceededNodes = sets.List(s.succeeded)
	st.FailedNodes = make([]mantav1alpha1.FailedNode, 0, len(s.failed))
	for _, n := range sets.List(sets.KeySet(s.failed)) {
		st.FailedNodes = append(st.FailedNodes, s.failed[n])
	}
	if len(st.FailedNodes) == 0 {
		st.FailedNodes = nil
	}
	if len(st.SucceededNodes) == 0 {
		st.SucceededNodes = nil
	}
	st.Desired = int32(s.universe.Len())
	st.Succeeded = int32(s.succeeded.Len())
	st.Failed = int32(len(s.failed))
	st.Active = s.active
}

// planCompletion completes the job once no node is Pulling or Waiting, or its deadline passed (never for a job that
// never completes).
func planCompletion(o observed, p *plan, s *progress, deadlinePassed bool) {
	st := &p.status
	if o.job.Spec.CompletionPolicy.Type == mantav1alpha1.CompleteNever || !(deadlinePassed || (s.active == 0 && s.waiting == 0)) {
		return
	}
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
		ObservedGeneration: o.job.Generation, LastTransitionTime: metav1.Time{Time: o.now},
	})
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
