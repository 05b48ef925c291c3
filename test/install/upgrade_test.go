package install

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/devcluster/images"
	"github.com/manta-dev/manta/internal/testutil"
)

// baseRevision is the Manta the upgrade starts from, test/swap's: the first commit whose RayService takeover keeps
// the serving cluster (81555e8 and earlier roll it to a new one). Its chart takes installValues as they are, but
// its binary panics at start in the chart's pods (mkdir /tmp/kubebuilder-envtest on the read-only root file
// system, from envtest linked in; ebc272b fixed it), as does every commit of main before 164d8c5, whose operator
// differs from this tree's in nothing but the commit stamp. So the earlier release's pods get a writable /tmp
// (tmpPatch), the one thing changed from that release as it was.
const baseRevision = "576ac39"

// tmpPatch mounts an emptyDir at /tmp in a Deployment's first container (JSON patch).
const tmpPatch = `[{"op":"add","path":"/spec/template/spec/volumes","value":[{"name":"tmp","emptyDir":{}}]},` +
	`{"op":"add","path":"/spec/template/spec/containers/0/volumeMounts","value":[{"name":"tmp","mountPath":"/tmp"}]}]`

// baseRef is the earlier Manta's image, under a tag of its own beside MantaRef in the node's registry.
var baseRef = images.MantaRepository + ":base"

// baseManta is the earlier Manta: its chart, from a git worktree of baseRevision, and its image, built from that
// worktree as `make image` builds this tree's (statically linked, which the image needs: it has no libc).
type baseManta struct {
	chart string
	img   images.Image
	err   error
}

