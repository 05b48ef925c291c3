package real

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// smallMachine is the smallest machine `make run` is expected to run the samples on: 2 CPUs (this project's) and
// 8 GiB, the smallest general-purpose 2-vCPU size of the big clouds. The real node has the machine's CPUs and memory.
var smallMachine = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")}

// TestSamplesFitTheRealNode: all the pods each sample in config/samples makes at once fit the real node of a small
// machine, so `kubectl apply -f config/samples/<sample>` on `make run` leaves no pod Pending for "Insufficient
// cpu" (the Quick start once did: a head and two workers of one CPU each on 2 CPUs). The pods are the operator's own
// builders' (the autoscaler sidecar and init containers included) and their requests are summed as the scheduler
// does (component-helpers' PodRequests).
func TestSamplesFitTheRealNode(t *testing.T) {
	allocatable := smallMachine.DeepCopy()
	mem := allocatable[corev1.ResourceMemory]
	mem.Sub(resource.MustParse(devcluster.RealNodeEvictionMemory))
	allocatable[corev1.ResourceMemory] = mem

	files, err := filepath.Glob(filepath.Join(testutil.MustRepoRoot(t), "config", "samples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples in config/samples: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			pods := samplePods(t, f)
			total := corev1.ResourceList{}
			for _, p := range pods {
				clusterbuild.AddResources(total, resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}))
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if got, limit := total[r], allocatable[r]; got.Cmp(limit) > 0 {
					t.Errorf("its %d pods request %s of %s, more than the real node of a %s-CPU, %s machine has (%s)",
						len(pods), &got, r, q(smallMachine, corev1.ResourceCPU), q(smallMachine, corev1.ResourceMemory), &limit)
				}
			}
			t.Logf("%d pods request %s CPU and %s memory", len(pods), q(total, corev1.ResourceCPU), q(total, corev1.ResourceMemory))
		})
	}
}

// q is list[name] printed.
func q(list corev1.ResourceList, name corev1.ResourceName) string {
	v := list[name]
	return v.String()
}

// samplePods are the pods the sample in file makes while it runs: a RayCluster's head and workers, a RayJob's (or
// a RayCronJob's run's) cluster and submitter, a RayService's cluster, an ImagePullJob's puller on the node.
func samplePods(t *testing.T, file string) []*corev1.Pod {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	decode := func(into any) {
		if err := yaml.UnmarshalStrict(b, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	switch meta.Kind {
	case "RayCluster":
		var c rayv1.RayCluster
		decode(&c)
		return clusterPods(t, &c)
	case "RayJob":
		var j rayv1.RayJob
		decode(&j)
		return jobPods(t, &j)
	case "RayCronJob":
		var cj rayv1.RayCronJob
		decode(&cj)
		// Runs do not wait for earlier ones, but a run's cluster is gone a minute after its job ends: one run at a
		// time for a daily schedule.
		return jobPods(t, &rayv1.RayJob{ObjectMeta: cj.ObjectMeta, Spec: cj.Spec.JobTemplate})
	case "RayService":
		var s rayv1.RayService
		decode(&s)
		return clusterPods(t, clusterbuild.RayServiceCluster(&s, s.Name+"-raycluster-x"))
	case "ImagePullJob":
		var j mantav1alpha1.ImagePullJob
		decode(&j)
		// One puller per node at a time, whatever the parallelism.
		return []*corev1.Pod{imagepulljob.BuildPullerPod(&j, devcluster.RealNodeName, 0, imagepulljob.PodOptions{})}
	}
	t.Fatalf("%s: a sample of kind %q: say here which pods it makes", file, meta.Kind)
	return nil
}

// clusterPods are a RayCluster's head and every worker of its groups at the replicas the controller keeps
// (replicas clamped to [minReplicas, maxReplicas], numOfHosts pods each, none for a suspended group). Under the
// autoscaler a group at 0 counts one worker: the first the autoscaler adds must fit, or the sample shows nothing.
func clusterPods(t *testing.T, c *rayv1.RayCluster) []*corev1.Pod {
	t.Helper()
	if ptr.Deref(c.Spec.Suspend, false) {
		return nil
	}
	head := clusterbuild.HeadPod(c, clusterbuild.PodOptions{})
	if head == nil {
		t.Fatalf("RayCluster %s: no head pod built", c.Name)
	}
	pods := []*corev1.Pod{head}
	for i := range c.Spec.WorkerGroupSpecs {
		g := &c.Spec.WorkerGroupSpecs[i]
		if ptr.Deref(g.Suspend, false) {
			continue
		}
		n := ptr.Deref(g.Replicas, 0)
		if g.MinReplicas != nil {
			n = max(n, *g.MinReplicas)
		}
		if clusterbuild.AutoscalingEnabled(c) {
			n = max(n, 1)
		}
		if g.MaxReplicas != nil {
			n = min(n, *g.MaxReplicas)
		}
		for range int(n) * int(max(g.NumOfHosts, 1)) {
			pods = append(pods, clusterbuild.WorkerPod(c, g, clusterbuild.PodOptions{}))
		}
	}
	return pods
}

// jobPods are a RayJob's cluster (with SidecarMode's submitter in the head) and, in K8sJobMode, its submitter pod.
func jobPods(t *testing.T, j *rayv1.RayJob) []*corev1.Pod {
	t.Helper()
	if j.Spec.RayClusterSpec == nil {
		t.Fatalf("RayJob %s runs on a cluster it does not make: count that cluster's pods here", j.Name)
	}
	c := rayjob.ClusterFor(j, j.Name+"-x")
	pods := clusterPods(t, c)
	if j.Spec.SubmissionMode == "" || j.Spec.SubmissionMode == rayv1.K8sJobMode {
		submitter := rayjob.SubmitterJob(j, c, "http://"+clusterbuild.HeadServiceName(c)+":8265")
		pods = append(pods, &corev1.Pod{Spec: submitter.Spec.Template.Spec})
	}
	return pods
}
