package oracle

import (
	"context"
	"strings"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// submitters plays what runs in a RayJob's submitter (the dev cluster's pods run nothing): `ray job submit` of the
// RayJob's entrypoint to its cluster's head, following the job to its end, then exiting as the CLI does (1 when
// the job FAILED). In K8sJobMode that is the submitter Job's pod; in SidecarMode the head pod's submitter
// container, whose end the oracle does not play (the pod runs on). Both sides are played alike.
type submitters struct {
	heads *rayHeads
	mu    sync.Mutex
	done  map[types.UID]bool // pods whose submission was made
	ended map[types.UID]bool // submitter pods ended
}

func newSubmitters(heads *rayHeads) *submitters {
	return &submitters{heads: heads, done: map[types.UID]bool{}, ended: map[types.UID]bool{}}
}

// play moves every submitter of namespace ns one step.
func (s *submitters) play(t *testing.T, sd side, ns string) {
	ctx := context.Background()
	jobs := listRay(t, sd, ns, rayJobGVK)
	if len(jobs) == 0 {
		return
	}
	pods := &corev1.PodList{}
	if err := sd.cl.List(ctx, pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	batch := &batchv1.JobList{}
	if err := sd.cl.List(ctx, batch, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		rj := &jobs[i]
		mode, _, _ := unstructured.NestedString(rj.Object, "spec", "submissionMode")
		id, _, _ := unstructured.NestedString(rj.Object, "status", "jobId")
		cluster, _, _ := unstructured.NestedString(rj.Object, "status", "rayClusterName")
		if id == "" || cluster == "" {
			continue
		}
		switch mode {
		case "", "K8sJobMode":
			for j := range batch.Items {
				b := &batch.Items[j]
				if owner := metav1.GetControllerOf(b); owner == nil || owner.Kind != "RayJob" || owner.Name != rj.GetName() {
					continue
				}
				for k := range pods.Items {
					p := &pods.Items[k]
					if p.Labels["batch.kubernetes.io/job-name"] != b.Name || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
						continue
					}
					s.step(t, sd, ns, cluster, rj, id, p, true)
				}
			}
		case "SidecarMode":
			for k := range pods.Items {
				p := &pods.Items[k]
				if p.Labels[rayv1.LabelCluster] == cluster && p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					s.step(t, sd, ns, cluster, rj, id, p, false)
				}
			}
		}
	}
}

// step submits the job once for pod, and once Ray says the job ended ends pod (when end) or its submitter
// container.
func (s *submitters) step(t *testing.T, sd side, ns, cluster string, rj *unstructured.Unstructured, id string, p *corev1.Pod, end bool) {
	ctx := context.Background()
	h := s.heads.headOf(ctx, s.heads.cl, ns, cluster)
	if h == nil {
		return // no head yet: the CLI waits for the dashboard
	}
	s.mu.Lock()
	submitted, ended := s.done[p.UID], s.ended[p.UID]
	s.mu.Unlock()
	if !submitted {
		// A repeated submission ID is refused by Ray; the CLI then follows the job that has it.
		_, _ = h.Submit(submitRequest(t, rj, id, p))
		s.mu.Lock()
		s.done[p.UID] = true
		s.mu.Unlock()
	}
	if ended {
		return
	}
	info, ok := h.Job(id)
	if !ok || !info.Status.IsTerminal() {
		return
	}
	code := int32(0)
	if info.Status == ray.JobStatusFailed {
		code = 1
	}
	pod := p.DeepCopy()
	if end {
		testutil.EndPod(pod, code)
	} else {
		// The head's submitter container exits; the head runs on.
		for i := range pod.Status.ContainerStatuses {
			if cs := &pod.Status.ContainerStatuses[i]; cs.Name == sidecarSubmitter {
				cs.Ready, cs.Started = false, new(bool)
				cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: map[bool]string{true: "Completed", false: "Error"}[code == 0], FinishedAt: metav1.Now()}}
			}
		}
	}
	if err := sd.cl.Status().Update(ctx, pod); err != nil {
		return // a stale pod: the next poll tries again
	}
	s.mu.Lock()
	s.ended[p.UID] = true
	s.mu.Unlock()
}

// sidecarSubmitter is the name of the submitter container SidecarMode adds to the head pod.
const sidecarSubmitter = "ray-job-submitter"

// submitRequest is what `ray job submit` sends for the RayJob: its entrypoint (or, for a custom submitter, the
// command after "--"), runtime environment, metadata and entrypoint resources.
func submitRequest(t *testing.T, rj *unstructured.Unstructured, id string, p *corev1.Pod) ray.JobSubmitRequest {
	req := ray.JobSubmitRequest{SubmissionID: id}
	req.Entrypoint, _, _ = unstructured.NestedString(rj.Object, "spec", "entrypoint")
	if req.Entrypoint == "" {
		for _, c := range p.Spec.Containers {
			for i, a := range c.Args {
				if a == "--" {
					req.Entrypoint = strings.Join(c.Args[i+1:], " ")
				}
			}
		}
	}
	if env, _, _ := unstructured.NestedString(rj.Object, "spec", "runtimeEnvYAML"); env != "" {
		re, err := ray.RuntimeEnvFromYAML(env)
		if err != nil {
			t.Logf("%s/%s: runtimeEnvYAML: %v", rj.GetNamespace(), rj.GetName(), err)
		}
		req.RuntimeEnv = re
	}
	req.Metadata, _, _ = unstructured.NestedStringMap(rj.Object, "spec", "metadata")
	if v, ok, _ := unstructured.NestedFieldNoCopy(rj.Object, "spec", "entrypointNumCpus"); ok {
		req.EntrypointNumCPUs = toFloat(v)
	}
	if v, ok, _ := unstructured.NestedFieldNoCopy(rj.Object, "spec", "entrypointNumGpus"); ok {
		req.EntrypointNumGPUs = toFloat(v)
	}
	return req
}

func toFloat(v any) float64 {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case float64:
		return n
	}
	return 0
}