// buildBase checks baseRevision out and builds its image in the background, for checkUpgrade.
func buildBase(t *testing.T, ctx context.Context) <-chan baseManta {
	t.Helper()
	dir := t.TempDir()
	src, remove, err := testutil.WorktreeAt(testutil.MustRepoRoot(t), baseRevision, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	out := make(chan baseManta, 1)
	built := make(chan struct{})
	// The worktree goes only once the build stopped using it.
	t.Cleanup(func() { <-built })
	go func() {
		defer close(built)
		start := time.Now()
		img, err := images.MantaAt(ctx, src, filepath.Join(dir, "image"), baseRef)
		if err == nil {
			t.Logf("Manta's image at %s built as %s in %s", baseRevision, baseRef, time.Since(start).Round(time.Millisecond))
		}
		out <- baseManta{chart: filepath.Join(src, "charts", "manta"), img: img, err: err}
	}()
	return out
}

// checkUpgrade upgrades Manta under live work as a user does: the release of baseRevision's chart and image (with
// tmpPatch), the RayJob's Ray job running on the real node and an idle RayCluster on the kwok node, then this
// tree's CRDs applied and `helm upgrade` to this tree's chart and image. The Deployment rolls its pods over (a new
// pod Ready before an old one goes; the Lease passes from the old leader, which releases it on SIGTERM, to a new
// pod). Nothing of the work is recreated, the Ray job is not submitted again, it ends SUCCEEDED under the new
// operator once released, and both RayClusters are ready at their current generation. first is TestHelmInstall's
// finished RayJob, deleted under the earlier Manta to make room on the real node.
func (e *env) checkUpgrade(t *testing.T, ctx context.Context, base <-chan baseManta, first *rayv1.RayJob) {
	var b baseManta
	select {
	case b = <-base:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if b.err != nil {
		t.Fatalf("Manta's image at %s: %v", baseRevision, b.err)
	}
	if err := images.Push(ctx, b.img, e.cluster.RegistryHost(), &http.Transport{Proxy: nil}); err != nil {
		t.Fatal(err)
	}
	values := writeValues(t)
	start := time.Now()
	e.helm(t, ctx, "install", release, b.chart, "--namespace", system, "--values", values, "--set", "image.tag=base")
	for _, d := range []string{operator, apiserver} {
		e.kubectl(t, ctx, "-n", system, "patch", "deployment", d, "--type=json", "-p", tmpPatch)
	}
	oldOps := e.waitReady(t, ctx, operator, 2, baseRef)
	e.waitReady(t, ctx, apiserver, 1, baseRef)
	oldLeader := e.waitLeader(t, ctx, podNames(oldOps), "")
	t.Logf("helm install of Manta at %s (%s): pods Ready in %s, leader %s", baseRevision, baseRef,
		time.Since(start).Round(time.Millisecond), oldLeader)

	// The finished RayJob's cluster holds the real node's CPUs; its finalizer needs an operator, the earlier one.
	if err := e.cl.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 3*time.Minute, "RayCluster "+first.Status.RayClusterName+"'s pods gone", func() (bool, string) {
		pods, err := e.cs.CoreV1().Pods(first.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "ray.io/cluster=" + first.Status.RayClusterName})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods left", len(pods.Items))
	})

	ns := "upgrade"
	if err := testutil.CreateNamespaceWith(ctx, e.cs, ns); err != nil {
		t.Fatal(err)
	}
	job, idle := sampleJob(t, ns), idleCluster(ns)
	for _, o := range []client.Object{job, idle} {
		if err := e.cl.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	running := e.waitJob(t, ctx, job, func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusRunning })
	e.waitClusterReady(t, ctx, ns, idle.Name)
	if subs := e.submissions(t, ctx, running); len(subs) != 1 {
		t.Fatalf("before the upgrade, the head's dashboard lists %d submissions, want 1: %v", len(subs), subs)
	}
	before := e.workObjects(t, ctx, ns)
	stampsBefore := e.stamps(t, ctx, ns)
	t.Logf("under Manta at %s: Ray job %s running on RayCluster %s, RayCluster %s ready; %d pods, Services, Jobs and Ray objects",
		baseRevision, running.Status.JobId, running.Status.RayClusterName, idle.Name, len(before))

	// What a user types: helm upgrade leaves a chart's crds/ alone, so the CRDs go first.
	chart := filepath.Join(testutil.MustRepoRoot(t), "charts", "manta")
	start = time.Now()
	e.kubectl(t, ctx, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(chart, "crds"))
	e.helm(t, ctx, "upgrade", release, chart, "--namespace", system, "--values", values)
	newOps := e.waitReady(t, ctx, operator, 2, images.MantaRef())
	e.waitReady(t, ctx, apiserver, 1, images.MantaRef())
	newLeader := e.waitLeader(t, ctx, podNames(newOps), "")
	t.Logf("helm upgrade to this tree (%s): the rollout done and the Lease moved from %s to %s in %s",
		images.MantaRef(), oldLeader, newLeader, time.Since(start).Round(time.Millisecond))
	if slices.Contains(podNames(oldOps), newLeader) {
		t.Errorf("the Lease is still held by %s, a pod of the earlier Manta", newLeader)
	}

	// The new leader reads the Ray job as running, and its status stays that of the same job.
	e.waitJob(t, ctx, job, func(j *rayv1.RayJob) bool {
		return j.Status.JobStatus == rayv1.JobStatusRunning && j.Status.JobId == running.Status.JobId
	})
	e.release(t, ctx, ns, running.Status.RayClusterName)
	done := e.waitJob(t, ctx, job, func(j *rayv1.RayJob) bool {
		return j.Status.JobStatus == rayv1.JobStatusSucceeded && j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusComplete
	})
	for _, c := range []string{done.Status.RayClusterName, idle.Name} {
		e.waitClusterReady(t, ctx, ns, c)
	}
	subs := e.submissions(t, ctx, done)
	after := e.workObjects(t, ctx, ns)
	changed := 0
	for k, uid := range before {
		if after[k] != uid {
			changed++
			t.Errorf("after helm upgrade, %s is %q, was %q", k, after[k], uid)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			changed++
			t.Errorf("after helm upgrade, %s was added", k)
		}
	}
	t.Logf("after helm upgrade: Ray job %s / %s, %d submissions on the head's dashboard, %d of %d pods, Services, Jobs and Ray objects recreated, added or gone; the pods' stamps (release@commit) %v before, %v after",
		done.Status.JobStatus, done.Status.JobDeploymentStatus, len(subs), changed, len(before), stampsBefore, e.stamps(t, ctx, ns))
	if done.Status.JobId != running.Status.JobId {
		t.Errorf("the RayJob's jobId changed across the upgrade: %s, then %s", running.Status.JobId, done.Status.JobId)
	}
	if len(subs) != 1 || subs[0] != done.Status.JobId {
		t.Errorf("the head's dashboard lists submissions %v, want exactly the RayJob's %s", subs, done.Status.JobId)
	}
}

