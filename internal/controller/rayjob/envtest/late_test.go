package envtest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestLateReconcileAfterSubmitterFinished: the operator was down while the Ray job ended and then its submitter
// did, for longer than the submitter-finished timeout. Started again, it settles the job as Ray reports it
// (SUCCEEDED, Complete), not as a job Ray never finished (the CI of 2f817a0 met that under load in the oracle: a
// reconcile that came after the timeout failed a job Ray had finished before its submitter exited).
func TestLateReconcileAfterSubmitterFinished(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	e := &env{Env: testutil.NewEnv(cl), cl: cl, ray: newRay(t)}
	timeout := func(o *rayjob.Options) { o.SubmitterFinishedTimeout = 2 * time.Second }
	stop := startFlakyOperator(t, cfg, e.ray, nil, timeout)
	ns := e.Namespace(t)
	j := e.create(t, testutil.MakeRayJob(ns, "late").Mode(rayv1.SidecarMode))
	c := e.readyCluster(t, j)
	got := e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
	started := time.Now().Add(-2 * time.Minute)
	e.ray.Cluster(ns, c.Name).SetJob(got.Status.JobId, ray.JobStatusRunning, started.UnixMilli(), 0)
	e.waitJobStatus(t, j, rayv1.JobStatusRunning)
	stop()

	// While the operator is down: Ray finishes the job, then the head's submitter container exits, a minute ago.
	ended := time.Now().Add(-time.Minute - time.Second)
	e.ray.Cluster(ns, c.Name).SetJob(got.Status.JobId, ray.JobStatusSucceeded, started.UnixMilli(), ended.UnixMilli())
	finished := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	head := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.Name + "-head",
		Labels: map[string]string{rayv1.LabelCluster: c.Name, rayv1.LabelNodeType: rayv1.NodeTypeHead}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray"}, {Name: rayjob.SubmitterContainerName, Image: "rayproject/ray"}}}}
	if err := cl.Create(context.Background(), head); err != nil {
		t.Fatal(err)
	}
	head.Status.Phase = corev1.PodRunning
	head.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "ray-head", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: finished}}},
		{Name: rayjob.SubmitterContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: finished}}},
	}
	if err := cl.Status().Update(context.Background(), head); err != nil {
		t.Fatal(err)
	}

	stop = startFlakyOperator(t, cfg, e.ray, nil, timeout)
	defer stop()
	got = testutil.WaitFor(t, e.Env, j, "a terminal jobDeploymentStatus", func(j *rayv1.RayJob) bool {
		return j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusComplete || j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusFailed
	})
	if s := got.Status; s.JobDeploymentStatus != rayv1.JobDeploymentStatusComplete || s.JobStatus != rayv1.JobStatusSucceeded || s.Reason != "" {
		t.Errorf("status %s/%s reason %q message %q; want Complete/SUCCEEDED as Ray reports it", s.JobDeploymentStatus, s.JobStatus, s.Reason, s.Message)
	}
}
