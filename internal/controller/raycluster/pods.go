package raycluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/createbackoff"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// reconcilePods creates and deletes the cluster's pods. Order matters: suspend, then Recreate, then stamping,
// then the head, then each worker group.
func (r *Reconciler) reconcilePods(ctx context.Context, run *run, defTmpl *corev1.PodTemplateSpec) error {
	c := run.c
	// The cache's own pods, lent by its index (a controller-runtime List copied each into a new list by
	// reflection). Cached pods are stripped (clusterpods): their env, ports, resources and probes read empty.
	cached, err := r.pods.List(ctx, c.Namespace, c.Name)
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	if err := r.resolveUnsureCreates(ctx, run); err != nil {
		return err
	}
	// The expectations read every listed pod, terminating ones included. The rest of the reconcile works on
	// shallow copies of the pods it keeps (their maps and slices are the cache's): a deep copy of every pod would be
	// most of what a reconcile allocates, and the controller only reads pods (stampPods patches a copy of its own).
	_, satisfied := r.exp.ObserveRefs(run.key, cached)
	pods := make([]corev1.Pod, 0, len(cached))
	for _, p := range cached {
		if p.DeletionTimestamp == nil && metaOwnedBy(p, c) {
			pods = append(pods, *p)
		}
	}
	run.obs.pods, run.obs.podsListed = pods, true
	if !satisfied {
		// The cache has not caught up with our own writes: acting now could duplicate pods.
		run.Requeue(time.Second)
		return nil
	}

	// Suspension as KubeRay does it: spec.suspend first marks the cluster Suspending (computeStatus); a Suspending
	// cluster loses every pod, whatever spec.suspend says meanwhile; a Suspended one gets no pods until spec.suspend
	// is cleared and the status has said so.
	// Without the status conditions (RayClusterStatusConditions off) there is no Suspending phase: spec.suspend
	// deletes the pods at once, and clearing it stops the deletions, as in KubeRay.
	switch phase, suspend := suspendPhaseOf(c, run.obs.noConditions), ptr.Deref(c.Spec.Suspend, false); {
	case phase == suspending, run.obs.noConditions && suspend:
		if len(pods) == 0 {
			return nil
		}
		return r.deleteAll(ctx, run, pods, "the cluster is suspended")
	case phase == suspended, suspend:
		run.Requeue(time.Second)
		return nil
	}

	hashes := r.templateHashes(run)
	plan := clusterbuild.PlanRecreate(pods, hashes, recreate(c))
	if plan.Recreate {
		return r.deleteAll(ctx, run, pods, "the pod templates changed and upgradeStrategy is Recreate")
	}
	if err := r.stampPods(ctx, run, hashes, plan.Stamp); err != nil {
		return err
	}

	if err := r.reconcilePodGroup(ctx, run); err != nil {
		return err
	}
	opts := clusterbuild.PodOptions{ClusterDomain: r.opts.ClusterDomain, DefaultTemplate: defTmpl, TemplateHash: hashes.Head,
		BatchScheduler: r.opts.BatchScheduler, Defaults: r.opts.PodDefaults, NoReplicaLabels: run.obs.noIndexing}
	var errs []error
	if clusterbuild.TLSEnabled(c) {
		// Before any pod create: the certificates' IP addresses follow the pods, and the creates wait for them.
		if err := r.reconcileTLS(ctx, run); err != nil {
			errs = append(errs, &backedOff{err})
		}
	}
	if err := r.reconcileHead(ctx, run, opts); err != nil {
		// As in KubeRay, no workers without a head: they would only wait for a GCS that is not coming.
		return errors.Join(append(errs, err)...)
	}
	groups := map[string]bool{}
	for i := range c.Spec.WorkerGroupSpecs {
		g := &c.Spec.WorkerGroupSpecs[i]
		groups[g.GroupName] = true
		opts.TemplateHash = hashes.Workers[g.GroupName]
		if err := r.reconcileGroup(ctx, run, g, opts); err != nil {
			errs = append(errs, err)
		}
	}
	// Workers of groups that are no longer in the spec.
	var orphans []corev1.Pod
	for _, p := range run.obs.pods {
		if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeWorker && !groups[p.Labels[rayv1.LabelGroup]] {
			orphans = append(orphans, p)
		}
	}
	if len(orphans) > 0 {
		if err := r.deletePods(ctx, run, orphans, rayv1.FailedDeleteWorkerPod, "their worker group was removed"); err != nil {
			errs = append(errs, err)
		}
	}
	// workersToDelete is cleared after the Services are done (reconcile): it writes the cluster they read.
	run.clearWorkers = true
	return errors.Join(errs...)
}