// idleCluster is a RayCluster of a head and a worker on the kwok node: pods that run no Ray, which the operator
// only keeps.
func idleCluster(ns string) *rayv1.RayCluster {
	onKwok := func(name string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: name, Image: "docker.io/rayproject/ray:2.52.0",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
			NodeSelector: map[string]string{"type": "kwok"},
			Tolerations:  []corev1.Toleration{{Key: devcluster.FakeNodeTaint, Operator: corev1.TolerationOpExists}},
		}}
	}
	return &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "idle"},
		Spec: rayv1.RayClusterSpec{
			RayVersion:    "2.52.0",
			HeadGroupSpec: rayv1.HeadGroupSpec{RayStartParams: map[string]string{}, Template: onKwok("ray-head")},
			WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{
				GroupName: "workers", Replicas: ptr.To[int32](1), MinReplicas: ptr.To[int32](1), MaxReplicas: ptr.To[int32](1),
				RayStartParams: map[string]string{}, Template: onKwok("ray-worker"),
			}},
		},
	}
}

// waitClusterReady waits until the RayCluster is ready as of its current generation.
func (e *env) waitClusterReady(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	waitFor(t, ctx, 5*time.Minute, "RayCluster "+name+" ready", func() (bool, string) {
		var rc rayv1.RayCluster
		if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &rc); err != nil {
			return false, err.Error()
		}
		return rc.Status.State == rayv1.Ready && rc.Status.ObservedGeneration == rc.Generation,
			fmt.Sprintf("state %q, observed generation %d of %d; %s", rc.Status.State, rc.Status.ObservedGeneration, rc.Generation, e.nsReport(ctx, ns))
	})
}

// stamps counts the pods of ns by the Manta release and commit their stamp names ("none": not stamped).
func (e *env) stamps(t *testing.T, ctx context.Context, ns string) map[string]int {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		v, c := p.Annotations[clusterbuild.AnnotationVersion], p.Annotations[clusterbuild.AnnotationCommit]
		if v == "" && c == "" {
			out["none"]++
			continue
		}
		if len(c) > 7 {
			c = c[:7]
		}
		out[v+"@"+c]++
	}
	return out
}

// workObjects maps the pods, Services, Jobs, RayClusters and RayJobs of ns to their UIDs ("" when being deleted).
func (e *env) workObjects(t *testing.T, ctx context.Context, ns string) map[string]types.UID {
	t.Helper()
	out := map[string]types.UID{}
	for kind, l := range map[string]client.ObjectList{"Pod": &corev1.PodList{}, "Service": &corev1.ServiceList{},
		"Job": &batchv1.JobList{}, "RayCluster": &rayv1.RayClusterList{}, "RayJob": &rayv1.RayJobList{}} {
		if err := e.cl.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range items {
			o, err := meta.Accessor(item)
			if err != nil {
				t.Fatal(err)
			}
			uid := o.GetUID()
			if o.GetDeletionTimestamp() != nil {
				uid = ""
			}
			out[kind+" "+o.GetName()] = uid
		}
	}
	return out
}
