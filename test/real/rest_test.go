package real

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
)

const rayRepo = "rayproject/ray"

// testRESTAPI: `manta apiserver` runs as a process on loopback (auth none, which it allows only there) and takes
// a compute template, a cluster and a job through KubeRay's /apis/v1 paths. The REST API has no node selector:
// its pods reach the real node because they do not tolerate the taint every kwok node carries while a real node
// runs (devcluster.FakeNodeTaint), as any pod without tolerations does.
//   - Cluster rest-ray (head only, 1 CPU / 2 Gi, imagePullPolicy Always) runs for real: the kubelet pulls the Ray
//     image again though the node has it (an ImagePullJob put it there first; the registry answers a manifest
//     request, the head's events say Pulling),
//     and job rest-job, selecting that cluster, ends SUCCEEDED through the REST API with its output in the
//     submitter's logs.
//   - Cluster rest-policies: a head with imagePullPolicy Never and a tag the node lacks waits in ErrImageNeverPull,
//     and a worker with IfNotPresent starts its init container with no request at the registry (the started
//     container is the barrier: the kubelet is past its image step).
func testRESTAPI(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "rest")
	api := e.startAPIServer(t, ctx, "none")

	api.call(t, ctx, http.MethodPost, "/apis/v1/namespaces/"+ns+"/compute_templates",
		apiserver.ComputeTemplate{Name: "one-cpu", Namespace: ns, CPU: 1, Memory: 2}, nil)
	// The head's dashboard modules start slowly under a 1-CPU limit on a busy machine (see fitRayResources).
	envs := &apiserver.EnvironmentVariables{Values: map[string]string{"RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT": "600"}}

	// The Ray image on the node first (earlier steps may have pulled it, or not), so that Always has something to
	// pull again.
	e.pushPullerImage(t, ctx, t.TempDir())
	start := time.Now()
	warm := e.runImagePullJob(t, ctx, ns, "ray-image", rayImage, mantav1alpha1.PullIfNotPresent, 3)
	if warm.Status.Succeeded != 1 {
		t.Fatalf("the Ray image is not on the node: %+v", warm.Status)
	}
	onNode := e.containerdDigest(t, ctx, "docker.io/"+rayImage)
	if onNode == "" {
		t.Fatalf("containerd lists no docker.io/%s after the ImagePullJob", rayImage)
	}
	t.Logf("the Ray image on the node (ImagePullJob, IfNotPresent) in %s", time.Since(start).Round(time.Millisecond))

	mark := len(e.cluster.RegistryRequests())
	start = time.Now()
	api.call(t, ctx, http.MethodPost, "/apis/v1/namespaces/"+ns+"/clusters", apiserver.Cluster{
		Name: "rest-ray", Namespace: ns, User: "real-test", Version: "2.52.0", Envs: envs,
		ClusterSpec: &apiserver.ClusterSpec{HeadGroupSpec: &apiserver.HeadGroupSpec{
			ComputeTemplate: "one-cpu", Image: rayImage, ImagePullPolicy: "Always",
			RayStartParams: map[string]string{"dashboard-host": "0.0.0.0"},
		}},
	}, nil)
	var cluster apiserver.Cluster
	waitFor(t, ctx, 10*time.Minute, "cluster rest-ray ready through the REST API", func() (bool, string) {
		cluster = apiserver.Cluster{}
		if err := api.get(ctx, "/apis/v1/namespaces/"+ns+"/clusters/rest-ray", &cluster); err != nil {
			return false, err.Error()
		}
		return cluster.ClusterState == string(rayv1.Ready), fmt.Sprintf("clusterState %q; %s", cluster.ClusterState, e.nsReport(ctx, ns))
	})
	t.Logf("cluster rest-ray ready in %s", time.Since(start).Round(time.Second))
	heads := e.rayPods(t, ctx, ns, rayv1.NodeTypeHead)
	if len(heads) != 1 {
		t.Fatalf("%d head pods: %s", len(heads), e.nsReport(ctx, ns))
	}
	head := heads[0]
	if head.Spec.NodeName != devcluster.RealNodeName || head.Spec.Containers[0].ImagePullPolicy != corev1.PullAlways {
		t.Errorf("head %s on %q with imagePullPolicy %q, want the real node and Always", head.Name, head.Spec.NodeName, head.Spec.Containers[0].ImagePullPolicy)
	}
	pulls := registryRequestsOf(e.cluster.RegistryRequests()[mark:], rayRepo)
	t.Logf("registry requests for %s while rest-ray started (head Always): %s", rayRepo, summarize(pulls))
	if countKind(pulls, "manifests") == 0 {
		t.Errorf("the head's imagePullPolicy Always made no manifest request at the registry")
	}
	if ev := e.podEvent(t, ctx, ns, head.Name, "Pulling"); ev == "" {
		t.Errorf("no Pulling event on head %s: %s", head.Name, e.podReport(ctx, ns, head.Name))
	}
	if got := e.containerdDigest(t, ctx, "docker.io/"+rayImage); got != onNode {
		t.Errorf("containerd's docker.io/%s is %s after the head's pull, want still %s (the tag did not move)", rayImage, got, onNode)
	}

	start = time.Now()
	api.call(t, ctx, http.MethodPost, "/apis/v1/namespaces/"+ns+"/jobs", apiserver.RayJob{
		Name: "rest-job", Namespace: ns, User: "real-test",
		Entrypoint:      `python -c "import ray; ray.init(); print('rest-job answer', ray.get(ray.remote(lambda: 6 * 7).remote()))"`,
		ClusterSelector: map[string]string{rayv1.LabelCluster: "rest-ray"},
		JobSubmitter:    &apiserver.RayJobSubmitter{Image: rayImage, CPU: "500m", Memory: "1Gi"},
	}, nil)
	var job apiserver.RayJob
	waitFor(t, ctx, 8*time.Minute, "job rest-job SUCCEEDED through the REST API", func() (bool, string) {
		job = apiserver.RayJob{}
		if err := api.get(ctx, "/apis/v1/namespaces/"+ns+"/jobs/rest-job", &job); err != nil {
			return false, err.Error()
		}
		if job.JobStatus == string(rayv1.JobStatusFailed) || job.JobDeploymentStatus == string(rayv1.JobDeploymentStatusFailed) {
			t.Fatalf("job rest-job failed: %s / %s: %s\n%s", job.JobStatus, job.JobDeploymentStatus, job.Message, e.nsReport(ctx, ns))
		}
		return job.JobStatus == string(rayv1.JobStatusSucceeded) && job.JobDeploymentStatus == string(rayv1.JobDeploymentStatusComplete),
			fmt.Sprintf("%s / %s: %s; %s", job.JobStatus, job.JobDeploymentStatus, job.Message, e.nsReport(ctx, ns))
	})
	t.Logf("job rest-job SUCCEEDED in %s on cluster %s", time.Since(start).Round(time.Second), job.RayClusterName)
	out, err := e.kubectlOut(ctx, "-n", ns, "logs", "job/rest-job")
	if err != nil {
		t.Fatalf("kubectl logs job/rest-job: %v: %s", err, out)
	}
	if !strings.Contains(out, "rest-job answer 42") {
		t.Errorf("the submitter's logs lack the entrypoint's output (rest-job answer 42):\n%s", out)
	}
	api.call(t, ctx, http.MethodDelete, "/apis/v1/namespaces/"+ns+"/jobs/rest-job", nil, nil)
	api.call(t, ctx, http.MethodDelete, "/apis/v1/namespaces/"+ns+"/clusters/rest-ray", nil, nil)
	start = time.Now()
	waitFor(t, ctx, 3*time.Minute, "pods of rest-ray gone", func() (bool, string) {
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, e.nsReport(ctx, ns)
	})
	t.Logf("pods of rest-ray gone %s after the deletes", time.Since(start).Round(time.Second))

	// Never and IfNotPresent, through a cluster whose head never starts (so no Ray runs).
	const missing = rayRepo + ":not-on-the-node"
	mark = len(e.cluster.RegistryRequests())
	api.call(t, ctx, http.MethodPost, "/apis/v1/namespaces/"+ns+"/clusters", apiserver.Cluster{
		Name: "rest-policies", Namespace: ns, User: "real-test", Version: "2.52.0",
		ClusterSpec: &apiserver.ClusterSpec{
			HeadGroupSpec: &apiserver.HeadGroupSpec{ComputeTemplate: "one-cpu", Image: missing, ImagePullPolicy: "Never",
				RayStartParams: map[string]string{"dashboard-host": "0.0.0.0"}},
			WorkerGroupSpec: []apiserver.WorkerGroupSpec{{GroupName: "workers", ComputeTemplate: "one-cpu", Image: rayImage,
				ImagePullPolicy: "IfNotPresent", Replicas: 1, MinReplicas: 1, MaxReplicas: 1}},
		},
	}, nil)
	waitFor(t, ctx, 3*time.Minute, "head in ErrImageNeverPull, worker's init container started", func() (bool, string) {
		heads, workers := e.rayPods(t, ctx, ns, rayv1.NodeTypeHead), e.rayPods(t, ctx, ns, rayv1.NodeTypeWorker)
		if len(heads) != 1 || len(workers) != 1 {
			return false, e.nsReport(ctx, ns)
		}
		neverPull := false
		for _, s := range heads[0].Status.ContainerStatuses {
			neverPull = neverPull || (s.State.Waiting != nil && s.State.Waiting.Reason == "ErrImageNeverPull")
		}
		started := false
		for _, s := range workers[0].Status.InitContainerStatuses {
			started = started || s.State.Running != nil || s.State.Terminated != nil
		}
		return neverPull && started, e.nsReport(ctx, ns)
	})
	pulls = registryRequestsOf(e.cluster.RegistryRequests()[mark:], rayRepo)
	t.Logf("registry requests for %s while rest-policies started (head Never, worker IfNotPresent): %s", rayRepo, summarize(pulls))
	for _, r := range pulls {
		if r.Kind() == "manifests" || r.Kind() == "blobs" {
			t.Errorf("with Never and IfNotPresent the registry served %s %s", r.Method, r.Path)
		}
	}
	workers := e.rayPods(t, ctx, ns, rayv1.NodeTypeWorker)
	if ev := e.podEvent(t, ctx, ns, workers[0].Name, "Pulled"); !strings.Contains(ev, "already present") {
		t.Errorf("the IfNotPresent worker's Pulled event %q does not say the image was already present", ev)
	}
	api.call(t, ctx, http.MethodDelete, "/apis/v1/namespaces/"+ns+"/clusters/rest-policies", nil, nil)
	e.deleteNamespace(t, ctx, ns)
}

