package rayservice

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/features"
)

// planPending makes sure a pending cluster with the current spec exists (or is being created) and returns it.
func planPending(o observed, p *plan, pending *clusterObs, spec *rayv1.RayClusterSpec) *clusterObs {
	st := &p.status
	if pending != nil && pending.cluster != nil {
		switch updated, action := clusterAction(pending.cluster, spec); action {
		case actionSame:
			return pending
		case actionInPlace:
			p.updateClusters = append(p.updateClusters, updated)
			p.onWrite(updated.Name, corev1.EventTypeNormal, EventUpdatedRayCluster, "Update", "Updated the pending RayCluster %s/%s", updated.Namespace, updated.Name)
			return pending
		}
		// Out of date: it never served, so it goes now.
		if pending.cluster.DeletionTimestamp == nil {
			p.deleteClusters = append(p.deleteClusters, pending.cluster)
			p.onWrite(pending.cluster.Name, corev1.EventTypeNormal, EventDeletedRayCluster, "Delete", "Deleted the RayCluster %s/%s", pending.cluster.Namespace, pending.cluster.Name)
		}
		pending = nil
	}
	if pending != nil && pending.cluster == nil {
		// Named in the status, not created yet (or not in the cache yet: creating again is then a no-op).
		name := st.PendingServiceStatus.RayClusterName
		if slices.ContainsFunc(o.clusters, func(c rayv1.RayCluster) bool { return c.Name == name && c.DeletionTimestamp != nil }) {
			// The name is still taken by a terminating cluster: wait.
			p.Requeue(time.Second)
			return pending
		}
		p.createCluster = clusterbuild.RayServiceCluster(o.rs, name)
		if incremental(o.rs) && st.ActiveServiceStatus.RayClusterName != "" {
			startAtMinReplicas(p.createCluster)
		}
		return pending
	}
	// Record the name first; the cluster is created by the next reconcile, which reads it back.
	name := o.newName()
	st.PendingServiceStatus = rayv1.RayServiceStatus{RayClusterName: name}
	if st.ActiveServiceStatus.RayClusterName != "" {
		p.StatusEventf(corev1.EventTypeNormal, EventUpgradeStarted, "Upgrade", "the rayClusterConfig changed: preparing new RayCluster %s", name)
	}
	p.Requeue(0)
	return &clusterObs{}
}

// startAtMinReplicas leaves the worker groups' replicas unset (the CRD defaults them to 0) in the new cluster of an
// incremental upgrade, as KubeRay (v1.5.0 and v1.7, constructRayClusterForRayService) creates it: the cluster
// starts at each group's minReplicas and the autoscaler grows it as the upgrade raises its Serve target_capacity,
// rather than starting at the replicas the active cluster was given (the incremental upgrade requires the
// autoscaler, validateIncremental). The RayService's first cluster keeps the spec's replicas.
func startAtMinReplicas(c *rayv1.RayCluster) {
	for i := range c.Spec.WorkerGroupSpecs {
		c.Spec.WorkerGroupSpecs[i].Replicas = nil
	}
}

type clusterActionType int

const (
	actionSame clusterActionType = iota
	actionInPlace
	actionNew
)

// clusterAction compares a cluster with the spec: the same, different only in ways that can be made in place
// (returns the updated cluster), or needing a new cluster.
//
// The spec hash annotation is compared only when this Manta release stamped the cluster. A cluster another operator
// built (KubeRay writes its own hash under the same key) or another Manta release hashed is judged by its own spec
// (runsSpec): the same spec is taken over in place and stamped, so an operator swap or upgrade never replaces a
// serving cluster, while a rayClusterConfig changed during the swap still gets its new cluster.
func clusterAction(c *rayv1.RayCluster, spec *rayv1.RayClusterSpec) (*rayv1.RayCluster, clusterActionType) {
	n, err := strconv.Atoi(c.Annotations[clusterbuild.AnnotationNumWorkerGroups])
	ours := clusterbuild.StampedByThisVersion(c.Annotations)
	if err != nil || n > len(spec.WorkerGroupSpecs) || !runsSpec(c, spec, n, ours) {
		return nil, actionNew
	}
	updated := c.DeepCopy()
	autoscaling := ptr.Deref(spec.EnableInTreeAutoscaling, false)
	for i := range spec.WorkerGroupSpecs {
		want := &spec.WorkerGroupSpecs[i]
		if i >= n || i >= len(updated.Spec.WorkerGroupSpecs) {
			updated.Spec.WorkerGroupSpecs = append(updated.Spec.WorkerGroupSpecs, *want.DeepCopy())
			continue
		}
		g := &updated.Spec.WorkerGroupSpecs[i]
		g.MinReplicas, g.MaxReplicas = want.MinReplicas, want.MaxReplicas
		if !autoscaling {
			// With the autoscaler on, replicas and workersToDelete are the autoscaler's to set.
			g.Replicas = want.Replicas
			g.ScaleStrategy = want.ScaleStrategy
		}
	}
	if ours && equality.Semantic.DeepEqual(updated.Spec, c.Spec) {
		return nil, actionSame
	}
	updated.Annotations = maps.Clone(updated.Annotations)
	updated.Annotations[clusterbuild.AnnotationClusterSpecHash] = clusterbuild.RayServiceClusterHash(spec, len(spec.WorkerGroupSpecs))
	updated.Annotations[clusterbuild.AnnotationNumWorkerGroups] = strconv.Itoa(len(spec.WorkerGroupSpecs))
	clusterbuild.Stamp(updated.Annotations)
	// The hash under KubeRay's key is Manta's now: a KubeRay that takes the service back must not compare it (it
	// re-stamps a cluster without its version instead of replacing it).
	delete(updated.Annotations, clusterbuild.AnnotationKubeRayVersion)
	return updated, actionInPlace
}

