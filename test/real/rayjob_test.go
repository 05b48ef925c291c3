package real

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/ray"
)

// tickEntrypoint is a driver that prints "<mark> tick <i>" every second for n seconds, then "<mark> done".
func tickEntrypoint(mark string, n int) string {
	return fmt.Sprintf(`python -c "import time
for i in range(%d):
    print('%s tick', i, flush=True)
    time.sleep(1)
print('%s done', flush=True)"`, n, mark, mark)
}

// testRayJobModesOnSelectedCluster: one RayCluster (the head alone) serves several RayJobs through clusterSelector,
// as a user shares a cluster between jobs. With the operator reaching the dashboard through cluster DNS:
//   - HTTPMode: an entrypoint that calls ray.init() ends SUCCEEDED / Complete with its output in Ray's job logs;
//   - HTTPMode: an entrypoint that exits 3 ends FAILED / Failed (AppFailed), and Ray says FAILED;
//   - HTTPMode: a driver that would tick for ten minutes is stopped by activeDeadlineSeconds: Failed
//     (DeadlineExceeded) in Manta, STOPPED in Ray, and its process is gone from the head;
//   - InteractiveMode: the RayJob waits (Waiting) until spec.jobId is set, then waits for Ray to know that ID; the
//     test submits it with `ray job submit --submission-id` in the head (as `kubectl ray job submit` does), and the
//     RayJob follows it to SUCCEEDED.
//
// Then the operator is restarted in this machine's namespace with --use-kubernetes-proxy, where the head Service's
// DNS name does not resolve, so only the API server's services/proxy leads to the dashboard: an HTTPMode job is
// submitted and followed to SUCCEEDED, and a deadline job is stopped in Ray, through it.
// K8sJobMode is testRayJobSample's.
func testRayJobModesOnSelectedCluster(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "rayjob-modes")
	var rc rayv1.RayCluster
	readSample(t, "raycluster.yaml", &rc)
	rc.Name, rc.Namespace = "shared", ns
	// Drivers run on the head; workers would only cost the node's CPUs.
	rc.Spec.WorkerGroupSpecs = nil
	fitRayResources(&rc.Spec)
	if err := e.cl.Create(ctx, &rc); err != nil {
		t.Fatal(err)
	}
	e.waitClusterReady(t, ctx, &rc, 0)
	dash := e.dashboard(t, &rc)

	newJob := func(name string, mode rayv1.JobSubmissionMode, entrypoint string) *rayv1.RayJob {
		return &rayv1.RayJob{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: rayv1.RayJobSpec{
				SubmissionMode:  mode,
				Entrypoint:      entrypoint,
				ClusterSelector: map[string]string{rayv1.LabelCluster: rc.Name},
			},
		}
	}
	ok := newJob("http-ok", rayv1.HTTPMode, `python -c "import ray; ray.init(); print('http-ok saw', ray.cluster_resources()['CPU'], 'CPU')"`)
	fail := newJob("http-fail", rayv1.HTTPMode, `python -c "import sys; print('http-fail ran', flush=True); sys.exit(3)"`)
	deadline := newJob("http-deadline", rayv1.HTTPMode, tickEntrypoint("deadline-job", 600))
	deadline.Spec.ActiveDeadlineSeconds = ptr.To(int32(60))
	interactive := newJob("interactive", rayv1.InteractiveMode, "")
	for _, j := range []*rayv1.RayJob{deadline, ok, fail, interactive} {
		if err := e.cl.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
	}

	// InteractiveMode: Waiting for a job ID; then, with one, waiting for Ray to know it.
	e.waitJob(t, ctx, interactive, 5*time.Minute, "Waiting", func(j *rayv1.RayJob) bool {
		return j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusWaiting
	})
	const interactiveID = "interactive-by-hand"
	patch := client.MergeFrom(interactive.DeepCopy())
	interactive.Spec.JobId = interactiveID
	if err := e.cl.Patch(ctx, interactive, patch); err != nil {
		t.Fatal(err)
	}
	e.waitJob(t, ctx, interactive, 2*time.Minute, "Running, Ray not knowing the job yet", func(j *rayv1.RayJob) bool {
		return j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusRunning && j.Status.JobId == interactiveID &&
			strings.Contains(j.Status.Message, "does not know job "+interactiveID)
	})
	head := e.headPod(t, ctx, &rc)
	out, err := e.kubectlOut(ctx, "-n", ns, "exec", head.Name, "-c", "ray-head", "--", "ray", "job", "submit",
		"--address", "http://127.0.0.1:8265", "--submission-id", interactiveID, "--no-wait", "--",
		"python", "-c", "print('interactive-ok', flush=True)")
	if err != nil {
		t.Fatalf("ray job submit in the head: %v: %s", err, out)
	}

	e.waitJobEnd(t, ctx, ok, rayv1.JobStatusSucceeded, rayv1.JobDeploymentStatusComplete)
	e.checkRayLogs(t, ctx, dash, ok.Status.JobId, "http-ok saw 1.0 CPU")
	got := e.waitJobEnd(t, ctx, fail, rayv1.JobStatusFailed, rayv1.JobDeploymentStatusFailed)
	if got.Status.Reason != rayv1.AppFailed || !strings.Contains(got.Status.Message, "exit code 3") {
		t.Errorf("failed job: reason %q, message %q; want AppFailed and Ray's word on exit code 3", got.Status.Reason, got.Status.Message)
	}
	e.checkRayStatus(t, ctx, dash, fail.Status.JobId, ray.JobStatusFailed)
	e.checkRayLogs(t, ctx, dash, fail.Status.JobId, "http-fail ran")
	e.waitJobEnd(t, ctx, interactive, rayv1.JobStatusSucceeded, rayv1.JobDeploymentStatusComplete)
	e.checkRayLogs(t, ctx, dash, interactiveID, "interactive-ok")
	e.checkDeadlineStopped(t, ctx, dash, &rc, deadline, "deadline-job")

	// Through the API server only.
	e.stopOperator()
	e.runOperator(t, false, "--use-kubernetes-proxy")
	defer func() {
		e.stopOperator()
		e.startOperator(t)
	}()
	fqdn := clusterbuild.HeadServiceFQDN(&rc, "")
	if addrs, err := net.DefaultResolver.LookupHost(ctx, fqdn); err == nil {
		t.Fatalf("%s resolves in this machine's namespace (%v): the proxied operator could reach the head directly", fqdn, addrs)
	}
	proxied := newJob("proxied-ok", rayv1.HTTPMode, `python -c "print('proxied-ok ran', flush=True)"`)
	proxiedDeadline := newJob("proxied-deadline", rayv1.HTTPMode, tickEntrypoint("proxied-deadline-job", 600))
	proxiedDeadline.Spec.ActiveDeadlineSeconds = ptr.To(int32(45))
	for _, j := range []*rayv1.RayJob{proxiedDeadline, proxied} {
		if err := e.cl.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	e.waitJobEnd(t, ctx, proxied, rayv1.JobStatusSucceeded, rayv1.JobDeploymentStatusComplete)
	e.checkRayLogs(t, ctx, dash, proxied.Status.JobId, "proxied-ok ran")
	e.checkDeadlineStopped(t, ctx, dash, &rc, proxiedDeadline, "proxied-deadline-job")
	e.deleteNamespace(t, ctx, ns)
}

