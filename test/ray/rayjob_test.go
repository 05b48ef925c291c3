package ray_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestRayJobOnRealHead runs Manta's operator (RayCluster and RayJob controllers) against a real kube-apiserver,
// with every RayCluster's head played by the real Ray head of this package: HTTPMode RayJobs reach SUCCEEDED and
// FAILED, and one deleted while it runs is stopped in Ray. Once the operator dials the head Service directly
// (its DNS name resolved to the head on loopback), once with --use-kubernetes-proxy through the API server's
// services/proxy to the head published on a pod IP in a network namespace.
func TestRayJobOnRealHead(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	direct := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || !strings.HasSuffix(host, ".svc.cluster.local") {
			return nil, fmt.Errorf("direct test transport: unexpected address %q", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+strconv.Itoa(head.DashboardPort))
	}}}
	headDirect, err := ray.NewDirectTransport(head.DashboardURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dash := ray.NewDashboardClient(headDirect, ray.WithTimeout(defaultCallTimeout))

	t.Run("direct", func(t *testing.T) {
		f, err := ray.NewFactory(ray.Options{HTTPClient: direct, Timeout: defaultCallTimeout})
		if err != nil {
			t.Fatal(err)
		}
		ns := startRayJobOperator(t, cfg, cl, "rj-direct", operator.Options{RayClients: f}, "10.0.0.10")
		runRayJobs(t, cl, dash, ns)
	})
	t.Run("kubernetes proxy", func(t *testing.T) {
		pn := newPodNet(t)
		pn.forward(t, head.DashboardPort, "127.0.0.1:"+strconv.Itoa(head.DashboardPort))
		// RayClients nil: the operator builds its own factory from --use-kubernetes-proxy, as in production.
		ns := startRayJobOperator(t, cfg, cl, "rj-proxy", operator.Options{UseKubernetesProxy: true}, pn.PodIP)
		runRayJobs(t, cl, dash, ns)
	})
}

// startRayJobOperator runs the operator for one namespace and plays the kubelet and the EndpointSlice
// controller there: pods become Running and Ready (the head on headIP), and each head Service gets an
// EndpointSlice whose dashboard port is the real head's.
func startRayJobOperator(t *testing.T, cfg *rest.Config, cl client.Client, ns string, opts operator.Options, headIP string) string {
	t.Helper()
	if err := cl.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	startOperatorAs(t, cfg, cl, ns, opts, headIP)
	return ns
}

func fakeKubelet(ctx context.Context, cl client.Client, ns, headIP string) {
	for ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		pods := &corev1.PodList{}
		if err := cl.List(ctx, pods, client.InNamespace(ns)); err != nil {
			continue
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.Phase == corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			ip := "10.0.1." + strconv.Itoa(i%250+1)
			if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead {
				ip = headIP
			}
			// The head's EndpointSlice is published before the pod turns Ready: an operator that sees a Ready head
			// finds its Service's endpoints, so the first call through the Kubernetes proxy reaches the head.
			if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead {
				svc := p.Labels[rayv1.LabelCluster] + "-head-svc"
				slice := &discoveryv1.EndpointSlice{
					ObjectMeta:  metav1.ObjectMeta{Name: svc + "-ray", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
					AddressType: discoveryv1.AddressTypeIPv4,
					Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
						TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name, UID: p.UID}}},
					Ports: []discoveryv1.EndpointPort{{Name: ptr.To(ray.DashboardPortName), Port: ptr.To(int32(head.DashboardPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
				}
				if err := cl.Create(ctx, slice); err != nil && !apierrors.IsAlreadyExists(err) {
					continue
				}
			}
			now := metav1.Now()
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &now,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}}
			for _, c := range p.Spec.Containers {
				p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
					Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
			}
			_ = cl.Status().Update(ctx, p) // a failed write is tried again on the next pass: the pod is not Running yet
		}
	}
}

