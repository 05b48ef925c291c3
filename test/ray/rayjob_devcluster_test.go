package ray_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestRayJobK8sJobModeOnDevCluster runs K8sJobMode RayJobs on the dev cluster: kwok runs the RayCluster's pods
// (so the cluster gets ready as in production) and completes the submitter Job's pod, the operator follows the
// real Ray job on this package's head, and the test plays the submitter pod's container by running the exact
// script of the Job the operator made, twice (a retried submitter pod must not submit again). One RayJob is
// created with kubectl-like YAML, one through the REST API server, whose GET then reports SUCCEEDED.
func TestRayJobK8sJobModeOnDevCluster(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The test plays the submitter pod: kwok keeps it running until the test has run its script and ends it.
	dc, err := devcluster.Start(ctx, devcluster.Options{Nodes: 2, NodeCPU: "64", NodeMemory: "256Gi", NodeMaxPods: 110, HoldJobPods: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dc.Stop(); err != nil {
			t.Errorf("stop dev cluster: %v", err)
		}
	})
	cfg := dc.RESTConfig()
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The operator dials head Services by their cluster DNS names; on this machine they all lead to the real head.
	direct := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || !strings.HasSuffix(host, ".svc.cluster.local") || port != "8265" {
			return nil, fmt.Errorf("test transport: unexpected address %q", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+strconv.Itoa(head.DashboardPort))
	}}}
	f, err := ray.NewFactory(ray.Options{HTTPClient: direct, Timeout: defaultCallTimeout})
	if err != nil {
		t.Fatal(err)
	}
	opts := operator.Options{RayClients: f, SkipNameValidation: true, ReconcileConcurrency: 4}
	mgr, err := operator.NewManager(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := operator.Setup(mgr, opts); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})
	headDirect, err := ray.NewDirectTransport(head.DashboardURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dash := ray.NewDashboardClient(headDirect, ray.WithTimeout(defaultCallTimeout))

	t.Run("kubectl", func(t *testing.T) {
		t.Parallel()
		ns := "k8sjob-kubectl"
		if err := testutil.CreateNamespace(t.Context(), cl, ns); err != nil {
			t.Fatal(err)
		}
		j := newRayJob(ns, "k8sjob", `python -c "print('manta submitter ok', 6*7)"`)
		j.Spec.SubmissionMode = rayv1.K8sJobMode
		j.Spec.ShutdownAfterJobFinishes = true
		j.Spec.Metadata = map[string]string{"from": "manta-test"}
		if err := cl.Create(t.Context(), j); err != nil {
			t.Fatal(err)
		}
		got := runSubmitterAndWait(t, cl, dash, j)
		if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusComplete || got.Status.JobStatus != rayv1.JobStatusSucceeded {
			t.Fatalf("status = %+v", got.Status)
		}
		info, err := dash.GetJob(t.Context(), got.Status.JobId)
		if err != nil || info.Metadata["from"] != "manta-test" {
			t.Errorf("Ray's job %s: %+v, %v", got.Status.JobId, info, err)
		}
	})

	t.Run("REST API", func(t *testing.T) {
		t.Parallel()
		ns := "k8sjob-rest"
		if err := testutil.CreateNamespace(t.Context(), cl, ns); err != nil {
			t.Fatal(err)
		}
		s, err := apiserver.New(cfg, apiserver.Options{Auth: apiserver.AuthNone, Log: testr.New(t)})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		api := &restClient{t: t, c: srv.Client()}
		base := srv.URL + "/apis/v1/namespaces/" + ns
		api.do(http.MethodPost, base+"/compute_templates", map[string]any{"name": "small", "namespace": ns, "cpu": 1, "memory": 2}, http.StatusOK, nil)
		api.do(http.MethodPost, base+"/jobs", map[string]any{
			"name": "rest-job", "namespace": ns, "user": "alice", "version": "2.52.0",
			"entrypoint": `python -c "print('manta submitter ok', 6*7)"`,
			"clusterSpec": map[string]any{
				"headGroupSpec":   map[string]any{"computeTemplate": "small", "rayStartParams": map[string]string{"dashboard-host": "0.0.0.0"}},
				"workerGroupSpec": []any{map[string]any{"groupName": "w", "computeTemplate": "small", "replicas": 1, "minReplicas": 1, "maxReplicas": 1}},
			},
		}, http.StatusOK, nil)
		got := runSubmitterAndWait(t, cl, dash, &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rest-job"}})
		var rest map[string]any
		api.do(http.MethodGet, base+"/jobs/rest-job", nil, http.StatusOK, &rest)
		if rest["jobStatus"] != "SUCCEEDED" || rest["jobDeploymentStatus"] != "Complete" || rest["jobId"] != got.Status.JobId || rest["rayClusterName"] != got.Status.RayClusterName {
			t.Errorf("GET jobs/rest-job = %v; RayJob status %+v", rest, got.Status)
		}
	})
}

// runSubmitterAndWait plays the submitter pod: it waits for the operator's submitter Job, runs its container's
// script against the real head twice, and waits for the RayJob to finish. Ray must hold exactly one job with the
// RayJob's submission ID.
func runSubmitterAndWait(t *testing.T, cl client.Client, dash *ray.DashboardClient, j *rayv1.RayJob) *rayv1.RayJob {
	t.Helper()
	sub := &batchv1.Job{}
	testutil.Eventually(t, jobTimeout, "the submitter Job of "+j.Name, func() (bool, string) {
		err := cl.Get(t.Context(), client.ObjectKeyFromObject(j), sub)
		return err == nil, fmt.Sprint(err)
	})
	c := sub.Spec.Template.Spec.Containers[0]
	if len(c.Command) != 3 || c.Command[0] != "/bin/bash" || c.Command[1] != "-ce" || len(c.Args) != 1 {
		t.Fatalf("submitter command = %q, args %q", c.Command, c.Args)
	}
	var addr string
	for _, e := range c.Env {
		if e.Name == "RAY_DASHBOARD_ADDRESS" {
			addr = e.Value
		}
	}
	if !strings.HasSuffix(addr, ".svc.cluster.local:8265") {
		t.Fatalf("RAY_DASHBOARD_ADDRESS = %q", addr)
	}
	script := strings.ReplaceAll(c.Args[0], "http://"+addr, head.DashboardURL())
	for run := 1; run <= 2; run++ {
		ctx, cancel := context.WithTimeout(t.Context(), jobTimeout)
		cmd := exec.CommandContext(ctx, "/bin/bash", "-ce", script)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Join(root, "bin", "ray-venv", "bin")+":"+os.Getenv("PATH"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil || !strings.Contains(out.String(), "manta submitter ok 42") {
			t.Fatalf("submitter script, run %d: %v\n%s", run, err, out.String())
		}
	}
	completeSubmitterPod(t, cl, sub)
	got := waitRayJob(t, cl, j, "Complete", func(j *rayv1.RayJob) bool { return rayv1.IsJobDeploymentTerminal(j.Status.JobDeploymentStatus) })
	expectOneSubmission(t, dash, got.Status.JobId)
	if ptr.Deref(sub.Spec.BackoffLimit, 0) != 2 {
		t.Errorf("submitter backoffLimit = %v, want 2", sub.Spec.BackoffLimit)
	}
	return got
}

// completeSubmitterPod ends the submitter Job's running pod as its kubelet would once the script exited 0, so the
// Job controller completes the Job.
func completeSubmitterPod(t *testing.T, cl client.Client, sub *batchv1.Job) {
	t.Helper()
	var pod corev1.Pod
	testutil.Eventually(t, jobTimeout, "the running submitter pod of "+sub.Name, func() (bool, string) {
		pods := &corev1.PodList{}
		if err := cl.List(t.Context(), pods, client.InNamespace(sub.Namespace), client.MatchingLabels{"job-name": sub.Name}); err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				pod = p
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods, none running", len(pods.Items))
	})
	testutil.EndPod(&pod, 0)
	if err := cl.Status().Update(t.Context(), &pod); err != nil {
		t.Fatalf("ending the submitter pod: %v", err)
	}
}
