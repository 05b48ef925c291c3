package oracle

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
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
	logf  func(format string, args ...any)
	mu    sync.Mutex
	done  map[types.UID]bool // pods whose submission was made
	ended map[types.UID]bool // submitter pods ended
}

func newSubmitters(heads *rayHeads, logf func(format string, args ...any)) *submitters {
	return &submitters{heads: heads, logf: logf, done: map[types.UID]bool{}, ended: map[types.UID]bool{}}
}

// play moves every submitter of namespace ns one step.
func (s *submitters) play(t *testing.T, sd side, ns string) {
	if err := s.visit(sd.cl, ns, true); err != nil {
		t.Fatalf("%s: %v", sd.name, err)
	}
}

// visit submits the job of every submitter of namespace ns that has not yet, and when end also ends those whose job
// has ended.
func (s *submitters) visit(cl client.Client, ns string, end bool) error {
	ctx := context.Background()
	jobs := &unstructured.UnstructuredList{}
	jobs.SetGroupVersionKind(rayJobGVK.GroupVersion().WithKind("RayJobList"))
	if err := cl.List(ctx, jobs, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list RayJobs: %w", err)
	}
	if len(jobs.Items) == 0 {
		return nil
	}
	pods := &corev1.PodList{}
	if err := cl.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	batch := &batchv1.JobList{}
	if err := cl.List(ctx, batch, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list Jobs: %w", err)
	}
	for i := range jobs.Items {
		rj := &jobs.Items[i]
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
					s.step(cl, ns, cluster, rj, id, p, true, end)
				}
			}
		case "SidecarMode":
			for k := range pods.Items {
				p := &pods.Items[k]
				if p.Labels[rayv1.LabelCluster] == cluster && p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					s.step(cl, ns, cluster, rj, id, p, false, end)
				}
			}
		}
	}
	return nil
}

// submitPromptly submits each RayJob's entrypoint as soon as its submitter runs (a pod turned Running, a RayJob's
// status naming its job and cluster), as the real submitter does, rather than at the next poll of the sample's
// settle: KubeRay v1.5.0 answers each "job does not exist" from its Ray head with an error, whose requeue backs off
// exponentially (5 ms doubling), and nothing but that requeue wakes a SidecarMode RayJob once its submitter
// container has ended. A job submitted after a dozen such errors (a settle poll can take seconds on a loaded
// machine) runs, and its submitter ends, inside KubeRay's backoff; KubeRay then finds the submitter ended more than
// its 30 s grace before and fails the RayJob (JobDeploymentStatusTransitionGracePeriodExceeded). The settle's poll
// (play) still submits too, and is what ends the submitters.
func (s *submitters) submitPromptly(t *testing.T, ctx context.Context, reader cache.Cache, cl client.Client) {
	kick := make(chan struct{}, 1)
	var mu sync.Mutex
	pending := map[string]bool{}
	enqueue := func(o any) {
		if obj, ok := o.(client.Object); ok {
			mu.Lock()
			pending[obj.GetNamespace()] = true
			mu.Unlock()
			select {
			case kick <- struct{}{}:
			default:
			}
		}
	}
	for _, obj := range []client.Object{&corev1.Pod{}, &rayv1.RayJob{}} {
		inf, err := reader.GetInformer(ctx, obj)
		if err != nil {
			t.Fatalf("informer for %T: %v", obj, err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) },
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Stopped and waited for before the test ends: visit may log.
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			}
			mu.Lock()
			nss := pending
			pending = map[string]bool{}
			mu.Unlock()
			for ns := range nss {
				// An error here (the cache stopping at the test's end) is left to play, which reports its own.
				_ = s.visit(cl, ns, false)
			}
		}
	}()
}

// step submits the job once for pod, and when end, once Ray says the job ended, ends pod (when endPod) or its
// submitter container.
func (s *submitters) step(cl client.Client, ns, cluster string, rj *unstructured.Unstructured, id string, p *corev1.Pod, endPod, end bool) {
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
		_, _ = h.Submit(s.submitRequest(rj, id, p))
		s.mu.Lock()
		s.done[p.UID] = true
		s.mu.Unlock()
	}
	if ended || !end {
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
	if endPod {
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
	if err := cl.Status().Update(ctx, pod); err != nil {
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
func (s *submitters) submitRequest(rj *unstructured.Unstructured, id string, p *corev1.Pod) ray.JobSubmitRequest {
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
			s.logf("%s/%s: runtimeEnvYAML: %v", rj.GetNamespace(), rj.GetName(), err)
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