// checkDeadlineStopped waits for a RayJob whose driver ticks under mark to be RUNNING in Ray, then for
// activeDeadlineSeconds to fail it (DeadlineExceeded), and checks in Ray that the job is STOPPED, its output shows
// it ran, and no process of the head still carries the mark.
func (e *env) checkDeadlineStopped(t *testing.T, ctx context.Context, dash *ray.DashboardClient, rc *rayv1.RayCluster, j *rayv1.RayJob, mark string) {
	t.Helper()
	got := e.waitJob(t, ctx, j, 5*time.Minute, "failed by activeDeadlineSeconds", func(j *rayv1.RayJob) bool {
		return j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusFailed
	})
	if got.Status.Reason != rayv1.DeadlineExceeded {
		t.Fatalf("%s: reason %q (%s), want DeadlineExceeded", j.Name, got.Status.Reason, got.Status.Message)
	}
	// The driver ran before the deadline: Ray has its ticks.
	e.checkRayLogs(t, ctx, dash, got.Status.JobId, mark+" tick 1")
	e.checkRayStatus(t, ctx, dash, got.Status.JobId, ray.JobStatusStopped)
	head := e.headPod(t, ctx, rc)
	// The mark is split in the script, so that the scanning process does not count itself.
	half := len(mark) / 2
	script := fmt.Sprintf(`import os
n = 0
for p in os.listdir('/proc'):
    try:
        if p.isdigit() and (%q + %q).encode() in open('/proc/%%s/cmdline' %% p, 'rb').read():
            n += 1
    except OSError:
        pass
print('processes', n)`, mark[:half], mark[half:])
	waitFor(t, ctx, 2*time.Minute, "the driver of "+j.Name+" gone from the head", func() (bool, string) {
		out, err := e.kubectlOut(ctx, "-n", rc.Namespace, "exec", head.Name, "-c", "ray-head", "--", "python", "-c", script)
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		return strings.TrimSpace(out) == "processes 0", out
	})
}

