package oracle

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

// A scenario starts its objects (a RayCluster named rc, or a RayJob or RayService) on both sides, then takes steps;
// after each step both settle and are compared.
type scenario struct {
	name string
	objs []*unstructured.Unstructured
	// setup, when set, runs once before the scenario's objects are applied (cluster-scoped objects it needs).
	setup func(t *testing.T, cl client.Client)
	steps []step
	// history, when set, compares what both sides went through during the steps, after the last one.
	history func(t *testing.T, ns string, sides ...side) []diff
}

// A step does the same thing on one side as on the other; pods are picked by their labels, since their names differ.
type step struct {
	name string
	do   func(t *testing.T, sd side, ns string)
}

func scenarios(t *testing.T, samples []sample) []scenario {
	out := clusterScenarios(t)
	return append(out, jobAndServiceScenarios(t, samples)...)
}

func clusterScenarios(t *testing.T) []scenario {
	base := func() *testutil.RayClusterWrapper { return testutil.MakeRayCluster("", "rc").Workers("small", 2) }
	multiHost := base().Obj()
	multiHost.Spec.WorkerGroupSpecs[0].NumOfHosts = 2
	// GCS fault tolerance on an external Redis (as the ray-cluster.external-redis samples). No Redis is needed: the
	// cleanup Job each operator creates on deletion is compared while its pod runs, which the kwok annotation keeps
	// running (the Job's pod carries the head's annotations) until the next step completes it.
	gcsFT := base().Obj()
	gcsFT.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{
		RedisAddress: "redis:6379",
		RedisPassword: &rayv1.RedisCredential{ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "redis-password-secret"}, Key: "password"}}},
	}
	gcsFT.Spec.HeadGroupSpec.Template.Annotations = map[string]string{kwokCompleteDelay: "1h", kwokCompleteJitter: "1h"}
	type clusterScenario struct {
		name    string
		cluster *rayv1.RayCluster
		steps   []step
	}
	var out []scenario
	for _, sc := range []clusterScenario{
		{"scale", base().Obj(), []step{
			{"up", jsonPatch(`[{"op":"replace","path":"/spec/workerGroupSpecs/0/replicas","value":4}]`)},
			{"down", jsonPatch(`[{"op":"replace","path":"/spec/workerGroupSpecs/0/replicas","value":1}]`)},
		}},
		{"workers-to-delete", base().Obj(), []step{{"first-worker", func(t *testing.T, sd side, ns string) { workersToDelete(t, sd, ns, 1) }}}},
		{"suspend-resume", base().Obj(), []step{
			{"suspend", mergePatch(`{"spec":{"suspend":true}}`)},
			{"resume", mergePatch(`{"spec":{"suspend":false}}`)},
		}},
		{name: "head-deleted", cluster: base().Obj(), steps: []step{{"delete-head", deletePod(rayv1.NodeTypeHead, "")}}},
		{name: "worker-failed", cluster: base().Obj(), steps: []step{{"fail-worker", failWorker}}},
		{name: "recreate", cluster: base().Recreate().Obj(), steps: []step{{"new-image", jsonPatch(`[
			{"op":"replace","path":"/spec/headGroupSpec/template/spec/containers/0/image","value":"rayproject/ray:2.53.0"},
			{"op":"replace","path":"/spec/workerGroupSpecs/0/template/spec/containers/0/image","value":"rayproject/ray:2.53.0"}]`)}}},
		{name: "multi-host", cluster: multiHost, steps: []step{{"lose-a-host", deletePod(rayv1.NodeTypeWorker, "1")}}},
		{name: "gcs-ft-redis", cluster: gcsFT, steps: []step{
			{"delete-with-redis", deleteAndWaitCleanupJob},
			{"redis-cleanup-completed", completeCleanupJob},
		}},
		// An autoscaler scales up in steps while the pods of its last step are still being made: three edits without
		// a settle between them. They only grow the group, as an autoscaler's do (it scales down through
		// workersToDelete): a decrease inside a burst deletes pods or not depending on which edits an operator's
		// reconcile happens to see, and the comparison would be of timing, not of behaviour (one run: KubeRay saw 5
		// then 3 and deleted, Manta saw 6).
		{"replica-edits", base().Obj(), []step{
			{"burst", func(t *testing.T, sd side, ns string) {
				for _, r := range []int{3, 5, 6} {
					jsonPatch(fmt.Sprintf(`[{"op":"replace","path":"/spec/workerGroupSpecs/0/replicas","value":%d}]`, r))(t, sd, ns)
				}
			}},
		}},
	} {
		out = append(out, scenario{name: sc.name, objs: []*unstructured.Unstructured{toUnstructured(t, sc.cluster)}, steps: sc.steps})
	}
	return append(out, incrementalScenario(t))
}

// stepDiffs are the differences found after one step ("start" is the cluster applied).
type stepDiffs struct {
	name  string
	diffs []diff
}

// runScenario creates the scenario's cluster on both sides and compares after the start and after every step.
func runScenario(t *testing.T, ns string, sc scenario, sides ...side) []stepDiffs {
	if sc.setup != nil {
		sc.setup(t, sides[0].cl)
	}
	name := "scenario/" + sc.name + "/"
	out := []stepDiffs{{"start", runSample(t, ns, name+"start", sample{name: sc.name, objs: sc.objs}, sides...)}}
	for _, st := range sc.steps {
		for _, sd := range sides {
			st.do(t, sd, sd.ns(ns))
		}
		out = append(out, stepDiffs{st.name, settle(t, ns, name+st.name, sides...)})
	}
	if sc.history != nil {
		out = append(out, stepDiffs{"history", sc.history(t, ns, sides...)})
	}
	return out
}

