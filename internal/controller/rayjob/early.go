package rayjob

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/ray"
)

// A RayJob annotated AnnotationSubmitBeforeClusterReady "true" does not wait in Initializing for its RayCluster to be
// ready (every pod Running and Ready), as KubeRay's do: it starts once the head's dashboard answers, and the
// entrypoint uses the workers as they register with Ray ("answers" is the GCS healthy and listing the head node
// alive: before the head's raylet registers, Ray accepts a job and then fails it). The head pod's readiness probe waits 10 s before its first
// check and the workers come after it, so on a node that has the image this saves the probe's delay and the workers'
// start, and in K8sJobMode the submitter pod's own start too: its Job is created as soon as the head Service exists
// (its script waits for the dashboard, SubmitScript), so that pod starts beside the head.
//
// What "starts" means per mode, once the head answers:
//   - K8sJobMode and SidecarMode: the job is Running (its submitter submits it as soon as the dashboard answers);
//   - HTTPMode: the operator submits the job, and the job is Running once Ray accepted it;
//   - InteractiveMode: the job is Waiting for the user's submission (Running when spec.jobId is set).
//
// The deadlines, suspension, deletion and the start trouble reports work as before; a head that does not answer yet
// is not a failure (the job keeps waiting as for a cluster that is not ready).

// AnnotationSubmitBeforeClusterReady set to "true" on a RayJob starts the job once its cluster's head answers,
// without waiting for the cluster to be ready. "false" or no annotation: the job waits, as in KubeRay. Any other
// value fails validation.
const AnnotationSubmitBeforeClusterReady = "manta.dev/submit-before-cluster-ready"

// ReasonStartedBeforeClusterReady is the Normal event of a job that started under AnnotationSubmitBeforeClusterReady
// while its cluster was not ready.
const ReasonStartedBeforeClusterReady = "StartedBeforeClusterReady"

// earlyProbeInterval bounds how often a job that may start early looks whether its head answers. Shorter than the
// poll interval: the head's dashboard coming up is on the job's critical path and no watch event announces it (the
// pod turns Ready only after its probe's delay), and one look is one request to the head (a GCS health check or
// the HTTPMode submission), most of them refused within the few seconds the dashboard takes to listen.
const earlyProbeInterval = time.Second

// submitsEarly: the RayJob is annotated AnnotationSubmitBeforeClusterReady "true".
func submitsEarly(j *rayv1.RayJob) bool {
	return j.Annotations[AnnotationSubmitBeforeClusterReady] == "true"
}

// headUp: the cluster's head pod is Running with an IP, so its dashboard may answer.
func headUp(pods []corev1.Pod, cluster string) bool {
	for i := range pods {
		p := &pods[i]
		if p.Labels[rayv1.LabelCluster] == cluster && p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead &&
			p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			return true
		}
	}
	return false
}

// startEarly is the Initializing step of a job whose cluster is not ready. Without AnnotationSubmitBeforeClusterReady
// the job waits for it. With it, a K8sJobMode submitter is created once the head Service exists, and the job starts
// once the head takes jobs (its GCS healthy and listing the head node alive, the check observe made): HTTPMode
// submits it then (a head that still cannot take it is asked again, the job still Initializing). It reports whether the job
// starts in this step; the caller then moves it on as for a ready cluster.
func (p *plan) startEarly(cluster *rayv1.RayCluster) (bool, error) {
	j := p.j
	if !submitsEarly(j) {
		return false, nil
	}
	again := min(p.cfg.pollInterval, earlyProbeInterval)
	mode, up := submissionMode(j), headUp(p.o.pods, cluster.Name)
	var err error
	switch {
	case up && p.o.dashErr != nil:
		// As in Running: a client of the head that cannot be made (its auth token not readable) is the reconcile's
		// error, not the head's answer.
		err = p.o.dashErr
	case up && mode == rayv1.HTTPMode && p.o.headProbed && p.o.headErr == nil:
		return true, p.submitEarly(cluster, again)
	case up && p.o.headProbed && p.o.headErr == nil:
		p.startedEarlyEvent(cluster)
		return true, nil
	}
	// Neither the head pod going Running nor its dashboard starting to listen need change the cluster's status: no
	// watch event is sure to come.
	p.Requeue(again)
	if mode == rayv1.K8sJobMode && cluster.Status.Head.ServiceName != "" {
		if err := p.ensureSubmitter(cluster); err != nil {
			return false, err
		}
	}
	return false, err
}

// submitEarly submits an HTTPMode job before its cluster is ready. Ray refusing it for now (its dashboard not
// listening yet, no job agent yet: ray.ErrUnavailable) leaves the job Initializing, to try again after again; any
// other refusal fails the submission as in Running (notSubmittedYet). A submission that got through unseen is found
// by the next one (the writer counts ray.ErrAlreadySubmitted as done).
func (p *plan) submitEarly(cluster *rayv1.RayCluster, again time.Duration) error {
	s := &p.j.Status
	req, err := SubmitRequest(p.j)
	if err != nil {
		p.fail(rayv1.ValidationFailed, err.Error())
		return nil
	}
	id := s.JobId
	p.act(action{kind: submitJob, cluster: cluster, jobID: id, submit: req, onErr: func(p *plan, err error) error {
		if errors.Is(err, ray.ErrUnavailable) {
			p.Requeue(again)
			return nil
		}
		p.fail(rayv1.SubmissionFailed, fmt.Sprintf("submitting Ray job %s: %v", id, err))
		return nil
	}})
	p.startedEarlyEvent(cluster)
	return nil
}

// startedEarlyEvent says the job starts on a cluster that is not ready, and how far the cluster got.
func (p *plan) startedEarlyEvent(cluster *rayv1.RayCluster) {
	state := string(cluster.Status.State)
	if state == "" {
		state = "not ready"
	}
	p.StatusEventf(corev1.EventTypeNormal, ReasonStartedBeforeClusterReady, "Start",
		"the head of RayCluster %s answers; starting the job before the cluster is ready (state %s, %d of %d workers ready; %s is \"true\")",
		cluster.Name, state, cluster.Status.ReadyWorkerReplicas, cluster.Status.DesiredWorkerReplicas, AnnotationSubmitBeforeClusterReady)
}