// testRayJobSidecarSuspendResume: a SidecarMode RayJob (the submitter is a container of the head pod) with
// shutdownAfterJobFinishes runs a driver that ticks for a minute. Suspended while Ray runs it, the RayJob deletes its
// cluster and pods and ends Suspended; resumed, it makes a new cluster whose sidecar submits the job again, which
// ends SUCCEEDED with the driver's output in the sidecar's logs; then the RayJob deletes that cluster.
func testRayJobSidecarSuspendResume(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "rayjob-sidecar")
	var job rayv1.RayJob
	readSample(t, "rayjob.yaml", &job)
	job.Name, job.Namespace = "sidecar", ns
	job.Spec.SubmissionMode = rayv1.SidecarMode
	job.Spec.Entrypoint = tickEntrypoint("sidecar-job", 60)
	// Time to read the sidecar's logs before the cluster goes.
	job.Spec.TTLSecondsAfterFinished = 10
	job.Spec.RayClusterSpec.WorkerGroupSpecs = nil
	fitRayResources(job.Spec.RayClusterSpec)
	if err := e.cl.Create(ctx, &job); err != nil {
		t.Fatal(err)
	}
	running := e.waitJob(t, ctx, &job, 10*time.Minute, "RUNNING in Ray", func(j *rayv1.RayJob) bool {
		return j.Status.JobStatus == rayv1.JobStatusRunning
	})
	first := running.Status.RayClusterName
	firstHead := e.headPod(t, ctx, &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: first}})
	sidecar := firstHead.Spec.Containers[len(firstHead.Spec.Containers)-1].Name
	if sidecar != rayjob.SubmitterContainerName {
		t.Fatalf("head pod's containers end with %q, want the submitter %q", sidecar, rayjob.SubmitterContainerName)
	}
	// The driver ticks in Ray when the suspension comes.
	var firstCluster rayv1.RayCluster
	if err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, &firstCluster); err != nil {
		t.Fatal(err)
	}
	e.checkRayLogs(t, ctx, e.dashboard(t, &firstCluster), running.Status.JobId, "sidecar-job tick 1")

	patch := client.MergeFrom(job.DeepCopy())
	job.Spec.Suspend = true
	if err := e.cl.Patch(ctx, &job, patch); err != nil {
		t.Fatal(err)
	}
	suspended := e.waitJob(t, ctx, &job, 5*time.Minute, "Suspended", func(j *rayv1.RayJob) bool {
		return j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusSuspended
	})
	if suspended.Status.JobStatus != "" || suspended.Status.RayClusterName != "" {
		t.Errorf("suspended RayJob still names job status %q, cluster %q", suspended.Status.JobStatus, suspended.Status.RayClusterName)
	}
	// Suspended means the pods are gone (the driver with them), not only the RayCluster object.
	var gone rayv1.RayCluster
	if err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, &gone); !apierrors.IsNotFound(err) {
		t.Errorf("RayCluster %s after suspension: %v, want it deleted", first, err)
	}
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: rayv1.LabelCluster + "=" + first})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("suspended RayJob left %d pods of its cluster: %s", len(pods.Items), e.nsReport(ctx, ns))
	}

	patch = client.MergeFrom(job.DeepCopy())
	job.Spec.Suspend = false
	if err := e.cl.Patch(ctx, &job, patch); err != nil {
		t.Fatal(err)
	}
	var lastLogs, headName string
	done := e.waitJob(t, ctx, &job, 10*time.Minute, "SUCCEEDED after resuming", func(j *rayv1.RayJob) bool {
		if j.Status.RayClusterName != "" && j.Status.RayClusterName != first {
			pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: rayv1.LabelCluster + "=" + j.Status.RayClusterName + "," + rayv1.LabelNodeType + "=head"})
			if err == nil && len(pods.Items) == 1 {
				if out, err := e.logs(ctx, ns, pods.Items[0].Name, rayjob.SubmitterContainerName); err == nil && out != "" {
					lastLogs, headName = out, pods.Items[0].Name
				}
			}
		}
		if j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusFailed {
			t.Fatalf("resumed RayJob failed: %s: %s", j.Status.Reason, j.Status.Message)
		}
		return j.Status.JobStatus == rayv1.JobStatusSucceeded && j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusComplete
	})
	second := done.Status.RayClusterName
	if second == first {
		t.Errorf("resumed RayJob reuses the cluster name %s, want a new cluster", first)
	}
	if headName == firstHead.Name {
		t.Errorf("resumed RayJob runs in the suspended cluster's head pod %s", headName)
	}
	waitFor(t, ctx, time.Minute, "the sidecar's logs hold the driver's end", func() (bool, string) {
		if out, err := e.logs(ctx, ns, headName, rayjob.SubmitterContainerName); err == nil && out != "" {
			lastLogs = out
		}
		return strings.Contains(lastLogs, "sidecar-job done"), lastLogs
	})
	t.Logf("the resumed job's sidecar logs (last lines):\n%s", lastLines(lastLogs, 4))
	waitFor(t, ctx, 3*time.Minute, "RayCluster "+second+" deleted after the job finished", func() (bool, string) {
		var c rayv1.RayCluster
		err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: second}, &c)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	e.deleteNamespace(t, ctx, ns)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// waitClusterReady waits for the RayCluster to be Ready with the given number of ready workers.