// cachedHashes are a cluster's template hashes at one generation of one cluster object.
type cachedHashes struct {
	uid        types.UID
	generation int64
	hashes     clusterbuild.TemplateHashes
}

// templateHashes returns clusterbuild.Hashes of the cluster's spec, computed once per generation
// (optimize.TemplateHashCache): the spec changes only with the generation, and hashing every pod template's JSON on
// each reconcile was the largest allocation of a reconcile with nothing to do.
func (r *Reconciler) templateHashes(run *run) clusterbuild.TemplateHashes {
	c := run.c
	sw := r.opts.Optimizations
	if !sw.On(optimize.TemplateHashCache) {
		return clusterbuild.Hashes(&c.Spec)
	}
	if v, ok := r.hashes.Load(run.key); ok {
		if ch := v.(cachedHashes); ch.uid == c.UID && ch.generation == c.Generation && c.Generation != 0 {
			sw.Acted(optimize.TemplateHashCache)
			return ch.hashes
		}
	}
	h := clusterbuild.Hashes(&c.Spec)
	r.hashes.Store(run.key, cachedHashes{uid: c.UID, generation: c.Generation, hashes: h})
	return h
}

func recreate(c *rayv1.RayCluster) bool {
	u := c.Spec.UpgradeStrategy
	return u != nil && ptr.Deref(u.Type, "") == rayv1.RayClusterRecreate
}

// metaOwnedBy keeps pods that belong to another object of the same name out (a RayCluster deleted and created
// again while its old pods terminate).
func metaOwnedBy(p *corev1.Pod, c *rayv1.RayCluster) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == clusterbuild.KindRayCluster && o.UID != c.UID {
			return false
		}
	}
	return true
}

// stampPods stamps the pods at idx (clusterbuild.PlanRecreate) with their group's current template hash and this
// Manta release: pods of a cluster taken over from another operator or release, so that a later template change
// is detected and the takeover itself recreates nothing.
func (r *Reconciler) stampPods(ctx context.Context, run *run, hashes clusterbuild.TemplateHashes, idx []int) error {
	var errs []error
	for _, i := range idx {
		p := &run.obs.pods[i]
		hash, _ := hashes.For(p.Labels)
		// p shares its maps with the cache (reconcilePods): change and patch a copy, never p itself.
		stamped := p.DeepCopy()
		stamped.Annotations = clusterbuild.Stamp(stamped.Annotations)
		stamped.Annotations[clusterbuild.AnnotationPodTemplateHash] = hash
		if err := r.client.Patch(ctx, stamped, client.MergeFrom(p)); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("stamp pod %s: %w", p.Name, err))
			}
			continue
		}
		*p = *stamped
	}
	return errors.Join(errs...)
}

// deleteAll deletes every pod of the cluster (suspend, Recreate).
func (r *Reconciler) deleteAll(ctx context.Context, run *run, pods []corev1.Pod, why string) error {
	err := r.deletePods(ctx, run, pods, rayv1.FailedDeleteAllPods, why)
	run.obs.pods = nil
	return err
}