// runsSpec says whether the cluster runs spec's first n worker groups, scaling aside. The hash annotation says so
// for a cluster this release stamped. A cluster whose annotation holds another hash (KubeRay's, which hashes its own
// Go types' JSON, when Manta takes over from KubeRay; or another Manta release's) is compared by its own spec
// instead: comparing the foreign hash would roll a serving RayService to a new cluster on takeover.
func runsSpec(c *rayv1.RayCluster, spec *rayv1.RayClusterSpec, n int, ours bool) bool {
	want := clusterbuild.RayServiceClusterHash(spec, n)
	if ours {
		return want == c.Annotations[clusterbuild.AnnotationClusterSpecHash]
	}
	return len(c.Spec.WorkerGroupSpecs) >= n && clusterbuild.RayServiceClusterHash(&c.Spec, n) == want
}

// planOldClusters deletes the service's clusters that are neither active nor pending once their deletion delay has
// passed, and starts that delay for the ones that just left.
func planOldClusters(o observed, p *plan, active, pending *clusterObs) {
	keep := map[string]bool{}
	for _, c := range []*clusterObs{active, pending} {
		if c != nil && c.cluster != nil {
			keep[c.cluster.Name] = true
		}
	}
	if n := p.status.PendingServiceStatus.RayClusterName; n != "" {
		keep[n] = true
	}
	delay := time.Duration(ptr.Deref(o.rs.Spec.RayClusterDeletionDelaySeconds, DefaultClusterDeletionDelaySeconds)) * time.Second
	deleting := map[string]bool{}
	for _, c := range p.deleteClusters {
		deleting[c.Name] = true
	}
	for i := range o.clusters {
		c := &o.clusters[i]
		if c.DeletionTimestamp != nil || deleting[c.Name] {
			continue
		}
		at, hasAt := c.Annotations[clusterbuild.AnnotationDeleteAfter]
		if keep[c.Name] {
			if hasAt {
				// Named again (a stale read marked it): it must not be deleted later for an old reason.
				p.annotate = append(p.annotate, annotationPatch{cluster: c, key: clusterbuild.AnnotationDeleteAfter})
			}
			continue
		}
		deadline, err := time.Parse(time.RFC3339, at)
		if !hasAt || err != nil {
			deadline = o.now.Add(delay)
			if delay > 0 {
				p.annotate = append(p.annotate, annotationPatch{cluster: c, key: clusterbuild.AnnotationDeleteAfter, value: ptr.To(deadline.UTC().Format(time.RFC3339))})
				p.Requeue(delay)
				continue
			}
		}
		if o.now.Before(deadline) {
			p.Requeue(deadline.Sub(o.now))
			continue
		}
		if st := &o.rs.Status; c.Name == st.ActiveServiceStatus.RayClusterName || c.Name == st.PendingServiceStatus.RayClusterName {
			// The recorded status still names it (this reconcile's status write may yet fail): delete it once the
			// status that no longer names it is stored.
			p.Requeue(0)
			continue
		}
		p.deleteClusters = append(p.deleteClusters, c)
		p.onWrite(c.Name, corev1.EventTypeNormal, EventDeletedRayCluster, "Delete", "Deleted the RayCluster %s/%s", c.Namespace, c.Name)
	}
}

