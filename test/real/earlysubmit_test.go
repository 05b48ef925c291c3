package real

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayjob"
)

// testRayJobSampleEarly: config/samples/rayjob.yaml annotated rayjob.AnnotationSubmitBeforeClusterReady succeeds,
// its submitter Job made before the cluster is ready and the job started once the head answered (the
// StartedBeforeClusterReady event); then the same sample without the annotation, for the comparison. Both run after
// testRayJobSample, so the node has the image. Each run's times from the apply are logged: Ray's start of the job
// (status.rayJobInfo.startTime), the RayJob seen RUNNING and SUCCEEDED / Complete (polled every 200 ms; the operator
// reads Ray every 3 s while the job runs), and on the way the submitter Job seen and the RayJob seen past Initializing.
func testRayJobSampleEarly(t *testing.T, ctx context.Context, e *env) {
	early := e.timeSample(t, ctx, "rayjob-early", true)
	plain := e.timeSample(t, ctx, "rayjob-plain", false)
	t.Logf("RayJob sample, warm node, seconds from the apply: opted in: %s; as KubeRay: %s; opted in / as KubeRay: SUCCEEDED %.2fx, Complete %.2fx",
		early, plain, early.succeeded.Seconds()/plain.succeeded.Seconds(), early.complete.Seconds()/plain.complete.Seconds())
}

// sampleTimes are a run's times from the apply.
type sampleTimes struct {
	// submitter: the submitter Job seen; deployed: jobDeploymentStatus Running seen (the operator saw the cluster
	// ready, or opted in, the head answer).
	submitter, deployed, rayStart, running, succeeded, complete time.Duration
}

func (s sampleTimes) String() string {
	return fmt.Sprintf("submitter Job %.1f, Running %.1f, Ray start %.1f, RUNNING %.1f, SUCCEEDED %.1f, Complete %.1f",
		s.submitter.Seconds(), s.deployed.Seconds(), s.rayStart.Seconds(), s.running.Seconds(), s.succeeded.Seconds(), s.complete.Seconds())
}

// timeSample runs the sample RayJob in a namespace of its own, opted in or not, until Complete, and returns its
// times; the namespace is deleted after.
func (e *env) timeSample(t *testing.T, ctx context.Context, nsName string, opted bool) sampleTimes {
	t.Helper()
	ns := e.namespace(t, ctx, nsName)
	// A failed run's pods are deleted too: the next steps count the pods on the node (startphases_test.go).
	done := false
	t.Cleanup(func() {
		if !done {
			e.deleteNamespace(t, ctx, ns)
		}
	})
	var job rayv1.RayJob
	readSample(t, "rayjob.yaml", &job)
	job.Namespace = ns
	fitRayResources(job.Spec.RayClusterSpec)
	if opted {
		job.Annotations = map[string]string{rayjob.AnnotationSubmitBeforeClusterReady: "true"}
	}
	applied := time.Now()
	if err := e.cl.Create(ctx, &job); err != nil {
		t.Fatal(err)
	}
	var got sampleTimes
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var j rayv1.RayJob
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(&job), &j); err != nil {
			t.Fatal(err)
		}
		s := &j.Status
		since := time.Since(applied)
		if s.JobStatus == rayv1.JobStatusFailed || s.JobDeploymentStatus == rayv1.JobDeploymentStatusFailed {
			t.Fatalf("RayJob %s failed: %s / %s: %s\n%s", ns, s.JobStatus, s.JobDeploymentStatus, s.Message, e.nsReport(ctx, ns))
		}
		if got.submitter == 0 && e.cl.Get(ctx, client.ObjectKeyFromObject(&job), &batchv1.Job{}) == nil {
			got.submitter = since
		}
		if got.deployed == 0 && s.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing && s.JobDeploymentStatus != rayv1.JobDeploymentStatusNew && s.JobDeploymentStatus != "" {
			got.deployed = since
		}
		if got.running == 0 && (s.JobStatus == rayv1.JobStatusRunning || s.JobStatus == rayv1.JobStatusSucceeded) {
			got.running = since
		}
		if got.succeeded == 0 && s.JobStatus == rayv1.JobStatusSucceeded {
			got.succeeded = since
		}
		if s.JobDeploymentStatus == rayv1.JobDeploymentStatusComplete {
			got.complete = since
			if st := s.RayJobStatusInfo.StartTime; st != nil {
				got.rayStart = st.Sub(applied)
			}
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("RayJob %s not Complete after 5m: %s / %s: %s\n%s", ns, s.JobStatus, s.JobDeploymentStatus, s.Message, e.nsReport(ctx, ns))
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, err := e.kubectlOut(ctx, "-n", ns, "logs", "job/"+job.Name)
	if err != nil || !strings.Contains(out, "succeeded") {
		t.Errorf("kubectl logs job/%s: %v: the job's success not in:\n%s", job.Name, err, out)
	}
	if opted {
		// Workers join as they start: the entrypoint's ray.cluster_resources() shows what had joined by then.
		t.Logf("opted in, the entrypoint saw: %s", lastLineWith(out, "'CPU'"))
		note := e.waitEventNote(t, ctx, ns, "RayJob", job.Name, rayjob.ReasonStartedBeforeClusterReady, 30*time.Second)
		t.Logf("opted in: %s", note)
	}
	e.deleteNamespace(t, ctx, ns)
	done = true
	return got
}

// lastLineWith is the last line of out that contains s.
func lastLineWith(out, s string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return strings.TrimSpace(lines[i])
		}
	}
	return "(no line with " + s + ")"
}