// shouldReplace says whether a pod is gone for good and must be replaced: it finished, or its Ray container
// terminated and will not be restarted.
func shouldReplace(p *corev1.Pod) bool {
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return true
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyNever || len(p.Spec.Containers) == 0 {
		return false
	}
	ray := p.Spec.Containers[clusterbuild.RayContainerIndex].Name
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == ray && cs.State.Terminated != nil {
			return true
		}
	}
	return false
}

// headRestartDisabled: see rayv1.LabelDisableProvisionedHeadRestart. Provisioned is the RayClusterProvisioned
// condition, or without the conditions (noConditions) a state that was Ready once, which is what the condition
// records: KubeRay then restarts the head, and a SidecarMode job would be submitted again.
func headRestartDisabled(c *rayv1.RayCluster, noConditions bool) bool {
	provisioned := meta.IsStatusConditionTrue(c.Status.Conditions, string(rayv1.RayClusterProvisioned))
	if noConditions {
		provisioned = c.Status.StateTransitionTimes[rayv1.Ready] != nil
	}
	return (c.Annotations[rayv1.LabelDisableProvisionedHeadRestart] == "true" || c.Labels[rayv1.LabelDisableProvisionedHeadRestart] == "true") &&
		provisioned
}

func (r *Reconciler) reconcileHead(ctx context.Context, run *run, opts clusterbuild.PodOptions) error {
	c := run.c
	var heads, dead []corev1.Pod
	for _, p := range run.obs.pods {
		if p.Labels[rayv1.LabelNodeType] != rayv1.NodeTypeHead {
			continue
		}
		if shouldReplace(&p) {
			dead = append(dead, p)
		} else {
			heads = append(heads, p)
		}
	}
	if len(heads) == 0 && headRestartDisabled(c, run.obs.noConditions) {
		// A SidecarMode RayJob's head runs once: a new head would have lost the job its sidecar submitted, and the
		// sidecar would submit it again. The terminated head stays, for the RayJob to read why it ended.
		if len(dead) > 0 {
			run.Eventf(corev1.EventTypeWarning, "HeadPodNotRestarted", "Reconcile", "head pod %s terminated; not replaced: the cluster is marked %s=true", dead[0].Name, rayv1.LabelDisableProvisionedHeadRestart)
		}
		return nil
	}
	if len(heads) > 1 {
		// Keep the oldest head; a second one can only come from an outside write.
		slices.SortFunc(heads, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
		dead = append(dead, heads[1:]...)
	}
	if len(dead) > 0 {
		if err := r.deletePods(ctx, run, dead, rayv1.FailedDeleteHeadPod, "the head pod terminated"); err != nil {
			return err
		}
	}
	if len(heads) > 0 {
		return nil
	}
	if clusterbuild.AutoscalingEnabled(c) {
		if err := r.ensureAutoscalerRBAC(ctx, run); err != nil {
			run.obs.failure = &failure{rayv1.FailedCreateHeadPod, err.Error()}
			return err
		}
	}
	if w := r.backoff.Wait(run.key, c.Generation, r.opts.Clock.Now()); w > 0 {
		run.obs.failure = heldFailure(c, rayv1.FailedCreateHeadPod)
		run.Requeue(w)
		return &backedOff{errCreatesBackedOff}
	}
	if live, err := r.clusterLive(ctx, run); !live || err != nil {
		return err
	}
	if run.tlsWait != nil {
		return &backedOff{run.tlsWait}
	}
	pod := clusterbuild.HeadPod(c, opts)
	if err := r.createPod(ctx, run, pod); err != nil {
		msg := createbackoff.StableMessage(err, pod)
		run.obs.failure = &failure{rayv1.FailedCreateHeadPod, msg}
		r.createRefused(ctx, run, err, EventFailedToCreateHeadPod, func() {
			run.Eventf(corev1.EventTypeWarning, EventFailedToCreateHeadPod, "Create", "Failed to create head Pod %s/%s, %v", pod.Namespace, pod.Name, err)
		})
		return &backedOff{fmt.Errorf("create head pod: %w", err)}
	}
	run.created = true
	r.exp.ExpectCreate(run.key, pod.Name, struct{}{})
	r.madePods.Store(run.key, c.UID)
	run.Eventf(corev1.EventTypeNormal, EventCreatedHeadPod, "Create", "Created head Pod %s/%s", pod.Namespace, pod.Name)
	return nil
}

// groupPlan is what reconcileGroup writes for one worker group: whole replicas to delete, by why, then the pods to
// create.
type groupPlan struct {
	// named are the replicas workersToDelete names, dead those with a pod that terminated (or a multi-host replica
	// short of a host), surplus those above the wanted count; each flattened to its pods.
	named, dead, surplus []corev1.Pod
	// create are the new pods, numOfHosts per new replica.
	create []clusterbuild.Replica
}

// planGroup decides what happens to one worker group, from the cluster's pods and nothing else (newName draws the
// random part of a new replica's name). Its rules:
//   - A replica is numOfHosts pods that live and die together: the pods of a multi-host replica share
//     ray.io/worker-group-replica-name; every other pod is a replica of its own.
//   - A replica with a pod named in workersToDelete goes; else one with a pod to replace (shouldReplace), or a
//     multi-host replica that lost a host, goes too (replaced whole, as KubeRay does: the hosts of a TPU slice are
//     provisioned together and cannot take in a single new one). The rest are alive.
//   - Fewer alive replicas than wanted: new ones take the lowest free replica indexes.
//   - More alive than wanted, without the autoscaler: the least useful go first (not ready, then the newest). With
//     the autoscaler only workersToDelete removes pods, as in KubeRay.
//
// Without multi-host indexing (noIndexing: RayMultiHostIndexing off) every pod is a replica of its own, as KubeRay
// then reconciles a multi-host group: replicas x numOfHosts pods, created, replaced and deleted one by one, and
// labelled with no index (the labels pods already carry are not read).
func planGroup(c *rayv1.RayCluster, g *rayv1.WorkerGroupSpec, pods []corev1.Pod, noIndexing bool, newName func() string) groupPlan {
	var toDelete map[string]bool // nil reads as empty: most groups name none
	if n := len(g.ScaleStrategy.WorkersToDelete); n > 0 {
		toDelete = make(map[string]bool, n)
		for _, name := range g.ScaleStrategy.WorkersToDelete {
			toDelete[name] = true
		}
	}
	multiHost := hosts(g) > 1 && !noIndexing
	// want replicas of perReplica pods each.
	want, perReplica := int(groupReplicas(c, g)), int(hosts(g))
	if noIndexing {
		want, perReplica = groupPods(c, g), 1
	}
	// Replicas are held as indexes into pods, not copies of them: this runs for every group at each reconcile, and
	// only the pods to delete need copies of their own (the plan's).
	group := groupLabel(g)
	replicas := map[string][]int{}
	var order []string
	for i := range pods {
		p := &pods[i]
		if p.Labels[rayv1.LabelNodeType] != rayv1.NodeTypeWorker || p.Labels[rayv1.LabelGroup] != group {
			continue
		}
		key := p.Name
		if name := p.Labels[rayv1.LabelReplicaName]; multiHost && name != "" {
			key = name
		}
		if _, ok := replicas[key]; !ok {
			order = append(order, key)
		}
		replicas[key] = append(replicas[key], i)
	}
	var plan groupPlan
	var alive [][]int
	for _, key := range order {
		idx := replicas[key]
		switch {
		case slices.ContainsFunc(idx, func(i int) bool { return toDelete[pods[i].Name] }):
			plan.named = appendPods(plan.named, pods, idx)
		case slices.ContainsFunc(idx, func(i int) bool { return shouldReplace(&pods[i]) }),
			multiHost && len(idx) < int(hosts(g)):
			plan.dead = appendPods(plan.dead, pods, idx)
		default:
			alive = append(alive, idx)
		}
	}

	used := map[int]bool{}
	for _, idx := range alive {
		if i, err := strconv.Atoi(pods[idx[0]].Labels[rayv1.LabelReplicaIndex]); err == nil {
			used[i] = true
		}
	}
	nextIndex := func() int {
		for i := 0; ; i++ {
			if !used[i] {
				used[i] = true
				return i
			}
		}
	}
	switch diff := want - len(alive); {
	case diff > 0:
		for range diff {
			var rep clusterbuild.Replica
			if !noIndexing {
				rep = clusterbuild.Replica{Index: nextIndex(), Name: clusterbuild.ReplicaName(g.GroupName, newName())}
			}
			for h := range perReplica {
				rep.HostIndex = h
				plan.create = append(plan.create, rep)
			}
		}
	case diff < 0 && !clusterbuild.AutoscalingEnabled(c):
		ready := func(idx []int) bool {
			return !slices.ContainsFunc(idx, func(i int) bool { return !clusterbuild.PodRunningAndReady(&pods[i]) })
		}
		slices.SortStableFunc(alive, func(a, b []int) int {
			if ra, rb := ready(a), ready(b); ra != rb {
				if ra {
					return 1
				}
				return -1
			}
			return pods[b[0]].CreationTimestamp.Compare(pods[a[0]].CreationTimestamp.Time)
		})
		for _, idx := range alive[:-diff] {
			plan.surplus = appendPods(plan.surplus, pods, idx)
		}
	}
	return plan
}

// appendPods appends the pods at idx to dst.
func appendPods(dst, pods []corev1.Pod, idx []int) []corev1.Pod {
	for _, i := range idx {
		dst = append(dst, pods[i])
	}
	return dst
}

// reconcileGroup writes a worker group's plan (planGroup): the deletions, then the creates, which wait out a
// create backoff and are made only for a cluster that still exists (clusterLive).
func (r *Reconciler) reconcileGroup(ctx context.Context, run *run, g *rayv1.WorkerGroupSpec, opts clusterbuild.PodOptions) error {
	c := run.c
	plan := planGroup(c, g, run.obs.pods, run.obs.noIndexing, func() string { return utilrand.String(5) })
	var errs []error
	for _, d := range []struct {
		pods []corev1.Pod
		why  string
	}{
		{plan.named, "the autoscaler asked for it (workersToDelete)"},
		{plan.dead, "the pod (or a host of its replica) terminated"},
		{plan.surplus, "the group scaled down"},
	} {
		if len(d.pods) == 0 {
			continue
		}
		if err := r.deletePods(ctx, run, d.pods, rayv1.FailedDeleteWorkerPod, d.why); err != nil {
			errs = append(errs, err)
		}
	}
	if len(plan.create) > 0 {
		if w := r.backoff.Wait(run.key, c.Generation, r.opts.Clock.Now()); w > 0 {
			run.obs.failure = heldFailure(c, rayv1.FailedCreateWorkerPod)
			run.Requeue(w)
			errs = append(errs, &backedOff{errCreatesBackedOff})
		} else if live, err := r.clusterLive(ctx, run); err != nil {
			errs = append(errs, err)
		} else if live {
			if err := r.createWorkers(ctx, run, g, opts, plan.create); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// groupLabel is the value of ray.io/group on the group's pods.
func groupLabel(g *rayv1.WorkerGroupSpec) string { return clusterbuild.GroupLabelValue(g.GroupName) }

// createWorkers creates n worker pods in batches that double from 1 up to MaxParallelWrites, like the Job
// controller's slow start: a quota or admission error costs one failed request, not hundreds.
func (r *Reconciler) createWorkers(ctx context.Context, run *run, g *rayv1.WorkerGroupSpec, opts clusterbuild.PodOptions, replicas []clusterbuild.Replica) error {
	if run.tlsWait != nil {
		return &backedOff{run.tlsWait}
	}
	// One pod of the group built for all its replicas (ReplicaPod): each create shares its spec, read only.
	base := clusterbuild.WorkerPod(run.c, g, opts)
	n := len(replicas)
	created, next := 0, 0
	var errs []error
	var msgs []string
	for batch := 1; created < n && len(errs) == 0; batch = min(batch*2, r.opts.MaxParallelWrites) {
		size := min(batch, n-created)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range size {
			rep := replicas[next]
			next++
			wg.Go(func() {
				pod := clusterbuild.ReplicaPod(base, g, opts, rep)
				err := r.createPod(ctx, run, pod)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					msgs = append(msgs, createbackoff.StableMessage(err, pod))
					return
				}
				r.exp.ExpectCreate(run.key, pod.Name, struct{}{})
				r.madePods.Store(run.key, run.c.UID)
				created++
			})
		}
		wg.Wait()
	}
	if created > 0 {
		run.Eventf(corev1.EventTypeNormal, EventCreatedWorkerPod, "Create", "created %d worker pods in group %s", created, g.GroupName)
	}
	if err := errors.Join(errs...); err != nil {
		msg := strings.Join(msgs, "\n")
		run.obs.failure = &failure{rayv1.FailedCreateWorkerPod, msg}
		r.createRefused(ctx, run, err, EventFailedToCreateWorkerPod, func() {
			run.Eventf(corev1.EventTypeWarning, EventFailedToCreateWorkerPod, "Create", "Failed to create worker Pod for the cluster %s/%s, %s", run.c.Namespace, run.c.Name, msg)
		})
		return &backedOff{fmt.Errorf("create workers of group %s: %w", g.GroupName, err)}
	}
	// Only a create that went through ends the backoff, and only when nothing else in the reconcile was refused
	// (Reconcile decides): a group with nothing to create says nothing about the group whose creates are refused.
	run.created = run.created || created > 0
	return nil
}

// createRefused schedules the retry of a refused create (createBackoff) and reports the refusal: in the log each
// time, as an event (report) only for the streak's first refusal of the kind (head or workers), so a cluster that
// waits on its quota for an hour makes one event, not one per retry.
func (r *Reconciler) createRefused(ctx context.Context, run *run, err error, kind string, report func()) {
	run.refused = true
	delay, first := r.backoff.Failed(run.key, run.c.Generation, r.opts.Clock.Now(), kind)
	run.Requeue(delay)
	if first {
		report()
	}
	log.FromContext(ctx).Info("pod create refused; retrying after a backoff", "retryAfter", delay, "error", err.Error())
}

// deletePods deletes pods in parallel (bounded) and removes them from what the status counts.
func (r *Reconciler) deletePods(ctx context.Context, run *run, pods []corev1.Pod, failReason, why string) error {
	var mu sync.Mutex
	var errs []error
	deleted := map[string]bool{}
	sem := make(chan struct{}, r.opts.MaxParallelWrites)
	var wg sync.WaitGroup
	for i := range pods {
		p := &pods[i]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := r.client.Delete(ctx, p, client.Preconditions{UID: &p.UID})
			mu.Lock()
			defer mu.Unlock()
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
				return
			}
			r.exp.ExpectDelete(run.key, p.UID)
			deleted[p.Name] = true
		})
	}
	wg.Wait()
	run.obs.pods = slices.DeleteFunc(run.obs.pods, func(p corev1.Pod) bool { return deleted[p.Name] })
	if len(deleted) > 0 {
		names := make([]string, 0, len(deleted))
		for n := range deleted {
			names = append(names, n)
		}
		slices.Sort(names)
		if len(names) > 10 {
			names = append(names[:10], fmt.Sprintf("and %d more", len(deleted)-10))
		}
		run.Eventf(corev1.EventTypeNormal, deleteEvents[failReason][0], "Delete", "deleted %d pods because %s: %v", len(deleted), why, names)
		log.FromContext(ctx).V(1).Info("deleted pods", "count", len(deleted), "why", why)
	}
	if err := errors.Join(errs...); err != nil {
		run.obs.failure = &failure{failReason, err.Error()}
		run.Eventf(corev1.EventTypeWarning, deleteEvents[failReason][1], "Delete", "failed to delete pods: %v", err)
		return fmt.Errorf("delete pods: %w", err)
	}
	return nil
}

