package rayjob

import (
	"time"

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
func (p *plan) finished() error {
	j := p.j
	if j.Status.EndTime == nil {
		j.Status.EndTime = ptr.To(metav1.NewTime(p.now))
	}
	cluster, err := p.o.cluster, p.o.clusterErr
	if err != nil {
		return err
	}
	if cluster != nil {
		j.Status.RayClusterStatus = *cluster.Status.DeepCopy()
	}
	// As in KubeRay, a failed cleanup of the batch scheduler's resources is reported and does not hold the rest.
	_ = p.batchSchedulerCleanup(true)
	for _, c := range cleanups(j, p.cfg.deleteSelf) {
		if wait := c.due.Sub(p.now); wait > 0 {
			p.Requeue(wait)
			continue
		}
		p.apply(c.policy, cluster)
		if c.policy == rayv1.DeleteSelf {
			return nil
		}
	}
	return nil
}

// apply carries out one deletion policy; each is idempotent.
func (p *plan) apply(policy rayv1.DeletionPolicyType, cluster *rayv1.RayCluster) {
	j := p.j
	owned := cluster != nil && metav1.IsControlledBy(cluster, j)
	switch policy {
	case rayv1.DeleteNone:
	case rayv1.DeleteCluster:
		if owned {
			p.deleteOwned(cluster, deleteCluster)
		}
	case rayv1.DeleteWorkers:
		if !owned || cluster.DeletionTimestamp != nil {
			return
		}
		suspended := cluster.DeepCopy()
		changed := false
		for i := range suspended.Spec.WorkerGroupSpecs {
			if g := &suspended.Spec.WorkerGroupSpecs[i]; !ptr.Deref(g.Suspend, false) {
				g.Suspend = ptr.To(true)
				changed = true
			}
		}
		if changed {
			p.act(action{kind: suspendWorkers, obj: suspended, base: cluster})
		}
	case rayv1.DeleteSelf:
		p.act(action{kind: deleteSelf, obj: p.o.j})
	}
}

// tearDown deletes the job's cluster (when the RayJob made it) and submitter; once both are gone, reset sets the
// status of the next state.
func (p *plan) tearDown(reset func()) error {
	j := p.j
	gone := true
	if name := j.Status.RayClusterName; name != "" && len(j.Spec.ClusterSelector) == 0 {
		if p.o.clusterErr != nil {
			return p.o.clusterErr
		}
		var c client.Object
		if p.o.cluster != nil {
			c = p.o.cluster
		}
		ok := p.deleteOwned(c, deleteCluster)
		if ok {
			if p.o.podsErr != nil {
				return p.o.podsErr
			}
			// "Suspended" means the pods (which Kueue accounts for) are gone, not only the RayCluster object.
			ok = len(p.o.pods) == 0
		}
		gone = gone && ok
	}
	if p.o.submitterErr != nil {
		return p.o.submitterErr
	}
	var sub client.Object
	if p.o.submitter != nil {
		sub = p.o.submitter
	}
	gone = p.deleteOwned(sub, deleteSubmitter) && gone
	if !gone {
		p.Requeue(time.Second)
		return nil
	}
	// As in KubeRay: the batch scheduler's queue gets back what the job held before the status says it let go.
	if err := p.batchSchedulerCleanup(false); err != nil {
		return err
	}
	reset()
	p.Requeue(0)
	return nil
}

// deleteOwned deletes obj (nil: it does not exist) when the RayJob controls it. It reports whether obj is gone.
func (p *plan) deleteOwned(obj client.Object, kind actionKind) bool {
	if obj == nil || !metav1.IsControlledBy(obj, p.j) {
		return true
	}
	if obj.GetDeletionTimestamp() == nil {
		p.act(action{kind: kind, obj: obj})
	}
	return false
}
