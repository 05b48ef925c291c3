package oracle

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// failingEntrypoint exits 1 on the fake Ray heads (fakeray.ExitCode) as it would on a real one.
const failingEntrypoint = `python -c 'import sys; sys.exit(1)'`

// heldEntrypoint runs on the fake Ray heads until the test releases its namespace (holdMarker).
const heldEntrypoint = `python -c 'import time; time.sleep(3600)' # ` + holdMarker

// rayJob is a RayJob named name with a one-worker cluster of its own.
func rayJob(entrypoint string, mode rayv1.JobSubmissionMode) *rayv1.RayJob {
	rc := testutil.MakeRayCluster("", "unused").Workers("small", 1).Obj()
	return &rayv1.RayJob{Spec: rayv1.RayJobSpec{Entrypoint: entrypoint, SubmissionMode: mode, RayClusterSpec: &rc.Spec}}
}

func jobToUnstructured(t *testing.T, name string, job *rayv1.RayJob) *unstructured.Unstructured {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(job)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: u}
	obj.SetAPIVersion("ray.io/v1")
	obj.SetKind("RayJob")
	obj.SetName(name)
	delete(obj.Object, "status")
	unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
	return obj
}

// oracleJobs are RayJobs no sample has, each run to its end with deterministic outcomes on the fake heads:
//   - a failing job submitted by a submitter Job, its cluster deleted 5 s after the job ended, and one the operator
//     submits over HTTP;
//   - a failing job retried (backoffLimit 2), each try on a new cluster;
//   - a succeeding job under each deletion rule alone, 5 s after success.
func oracleJobs(t *testing.T) []sample {
	jobs := map[string]*rayv1.RayJob{}
	for name, mode := range map[string]rayv1.JobSubmissionMode{"oracle/ray-job.fails": rayv1.K8sJobMode, "oracle/ray-job.fails-http": rayv1.HTTPMode} {
		job := rayJob(failingEntrypoint, mode)
		if mode == rayv1.K8sJobMode {
			job.Spec.ShutdownAfterJobFinishes, job.Spec.TTLSecondsAfterFinished = true, 5
		}
		jobs[name] = job
	}
	retries := rayJob(failingEntrypoint, rayv1.K8sJobMode)
	retries.Spec.BackoffLimit = ptr.To[int32](2)
	jobs["oracle/ray-job.retries"] = retries
	for _, policy := range []rayv1.DeletionPolicyType{rayv1.DeleteWorkers, rayv1.DeleteCluster, rayv1.DeleteSelf, rayv1.DeleteNone} {
		job := rayJob(`python -c 'print("ok")'`, rayv1.K8sJobMode)
		job.Spec.DeletionStrategy = &rayv1.DeletionStrategy{DeletionRules: []rayv1.DeletionRule{{
			Policy: policy, Condition: rayv1.DeletionCondition{JobStatus: ptr.To(rayv1.JobStatusSucceeded), TTLSeconds: 5}}}}
		jobs["oracle/ray-job.rule-"+strings.ToLower(string(policy))] = job
	}

	var out []sample
	for name, job := range jobs {
		out = append(out, sample{name: name, objs: []*unstructured.Unstructured{jobToUnstructured(t, "job", job)}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// jobAndServiceScenarios: a RayJob suspended mid-run and resumed, then run to its end; the pinned module's
// ray-service.sample with an in-place Serve config change, then a cluster change (a NewCluster upgrade).
func jobAndServiceScenarios(t *testing.T, samples []sample) []scenario {
	// A RayJob can be suspended only with shutdownAfterJobFinishes (both operators refuse it otherwise).
	suspendable := rayJob(heldEntrypoint, rayv1.K8sJobMode)
	suspendable.Spec.ShutdownAfterJobFinishes = true
	out := []scenario{{name: "ray-job.suspend-resume", objs: []*unstructured.Unstructured{jobToUnstructured(t, "job", suspendable)}, steps: []step{
		{"suspend", patchObj(rayJobGVK, "job", `{"spec":{"suspend":true}}`)},
		{"resume", patchObj(rayJobGVK, "job", `{"spec":{"suspend":false}}`)},
		{"finish", func(_ *testing.T, sd side, ns string) { env.heads.release(ns) }},
	}}, {
		// A job still running when its activeDeadlineSeconds passes. The deadline is set once the job runs on both
		// sides (a deadline counted from creation would race the operators' start-up on a loaded machine): 1 s, long
		// past, so the next reconcile fails the job.
		name: "ray-job.deadline", objs: []*unstructured.Unstructured{jobToUnstructured(t, "job", rayJob(heldEntrypoint, rayv1.K8sJobMode))}, steps: []step{
			{"deadline", patchObj(rayJobGVK, "job", `{"spec":{"activeDeadlineSeconds":1}}`)},
		},
	}}
	for _, s := range samples {
		if s.name != "ray-service.sample" {
			continue
		}
		svc := s.objs[0]
		config, _, _ := unstructured.NestedString(svc.Object, "spec", "serveConfigV2")
		changed := strings.Replace(config, "price: 3", "price: 4", 1)
		if changed == config {
			t.Fatalf("%s: no price: 3 in serveConfigV2 to change", s.name)
		}
		patch, _ := jsonMarshal(map[string]any{"spec": map[string]any{"serveConfigV2": changed}})
		out = append(out, scenario{name: "ray-service.changes", objs: s.objs, steps: []step{
			{"serve-config", patchObj(rayServiceGVK, svc.GetName(), patch)},
			{"cluster", patchObj(rayServiceGVK, svc.GetName(),
				`{"spec":{"rayClusterConfig":{"headGroupSpec":{"template":{"metadata":{"labels":{"oracle-step":"cluster"}}}}}}}`)},
		}})
		return out
	}
	t.Fatal("no ray-service.sample in the pinned module")
	return nil
}

// patchObj merge-patches the named Ray object.
func patchObj(gvk schema.GroupVersionKind, name, patch string) func(*testing.T, side, string) {
	return func(t *testing.T, sd side, ns string) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace(ns)
		u.SetName(name)
		if err := sd.cl.Patch(context.Background(), u, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatalf("%s: patch %s %s: %v", sd.name, gvk.Kind, name, err)
		}
	}
}

func jsonMarshal(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("marshal: %w", err)
	}
	return string(b), nil
}

// A RayJob held on its fake head has settled unless a deadline runs; suspending and an upgrade's old cluster are
// on their way.
func TestMovingHeldJobsAndOldClusters(t *testing.T) {
	job := func(spec, status map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"spec": spec, "status": status}}
	}
	running := map[string]any{"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "rayClusterName": "c"}
	for _, tc := range []struct {
		name   string
		job    *unstructured.Unstructured
		held   bool
		moving bool
	}{
		{"running", job(map[string]any{}, running), false, true},
		{"held", job(map[string]any{}, running), true, false},
		{"held past a deadline", job(map[string]any{"activeDeadlineSeconds": int64(15)}, running), true, true},
		{"suspending", job(map[string]any{}, map[string]any{"jobDeploymentStatus": "Suspending"}), true, true},
		{"suspended", job(map[string]any{}, map[string]any{"jobDeploymentStatus": "Suspended"}), true, false},
	} {
		if got := rayJobMoving(tc.job, map[string]bool{"c": true}, map[string]int{"c": 1}, tc.held) != ""; got != tc.moving {
			t.Errorf("%s: moving = %v, want %v", tc.name, got, tc.moving)
		}
	}

	svc := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
		"activeServiceStatus": map[string]any{"rayClusterName": "svc-new"}}}}
	svc.SetName("svc")
	cluster := func(name string) unstructured.Unstructured {
		c := unstructured.Unstructured{}
		c.SetName(name)
		c.SetOwnerReferences([]metav1.OwnerReference{{Kind: "RayService", Name: "svc", Controller: ptr.To(true)}})
		return c
	}
	if why := oldServiceCluster(svc, []unstructured.Unstructured{cluster("svc-new")}); why != "" {
		t.Errorf("active cluster only: %q", why)
	}
	if why := oldServiceCluster(svc, []unstructured.Unstructured{cluster("svc-new"), cluster("svc-old")}); why == "" {
		t.Error("an old cluster awaiting deletion is not on its way")
	}
}