func countKind(reqs []devcluster.RegistryRequest, kind string) int {
	n := 0
	for _, r := range reqs {
		if r.Kind() == kind {
			n++
		}
	}
	return n
}

// podEvent is the message of the pod's first event with reason, "" when it has none.
func (e *env) podEvent(t *testing.T, ctx context.Context, ns, pod, reason string) string {
	t.Helper()
	evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) == 0 {
		return ""
	}
	return evs.Items[0].Message
}

// restClient calls `manta apiserver` on loopback.
type restClient struct {
	base string
	hc   *http.Client
}

// startAPIServer runs `manta apiserver --auth <auth>` on a free loopback port with the dev cluster's admin
// kubeconfig, and stops it when the test ends.
func (e *env) startAPIServer(t *testing.T, ctx context.Context, auth string) *restClient {
	t.Helper()
	bin, err := testutil.BuildMantaTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ports, err := devcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	logPath := filepath.Join(e.cluster.Dir(), "logs", "apiserver-auth-"+auth+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "apiserver", "--listen", addr, "--auth", auth)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.cluster.Kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("manta apiserver: pid %d on %s, log %s", cmd.Process.Pid, addr, logPath)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = log.Close()
	})
	c := &restClient{base: "http://" + addr, hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}}
	waitFor(t, ctx, time.Minute, "manta apiserver healthy", func() (bool, string) {
		resp, err := c.hc.Get(c.base + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return c
}

// call sends body as JSON and fails the test unless the answer is 200; out, when not nil, gets the answer.
func (c *restClient) call(t *testing.T, ctx context.Context, method, path string, body, out any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

func (c *restClient) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return json.Unmarshal(b, out)
}
