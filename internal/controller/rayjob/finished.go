package rayjob

import (
	"time"

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