// A head counts as polled since the mark after servePolls reads; a new Serve config counts from its deploy.
func TestServePolledSince(t *testing.T) {
	mark := []map[types.UID]int{{"a": 4}, {}}
	for _, tc := range []struct {
		name   string
		now    []map[types.UID]int
		polled bool
	}{
		{"none since", []map[types.UID]int{{"a": 4}, {}}, false},
		{"two since", []map[types.UID]int{{"a": 6}, {}}, false},
		{"three since", []map[types.UID]int{{"a": 7}, {}}, true},
		{"new config, read once", []map[types.UID]int{{"a": 1}, {}}, false},
		{"new config, read three times", []map[types.UID]int{{"a": 3}, {}}, true},
		{"a head new since the mark", []map[types.UID]int{{"a": 7}, {"b": 2}}, false},
	} {
		if got := servePolledSince(mark, tc.now) == ""; got != tc.polled {
			t.Errorf("%s: polled = %v, want %v", tc.name, got, tc.polled)
		}
	}
}

// A failed worker is settled only once the status counts its replacement as the pods are: Running and Ready.
func TestStatusBehindPods(t *testing.T) {
	worker := func(phase corev1.PodPhase, ready bool) *corev1.Pod {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		return &corev1.Pod{Status: corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
	}
	count := func(pods ...*corev1.Pod) workerCounts {
		var w workerCounts
		for _, p := range pods {
			w = w.add(p)
		}
		return w
	}
	cluster := func(ready, available int64, deleting bool) *unstructured.Unstructured {
		c := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
			"readyWorkerReplicas": ready, "availableWorkerReplicas": available}}}
		if deleting {
			c.SetDeletionTimestamp(ptr.To(metav1.Now()))
		}
		return c
	}
	up := worker(corev1.PodRunning, true)
	for _, tc := range []struct {
		name    string
		cluster *unstructured.Unstructured
		pods    workerCounts
		behind  bool
	}{
		{"both counted", cluster(2, 2, false), count(up, up), false},
		{"the failed worker still counted", cluster(2, 2, false), count(worker(corev1.PodFailed, false), up), true},
		{"its replacement Ready, not counted yet", cluster(1, 1, false), count(up, up), true},
		{"its replacement Running, not Ready", cluster(1, 2, false), count(worker(corev1.PodRunning, false), up), false},
		{"a cluster being deleted", cluster(2, 2, true), count(), false},
	} {
		if got := statusBehindPods(tc.cluster, tc.pods) != ""; got != tc.behind {
			t.Errorf("%s: behind = %v, want %v", tc.name, got, tc.behind)
		}
	}
}