// planSuspend deletes every cluster of a suspended service.
func planSuspend(o observed, p *plan, setCond setCondFunc) {
	st := &p.status
	alive := 0
	for i := range o.clusters {
		c := &o.clusters[i]
		alive++
		if c.DeletionTimestamp == nil {
			p.deleteClusters = append(p.deleteClusters, c)
			p.onWrite(c.Name, corev1.EventTypeNormal, EventDeletedRayCluster, "Suspend", "Deleted the RayCluster %s/%s", c.Namespace, c.Name)
		}
	}
	st.ActiveServiceStatus, st.PendingServiceStatus = rayv1.RayServiceStatus{}, rayv1.RayServiceStatus{}
	st.NumServeEndpoints = 0
	st.ServiceStatus = ""
	if alive > 0 {
		setCond(rayv1.RayServiceSuspending, metav1.ConditionTrue, rayv1.RayServiceSuspendInProgress, "deleting the RayService's clusters")
		setCond(rayv1.RayServiceReady, metav1.ConditionFalse, rayv1.RayServiceSuspendRequested, "the RayService is being suspended")
		p.Requeue(time.Second)
	} else {
		setCond(rayv1.RayServiceSuspending, metav1.ConditionFalse, rayv1.RayServiceSuspendComplete, "the RayService's clusters are deleted")
		setCond(rayv1.RayServiceSuspended, metav1.ConditionTrue, rayv1.RayServiceSuspendComplete, "the RayService is suspended")
		setCond(rayv1.RayServiceReady, metav1.ConditionFalse, rayv1.RayServiceSuspendComplete, "the RayService is suspended")
	}
	setCond(rayv1.UpgradeInProgress, metav1.ConditionFalse, rayv1.NoActiveCluster, "the RayService is suspended")
}

// timedOut applies the ray.io/initializing-timeout annotation: a service not Ready within it is failed and its
// clusters are deleted, until its spec changes.
func timedOut(o observed, p *plan, setCond setCondFunc) bool {
	rs := o.rs
	ready := meta.FindStatusCondition(rs.Status.Conditions, string(rayv1.RayServiceReady))
	if ready == nil {
		return false
	}
	failed := ready.Reason == string(rayv1.RayServiceInitializingTimeout) && ready.ObservedGeneration == rs.Generation
	if !failed {
		timeout, ok := initializingTimeout(rs)
		if !ok || ready.Reason != string(rayv1.RayServiceInitializing) {
			return false
		}
		if left := ready.LastTransitionTime.Add(timeout).Sub(o.now); left > 0 {
			p.Requeue(left)
			return false
		}
		spent := o.now.Sub(ready.LastTransitionTime.Time)
		p.StatusEventf(corev1.EventTypeWarning, string(rayv1.RayServiceInitializingTimeout), "Initialize",
			"RayService initializing timeout exceeded after %s (configured timeout: %s)", spent, timeout)
		setCond(rayv1.RayServiceReady, metav1.ConditionFalse, rayv1.RayServiceInitializingTimeout,
			fmt.Sprintf("RayService failed to become ready within the configured timeout of %s. Time spent initializing: %s", timeout, spent))
	}
	for i := range o.clusters {
		if c := &o.clusters[i]; c.DeletionTimestamp == nil {
			p.deleteClusters = append(p.deleteClusters, c)
			p.onWrite(c.Name, corev1.EventTypeNormal, EventDeletedRayCluster, "Delete", "Deleted the RayCluster %s/%s", c.Namespace, c.Name)
		}
	}
	p.status.ActiveServiceStatus, p.status.PendingServiceStatus = rayv1.RayServiceStatus{}, rayv1.RayServiceStatus{}
	p.status.NumServeEndpoints = 0
	p.status.ServiceStatus = ""
	return true
}

// initializingTimeout parses the annotation: a Go duration or a number of seconds.
func initializingTimeout(rs *rayv1.RayService) (time.Duration, bool) {
	v, ok := rs.Annotations[AnnotationInitializingTimeout]
	if !ok {
		return 0, false
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d, true
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second, true
	}
	return 0, false
}

// upgradeType is how rs moves to a new cluster. With the RayServiceIncrementalUpgrade gate off, an incremental
// upgrade is none, as in KubeRay (which then leaves zero-downtime upgrade off for the RayService).
func upgradeType(rs *rayv1.RayService) rayv1.RayServiceUpgradeType {
	t := declaredUpgradeType(rs)
	if t == rayv1.NewClusterWithIncrementalUpgrade && !features.Enabled(features.RayServiceIncrementalUpgrade) {
		return rayv1.RayServiceUpgradeNone
	}
	return t
}

func declaredUpgradeType(rs *rayv1.RayService) rayv1.RayServiceUpgradeType {
	if u := rs.Spec.UpgradeStrategy; u != nil && u.Type != nil {
		return *u.Type
	}
	return rayv1.NewCluster
}