func clusterKey(ns string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: "rc"} }

func rayCluster() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(rayClusterGVK)
	return u
}

func jsonPatch(p string) func(*testing.T, side, string) {
	return func(t *testing.T, sd side, ns string) {
		u := rayCluster()
		u.SetNamespace(ns)
		u.SetName("rc")
		if err := sd.cl.Patch(context.Background(), u, client.RawPatch(types.JSONPatchType, []byte(p))); err != nil {
			t.Fatalf("%s: patch: %v", sd.name, err)
		}
	}
}

func mergePatch(p string) func(*testing.T, side, string) {
	return func(t *testing.T, sd side, ns string) {
		u := rayCluster()
		u.SetNamespace(ns)
		u.SetName("rc")
		if err := sd.cl.Patch(context.Background(), u, client.RawPatch(types.MergePatchType, []byte(p))); err != nil {
			t.Fatalf("%s: patch: %v", sd.name, err)
		}
	}
}

// podsOf lists the cluster's pods of a node type, ordered by replica and host index.
func podsOf(t *testing.T, sd side, ns, nodeType string) []corev1.Pod {
	t.Helper()
	list := &corev1.PodList{}
	if err := sd.cl.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelNodeType: nodeType}); err != nil {
		t.Fatal(err)
	}
	idx := func(p corev1.Pod, k string) int { i, _ := strconv.Atoi(p.Labels[k]); return i }
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int {
		if d := idx(a, rayv1.LabelReplicaIndex) - idx(b, rayv1.LabelReplicaIndex); d != 0 {
			return d
		}
		return idx(a, rayv1.LabelHostIndex) - idx(b, rayv1.LabelHostIndex)
	})
	if len(list.Items) == 0 {
		t.Fatalf("%s: no %s pods", sd.name, nodeType)
	}
	return list.Items
}

// deletePod deletes the first pod of a node type (with the given host index, when set).
func deletePod(nodeType, host string) func(*testing.T, side, string) {
	return func(t *testing.T, sd side, ns string) {
		pods := podsOf(t, sd, ns, nodeType)
		i := 0
		if host != "" {
			i = slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Labels[rayv1.LabelHostIndex] == host })
			if i < 0 {
				t.Fatalf("%s: no pod of host %s", sd.name, host)
			}
		}
		if err := sd.cl.Delete(context.Background(), &pods[i]); err != nil {
			t.Fatalf("%s: %v", sd.name, err)
		}
	}
}

// failWorker makes the first worker's pod Failed, as a kubelet does when its container dies for good.
func failWorker(t *testing.T, sd side, ns string) {
	p := podsOf(t, sd, ns, rayv1.NodeTypeWorker)[0]
	testutil.EndPod(&p, 1)
	if err := sd.cl.Status().Update(context.Background(), &p); err != nil {
		t.Fatalf("%s: %v", sd.name, err)
	}
}

// workersToDelete names the first worker for deletion and sets replicas, as the autoscaler does.
func workersToDelete(t *testing.T, sd side, ns string, replicas int) {
	p := podsOf(t, sd, ns, rayv1.NodeTypeWorker)[0]
	name, _ := json.Marshal(p.Name)
	jsonPatch(fmt.Sprintf(`[{"op":"replace","path":"/spec/workerGroupSpecs/0/replicas","value":%d},
		{"op":"add","path":"/spec/workerGroupSpecs/0/scaleStrategy","value":{"workersToDelete":[%s]}}]`, replicas, name))(t, sd, ns)
}

// The dev cluster's (kwok's) per-pod delay before a Job's running pod succeeds, and its cap.
const (
	kwokCompleteDelay  = "pod-complete.stage.kwok.x-k8s.io/delay"
	kwokCompleteJitter = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
)

// deleteAndWaitCleanupJob deletes the cluster and waits for its Redis cleanup Job, which comes once the pods are
// gone; the cluster stays, held by ray.io/gcs-ft-redis-cleanup-finalizer, while the Job runs.
func deleteAndWaitCleanupJob(t *testing.T, sd side, ns string) {
	ctx := context.Background()
	u := rayCluster()
	u.SetNamespace(ns)
	u.SetName("rc")
	if err := sd.cl.Delete(ctx, u); err != nil {
		t.Fatalf("%s: delete: %v", sd.name, err)
	}
	testutil.Eventually(t, 2*time.Minute, sd.name+": the Redis cleanup Job's pod", func() (bool, string) {
		pods := &corev1.PodList{}
		err := sd.cl.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelNodeType: clusterbuild.NodeTypeRedisCleanup})
		return err == nil && len(pods.Items) == 1, fmt.Sprintf("%d pods, %v", len(pods.Items), err)
	})
}

// completeCleanupJob plays the kubelet: the cleanup Job's pod succeeds, the Job controller completes the Job, and
// the operator must release the finalizer, so the cluster goes.
func completeCleanupJob(t *testing.T, sd side, ns string) {
	ctx := context.Background()
	p := podsOf(t, sd, ns, clusterbuild.NodeTypeRedisCleanup)[0]
	testutil.EndPod(&p, 0)
	if err := sd.cl.Status().Update(ctx, &p); err != nil {
		t.Fatalf("%s: %v", sd.name, err)
	}
	testutil.Eventually(t, 2*time.Minute, sd.name+": cluster released", func() (bool, string) {
		err := sd.cl.Get(ctx, clusterKey(ns), rayCluster())
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