func newRayJob(ns, name, entrypoint string) *rayv1.RayJob {
	tmpl := func(name string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "rayproject/ray:2.52.0"}}}}
	}
	return &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: rayv1.RayJobSpec{
			Entrypoint: entrypoint, SubmissionMode: rayv1.HTTPMode,
			RayClusterSpec: &rayv1.RayClusterSpec{
				HeadGroupSpec: rayv1.HeadGroupSpec{Template: tmpl("ray-head")},
				WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{GroupName: "w", Replicas: ptr.To[int32](1), MinReplicas: ptr.To[int32](1),
					MaxReplicas: ptr.To[int32](1), Template: tmpl("ray-worker")}},
			},
		},
	}
}

func waitRayJob(t *testing.T, cl client.Client, j *rayv1.RayJob, what string, cond func(*rayv1.RayJob) bool) *rayv1.RayJob {
	t.Helper()
	got := &rayv1.RayJob{}
	testutil.Eventually(t, jobTimeout, j.Name+": "+what, func() (bool, string) {
		if err := cl.Get(context.Background(), client.ObjectKeyFromObject(j), got); err != nil {
			return false, err.Error()
		}
		return cond(got), fmt.Sprintf("%+v", got.Status)
	})
	return got
}

func runRayJobs(t *testing.T, cl client.Client, dash *ray.DashboardClient, ns string) {
	t.Run("SUCCEEDED", func(t *testing.T) {
		t.Parallel()
		j := newRayJob(ns, "ok", `python -c "print('manta rayjob ok')"`)
		if err := cl.Create(t.Context(), j); err != nil {
			t.Fatal(err)
		}
		got := waitRayJob(t, cl, j, "Complete", func(j *rayv1.RayJob) bool { return rayv1.IsJobDeploymentTerminal(j.Status.JobDeploymentStatus) })
		if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusComplete || got.Status.JobStatus != rayv1.JobStatusSucceeded {
			t.Fatalf("status = %+v", got.Status)
		}
		if got.Status.RayJobStatusInfo.StartTime == nil || got.Status.RayJobStatusInfo.EndTime == nil || ptr.Deref(got.Status.Succeeded, 0) != 1 {
			t.Errorf("status = %+v", got.Status)
		}
		logs, err := dash.GetJobLogs(t.Context(), got.Status.JobId)
		if err != nil || !strings.Contains(logs, "manta rayjob ok") {
			t.Errorf("Ray's logs of %s: %q, %v", got.Status.JobId, logs, err)
		}
	})
	t.Run("FAILED", func(t *testing.T) {
		t.Parallel()
		j := newRayJob(ns, "fails", `python -c "import sys; sys.exit(3)"`)
		if err := cl.Create(t.Context(), j); err != nil {
			t.Fatal(err)
		}
		got := waitRayJob(t, cl, j, "Failed", func(j *rayv1.RayJob) bool { return rayv1.IsJobDeploymentTerminal(j.Status.JobDeploymentStatus) })
		if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusFailed || got.Status.JobStatus != rayv1.JobStatusFailed || got.Status.Reason != rayv1.AppFailed {
			t.Fatalf("status = %+v", got.Status)
		}
	})
	t.Run("deleted while running is stopped in Ray", func(t *testing.T) {
		t.Parallel()
		j := newRayJob(ns, "deleted", `python -c "import time; time.sleep(600)"`)
		if err := cl.Create(t.Context(), j); err != nil {
			t.Fatal(err)
		}
		got := waitRayJob(t, cl, j, "RUNNING", func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusRunning })
		if err := cl.Delete(t.Context(), got); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, jobTimeout, "the RayJob gone", func() (bool, string) {
			err := cl.Get(t.Context(), client.ObjectKeyFromObject(j), &rayv1.RayJob{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		waitJob(t, dash, got.Status.JobId, jobTimeout, ray.JobStatusStopped)
		expectOneSubmission(t, dash, got.Status.JobId)
	})
}

// expectOneSubmission checks that Ray holds exactly one job with the submission ID.
func expectOneSubmission(t *testing.T, dash *ray.DashboardClient, id string) {
	t.Helper()
	jobs, err := dash.ListJobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, job := range jobs {
		if job.SubmissionID == id {
			n++
		}
	}
	if n != 1 {
		t.Errorf("Ray has %d jobs with submission ID %s, want 1", n, id)
	}
}
