package rayjob

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// cleanup is one deletion the finished RayJob asks for, and when it is due.
type cleanup struct {
	policy rayv1.DeletionPolicyType
	due    time.Time
}

// Cleanups lists what a finished RayJob deletes and when, from shutdownAfterJobFinishes with
// ttlSecondsAfterFinished, deletionStrategy.onSuccess/onFailure (after ttlSecondsAfterFinished) or
// deletionStrategy.deletionRules (each after its own ttlSeconds). It is pure.
func Cleanups(j *rayv1.RayJob) []cleanup { return cleanups(j, false) }

// cleanups is Cleanups where shutdownAfterJobFinishes deletes the RayJob itself (and its cluster with it) when
// deleteSelf is set (KubeRay's DELETE_RAYJOB_CR_AFTER_JOB_FINISHES=true).
func cleanups(j *rayv1.RayJob, deleteSelf bool) []cleanup {
	s := &j.Status
	if s.EndTime == nil || !rayv1.IsJobDeploymentTerminal(s.JobDeploymentStatus) {
		return nil
	}
	end := s.EndTime.Time
	ttl := time.Duration(j.Spec.TTLSecondsAfterFinished) * time.Second
	ds := j.Spec.DeletionStrategy
	switch {
	case ds != nil && len(ds.DeletionRules) > 0:
		var out []cleanup
		for _, rule := range ds.DeletionRules {
			c := rule.Condition
			match := (c.JobStatus != nil && *c.JobStatus == s.JobStatus) ||
				(c.JobDeploymentStatus != nil && *c.JobDeploymentStatus == s.JobDeploymentStatus)
			if match {
				out = append(out, cleanup{rule.Policy, end.Add(time.Duration(c.TTLSeconds) * time.Second)})
			}
		}
		return out
	case ds != nil:
		pol := ds.OnFailure
		if s.JobStatus == rayv1.JobStatusSucceeded && s.JobDeploymentStatus == rayv1.JobDeploymentStatusComplete {
			pol = ds.OnSuccess
		}
		if pol == nil || pol.Policy == nil {
			return nil
		}
		return []cleanup{{*pol.Policy, end.Add(ttl)}}
	case j.Spec.ShutdownAfterJobFinishes && len(j.Spec.ClusterSelector) == 0:
		if deleteSelf {
			return []cleanup{{rayv1.DeleteSelf, end.Add(ttl)}}
		}
		return []cleanup{{rayv1.DeleteCluster, end.Add(ttl)}}
	}
	return nil
}

// finished applies the cleanups that are due and wakes up for the next one.
func (r *Reconciler) finished(ctx context.Context, run *run) error {
	j := run.j
	if j.Status.EndTime == nil {
		j.Status.EndTime = ptr.To(metav1.NewTime(run.now))
	}
	cluster, err := r.getCluster(ctx, j)
	if err != nil {
		return err
	}
	if cluster != nil {
		j.Status.RayClusterStatus = *cluster.Status.DeepCopy()
	}
	// As in KubeRay, a failed cleanup of the batch scheduler's resources is reported and does not hold the rest.
	_ = r.batchSchedulerCleanup(ctx, run)
	for _, c := range cleanups(j, r.opts.DeleteRayJobAfterJobFinishes) {
		if wait := c.due.Sub(run.now); wait > 0 {
			run.Requeue(wait)
			continue
		}
		if err := r.apply(ctx, run, c.policy, cluster); err != nil {
			return err
		}
		if c.policy == rayv1.DeleteSelf {
			return nil
		}
	}
	return nil
}

// apply carries out one deletion policy; each is idempotent.
func (r *Reconciler) apply(ctx context.Context, run *run, p rayv1.DeletionPolicyType, cluster *rayv1.RayCluster) error {
	j := run.j
	owned := cluster != nil && metav1.IsControlledBy(cluster, j)
	switch p {
	case rayv1.DeleteNone:
	case rayv1.DeleteCluster:
		if owned {
			_, err := r.deleteOwned(ctx, run, cluster)
			return err
		}
	case rayv1.DeleteWorkers:
		if !owned || cluster.DeletionTimestamp != nil {
			return nil
		}
		patch := client.MergeFromWithOptions(cluster.DeepCopy(), client.MergeFromWithOptimisticLock{})
		changed := false
		for i := range cluster.Spec.WorkerGroupSpecs {
			if g := &cluster.Spec.WorkerGroupSpecs[i]; !ptr.Deref(g.Suspend, false) {
				g.Suspend = ptr.To(true)
				changed = true
			}
		}
		if !changed {
			return nil
		}
		if err := r.client.Patch(ctx, cluster, patch); err != nil {
			run.Eventf(corev1.EventTypeWarning, ReasonFailedSuspendWorkers, "Delete", "Failed to suspend worker groups in cluster %s/%s: %v", cluster.Namespace, cluster.Name, err)
			return fmt.Errorf("suspend worker groups of %s: %w", cluster.Name, err)
		}
		run.Eventf(corev1.EventTypeNormal, ReasonSuspendedWorkers, "Delete", "Set the `suspend` field to true for all worker groups in cluster %s/%s", cluster.Namespace, cluster.Name)
	case rayv1.DeleteSelf:
		if err := r.client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete RayJob: %w", err)
		}
		run.Eventf(corev1.EventTypeNormal, ReasonDeletedSelf, "Delete", "deleted the RayJob (DeleteSelf)")
	}
	return nil
}