func (e *env) waitClusterReady(t *testing.T, ctx context.Context, rc *rayv1.RayCluster, workers int32) *rayv1.RayCluster {
	t.Helper()
	var got rayv1.RayCluster
	waitFor(t, ctx, 10*time.Minute, "RayCluster "+rc.Name+" ready", func() (bool, string) {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(rc), &got); err != nil {
			return false, err.Error()
		}
		return got.Status.State == rayv1.Ready && got.Status.ReadyWorkerReplicas == workers,
			fmt.Sprintf("state %q, %d ready workers; %s", got.Status.State, got.Status.ReadyWorkerReplicas, e.nsReport(ctx, rc.Namespace))
	})
	return &got
}

// dashboard is a client for the cluster's dashboard from this machine, through cluster DNS (the test's own view of
// Ray, whichever way the operator reaches it).
func (e *env) dashboard(t *testing.T, rc *rayv1.RayCluster) *ray.DashboardClient {
	t.Helper()
	f, err := ray.NewFactory(ray.Options{
		Timeout:    20 * time.Second,
		HTTPClient: &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: e.cluster.DialContext}},
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.Dashboard(rayjob.HeadTarget(rc))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (e *env) headPod(t *testing.T, ctx context.Context, rc *rayv1.RayCluster) *corev1.Pod {
	t.Helper()
	var head *corev1.Pod
	waitFor(t, ctx, time.Minute, "one running head pod of "+rc.Name, func() (bool, string) {
		pods, err := e.cs.CoreV1().Pods(rc.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: rayv1.LabelCluster + "=" + rc.Name + "," + rayv1.LabelNodeType + "=" + rayv1.NodeTypeHead})
		if err != nil {
			return false, err.Error()
		}
		var live []corev1.Pod
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				live = append(live, p)
			}
		}
		if len(live) != 1 {
			return false, e.nsReport(ctx, rc.Namespace)
		}
		head = &live[0]
		return true, ""
	})
	return head
}