// clearWorkersToDelete empties scaleStrategy.workersToDelete once the named pods are gone, as KubeRay does. The
// patch carries the resourceVersion, so a concurrent autoscaler write is never overwritten.
func (r *Reconciler) clearWorkersToDelete(ctx context.Context, run *run) error {
	c := run.c
	alive := map[string]bool{}
	for _, p := range run.obs.pods {
		alive[p.Name] = true
	}
	done := func(g *rayv1.WorkerGroupSpec) bool {
		w := g.ScaleStrategy.WorkersToDelete
		return len(w) > 0 && !slices.ContainsFunc(w, func(n string) bool { return alive[n] })
	}
	if !slices.ContainsFunc(c.Spec.WorkerGroupSpecs, func(g rayv1.WorkerGroupSpec) bool { return done(&g) }) {
		return nil // the usual case: no copy of the cluster for nothing
	}
	orig := c.DeepCopy()
	// The spec read may be the cache's own (reconcile.UnaliasRayClusterSharingSpec): the change, and the patch's
	// answer decoded into c, go to a copy.
	c.Spec = *orig.Spec.DeepCopy()
	for i := range c.Spec.WorkerGroupSpecs {
		if g := &c.Spec.WorkerGroupSpecs[i]; done(g) {
			g.ScaleStrategy.WorkersToDelete = nil
		}
	}
	status := c.Status.DeepCopy()
	if err := r.client.Patch(ctx, c, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		*c = *orig
		if apierrors.IsConflict(err) {
			run.Requeue(time.Second)
			return nil
		}
		return fmt.Errorf("clear workersToDelete: %w", err)
	}
	// The status is written from what this reconcile saw, on top of the patched object.
	c.Status = *status
	return nil
}

