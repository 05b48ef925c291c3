package rayjob

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/idle"
)

// initializing waits for the cluster to be ready (or, opted in, for its head to answer: startEarly), then starts
// the submission.
func (p *plan) initializing() error {
	j := p.j
	s := &j.Status
	if p.suspendRequested() {
		return nil
	}
	if err := p.batchSchedule(); err != nil {
		return err
	}
	// Without a cluster to follow the step ends here, unless a deadline fails the job.
	noCluster := func(p *plan) bool { return p.deadlines(nil) }
	cluster, err := p.ensureCluster(noCluster)
	if err != nil || cluster == nil || s.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing {
		if noCluster(p) {
			return nil
		}
		return err
	}
	s.RayClusterStatus = *cluster.Status.DeepCopy()
	if p.deadlines(cluster) {
		return nil
	}
	if len(j.Spec.ClusterSelector) > 0 && idle.SuspendedForIdleness(cluster) {
		// A selected cluster that Manta suspended for idleness (manta.dev/idle-timeout) is woken for the job; not
		// owned, so no watch event brings the job back when it is Ready.
		p.act(action{kind: resumeIdleCluster, obj: cluster.DeepCopy()})
		p.Requeue(p.cfg.pollInterval)
		return nil
	}
	if cluster.Status.State != rayv1.Ready {
		if failed, err := p.reportStartTrouble(cluster); failed || err != nil {
			return err
		}
		if len(j.Spec.ClusterSelector) > 0 {
			p.Requeue(p.cfg.pollInterval) // not owned: no watch event will come
		}
		if start, err := p.startEarly(cluster); !start || err != nil {
			return err
		}
	}
	s.Message = "" // what reportStartTrouble said is over
	s.DashboardURL = DashboardURL(cluster, p.cfg.clusterDomain)
	switch submissionMode(j) {
	case rayv1.K8sJobMode:
		if err := p.ensureSubmitter(cluster); err != nil {
			return err
		}
	case rayv1.InteractiveMode:
		if j.Spec.JobId == "" {
			s.JobDeploymentStatus = rayv1.JobDeploymentStatusWaiting
			return nil
		}
		s.JobId = j.Spec.JobId
	}
	s.JobDeploymentStatus = rayv1.JobDeploymentStatusRunning
	p.Requeue(0)
	return nil
}

// ensureCluster finds the job's cluster, creating it from rayClusterSpec when the RayJob makes its own. then is
// the rest of the step after a create the API server already had or could not make now (the plan takes it as if
// the create went through); a cluster it refuses fails the attempt, once.
func (p *plan) ensureCluster(then func(p *plan) bool) (*rayv1.RayCluster, error) {
	j := p.j
	cluster, err := p.o.cluster, p.o.clusterErr
	if err != nil || cluster != nil {
		if cluster != nil && len(j.Spec.ClusterSelector) == 0 && !metav1.IsControlledBy(cluster, j) {
			return nil, fmt.Errorf("RayCluster %s exists and does not belong to this RayJob", cluster.Name)
		}
		return cluster, err
	}
	if len(j.Spec.ClusterSelector) > 0 {
		p.Eventf(corev1.EventTypeWarning, ReasonClusterNotFound, "Get", "RayCluster %s/%s set in the clusterSelector is not found. It must be created manually", j.Namespace, j.Status.RayClusterName)
		p.Requeue(p.cfg.pollInterval)
		return nil, nil
	}
	c := ClusterFor(j, j.Status.RayClusterName)
	if submissionMode(j) == rayv1.K8sJobMode {
		// As KubeRay: the cluster itself carries the job's gang only when the submitter is a pod of its own.
		addSchedulerMetadata(p.cfg.batchScheduler, j, c, "")
	}
	p.act(action{kind: createCluster, obj: c, onErr: func(p *plan, err error) error {
		switch {
		case apierrors.IsAlreadyExists(err):
			p.Requeue(time.Second)
			err = nil
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			// The API server refuses the cluster as written: retrying will not help.
			p.fail(rayv1.SubmissionFailed, fmt.Sprintf("spec.rayClusterSpec: the API server refused RayCluster %s: %v", c.Name, err))
			return nil
		}
		if then(p) {
			return nil
		}
		return err
	}})
	return nil, nil
}

// ensureSubmitter creates the K8sJobMode submitter Job (named after the RayJob, so it exists at most once). One the
// API server refuses fails the attempt, and ends the step.
func (p *plan) ensureSubmitter(cluster *rayv1.RayCluster) error {
	existing, err := p.ownedSubmitter()
	if err != nil || existing != nil {
		return err
	}
	job := SubmitterJob(p.j, cluster, p.o.inClusterDashboard)
	addSchedulerMetadata(p.cfg.batchScheduler, p.j, &job.Spec.Template, clusterbuild.SubmitterGroupName)
	p.act(action{kind: createSubmitter, obj: job, onErr: func(p *plan, err error) error {
		if !apierrors.IsInvalid(err) {
			return err
		}
		p.fail(rayv1.SubmissionFailed, fmt.Sprintf("spec.submitterPodTemplate: the API server refused submitter Job %s: %v", job.Name, err))
		return nil
	}})
	return nil
}

// ownedSubmitter is the observed submitter Job; one the RayJob does not own is an error.
func (p *plan) ownedSubmitter() (*batchv1.Job, error) {
	job, err := p.o.submitter, p.o.submitterErr
	if err != nil || job == nil {
		return nil, err
	}
	if !metav1.IsControlledBy(job, p.j) {
		return nil, fmt.Errorf("a Job named %s exists that this RayJob does not own", job.Name)
	}
	return job, nil
}