// waitJob polls the RayJob until cond holds, and returns it.
func (e *env) waitJob(t *testing.T, ctx context.Context, j *rayv1.RayJob, timeout time.Duration, what string, cond func(*rayv1.RayJob) bool) *rayv1.RayJob {
	t.Helper()
	var got rayv1.RayJob
	waitFor(t, ctx, timeout, "RayJob "+j.Name+" "+what, func() (bool, string) {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(j), &got); err != nil {
			return false, err.Error()
		}
		return cond(&got), e.jobReport(ctx, &got)
	})
	return &got
}

// waitJobEnd waits for the RayJob to end, and fails unless it ends as wanted.
func (e *env) waitJobEnd(t *testing.T, ctx context.Context, j *rayv1.RayJob, status rayv1.JobStatus, deployment rayv1.JobDeploymentStatus) *rayv1.RayJob {
	t.Helper()
	got := e.waitJob(t, ctx, j, 5*time.Minute, "ended", func(j *rayv1.RayJob) bool {
		return rayv1.IsJobDeploymentTerminal(j.Status.JobDeploymentStatus)
	})
	if got.Status.JobStatus != status || got.Status.JobDeploymentStatus != deployment {
		t.Fatalf("RayJob %s ended %s / %s, want %s / %s: %s", j.Name, got.Status.JobStatus, got.Status.JobDeploymentStatus, status, deployment, e.jobReport(ctx, got))
	}
	*j = *got
	return got
}

// jobReport says where a RayJob stands, with its last events and the operator's last log lines.
func (e *env) jobReport(ctx context.Context, j *rayv1.RayJob) string {
	var b strings.Builder
	s := &j.Status
	fmt.Fprintf(&b, "%s / %s (job %q, cluster %q, reason %q): %s", s.JobStatus, s.JobDeploymentStatus, s.JobId, s.RayClusterName, s.Reason, s.Message)
	if evs, err := e.cs.CoreV1().Events(j.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + j.Name}); err == nil {
		items := evs.Items
		if len(items) > 4 {
			items = items[len(items)-4:]
		}
		for _, ev := range items {
			fmt.Fprintf(&b, "; event %s: %s", ev.Reason, ev.Message)
		}
	}
	if log, err := os.ReadFile(e.opLog); err == nil {
		fmt.Fprintf(&b, "\noperator log:\n%s", lastLines(string(log), 5))
	}
	return b.String()
}

// checkRayLogs waits for Ray's logs of the job to hold want.
func (e *env) checkRayLogs(t *testing.T, ctx context.Context, dash *ray.DashboardClient, id, want string) {
	t.Helper()
	waitFor(t, ctx, time.Minute, fmt.Sprintf("Ray's logs of job %s hold %q", id, want), func() (bool, string) {
		out, err := dash.GetJobLogs(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(out, want), lastLines(out, 5)
	})
}

// checkRayStatus waits for Ray to report the job in the given status.
func (e *env) checkRayStatus(t *testing.T, ctx context.Context, dash *ray.DashboardClient, id string, want ray.JobStatus) {
	t.Helper()
	waitFor(t, ctx, 2*time.Minute, fmt.Sprintf("Ray reports job %s %s", id, want), func() (bool, string) {
		info, err := dash.GetJob(ctx, id)
		if err != nil {
			if errors.Is(err, ray.ErrNotFound) {
				return false, "Ray does not know the job"
			}
			return false, err.Error()
		}
		return info.Status == want, fmt.Sprintf("%s: %s", info.Status, info.Message)
	})
}