// createPod creates a Ray pod with Options.PodCreator, or the manager's client when there is none. Afterwards the
// pod's metadata is the API server's (its generated name above all). A failure that may hide an applied create (a
// 504 after commit) makes the cluster's next reconcile read its pods from the API server before creating any:
// the name was generated, so nothing else can tell the pod apart from one still to create.
func (r *Reconciler) createPod(ctx context.Context, run *run, pod *corev1.Pod) error {
	var err error
	if r.opts.PodCreator != nil {
		err = r.opts.PodCreator.Create(ctx, pod)
	} else {
		err = r.client.Create(ctx, pod)
	}
	if reconcile.CreateOutcomeUnknown(err) {
		r.exp.CreateUnsure(run.key)
	}
	return err
}

// resolveUnsureCreates, after a create that may have been applied unseen, expects every pod of the cluster the API
// server lists, so that Observe holds the creates until the cache shows them.
func (r *Reconciler) resolveUnsureCreates(ctx context.Context, run *run) error {
	if !r.exp.Unsure(run.key) {
		return nil
	}
	live := &corev1.PodList{}
	if err := r.reader.List(ctx, live, client.InNamespace(run.c.Namespace), client.MatchingLabels{rayv1.LabelCluster: run.c.Name}); err != nil {
		return fmt.Errorf("list pods after a create whose outcome is unknown: %w", err)
	}
	// Only the pods this controller made: the cache may not hold others, and their expectations would never be met.
	mine := slices.DeleteFunc(live.Items, func(p corev1.Pod) bool { return !metav1.IsControlledBy(&p, run.c) })
	r.exp.Resolve(run.key, mine, struct{}{})
	return nil
}
