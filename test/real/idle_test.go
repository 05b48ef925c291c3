package real

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/idle"
)

// testIdleSuspend: with real Ray, a RayCluster annotated manta.dev/idle-timeout that holds a detached actor stays up,
// one that runs nothing is suspended (pods deleted, spec kept, IdleSuspended True), the first is suspended too once
// its actor is killed, and a RayJob whose clusterSelector names a suspended cluster resumes it and succeeds on it.
func testIdleSuspend(t *testing.T, ctx context.Context, e *env) {
	// Checks every 2 s instead of every minute, so the step takes seconds of idleness, not minutes.
	e.stopOperator()
	e.runOperator(t, true, "--idle-check-interval=2s")
	defer func() {
		e.stopOperator()
		e.startOperator(t)
	}()
	ns := e.namespace(t, ctx, "idle")
	const timeout = "15s"
	newCluster := func(name string) *rayv1.RayCluster {
		var rc rayv1.RayCluster
		readSample(t, "raycluster.yaml", &rc)
		rc.Name, rc.Namespace = name, ns
		rc.Annotations = map[string]string{idle.AnnotationIdleTimeout: timeout}
		// The head is all a driver needs; workers would only cost the node's CPUs.
		rc.Spec.WorkerGroupSpecs = nil
		fitRayResources(&rc.Spec)
		if err := e.cl.Create(ctx, &rc); err != nil {
			t.Fatal(err)
		}
		return e.waitClusterReady(t, ctx, &rc, 0)
	}

	// busy holds a detached actor before idle is even created: it has been Ready and checked for longer than idle
	// will have been when idle is suspended, so were the actor not counted, busy would be suspended first.
	busy := newCluster("busy")
	head := e.headPod(t, ctx, busy)
	out := e.headPython(t, ctx, ns, head.Name, `
import ray
ray.init(namespace="idle-test")
@ray.remote(num_cpus=0)
class Keeper:
    def ping(self):
        return "keeper up"
k = Keeper.options(name="keeper", lifetime="detached").remote()
print(ray.get(k.ping.remote()), flush=True)
`)
	if !strings.Contains(out, "keeper up") {
		t.Fatalf("the detached actor did not answer: %s", out)
	}
	quiet := newCluster("quiet")
	start := time.Now()
	e.waitIdleSuspended(t, ctx, quiet)
	t.Logf("quiet suspended %s after it was Ready (timeout %s, checks every 2s)", time.Since(start).Round(time.Second), timeout)
	var got rayv1.RayCluster
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(busy), &got); err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(got.Spec.Suspend, false) {
		t.Fatalf("busy, holding a detached actor, was suspended: %+v", got.Status.Conditions)
	}

	// Without its actor, busy is idle too.
	e.headPython(t, ctx, ns, head.Name, `
import ray
ray.init(namespace="idle-test")
ray.kill(ray.get_actor("keeper"))
`)
	e.waitIdleSuspended(t, ctx, busy)

	// A RayJob selecting the suspended cluster resumes it and runs on it.
	job := &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Name: "wake-quiet", Namespace: ns},
		Spec: rayv1.RayJobSpec{
			SubmissionMode:  rayv1.HTTPMode,
			Entrypoint:      `python -c "import ray; ray.init(); print('woke the quiet cluster', flush=True)"`,
			ClusterSelector: map[string]string{rayv1.LabelCluster: quiet.Name},
		},
	}
	if err := e.cl.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	e.waitJobEnd(t, ctx, job, rayv1.JobStatusSucceeded, rayv1.JobDeploymentStatusComplete)
	e.checkRayLogs(t, ctx, e.dashboard(t, quiet), job.Status.JobId, "woke the quiet cluster")
	waitFor(t, ctx, 2*time.Minute, "quiet resumed: marker removed, IdleSuspended False", func() (bool, string) {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(quiet), &got); err != nil {
			return false, err.Error()
		}
		_, marked := got.Annotations[idle.AnnotationIdleSuspendedAt]
		cond := meta.FindStatusCondition(got.Status.Conditions, idle.ConditionIdleSuspended)
		return !marked && !ptr.Deref(got.Spec.Suspend, false) && cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == idle.ReasonResumed,
			fmt.Sprintf("suspend %v, annotations %v, condition %+v", ptr.Deref(got.Spec.Suspend, false), got.Annotations, cond)
	})
	// Events are written by the operator's event writer, after the reconcile that records them: wait for it.
	waitFor(t, ctx, 2*time.Minute, "event ResumedIdleCluster on RayJob "+job.Name, func() (bool, string) {
		note := e.podEvent(t, ctx, ns, job.Name, "ResumedIdleCluster")
		return strings.Contains(note, ns+"/"+quiet.Name), "event note: " + note
	})
}

// waitIdleSuspended waits until rc is suspended for idleness: spec.suspend, the marker, IdleSuspended True, its
// pods gone.
func (e *env) waitIdleSuspended(t *testing.T, ctx context.Context, rc *rayv1.RayCluster) {
	t.Helper()
	waitFor(t, ctx, 5*time.Minute, "RayCluster "+rc.Name+" suspended for idleness", func() (bool, string) {
		var got rayv1.RayCluster
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(rc), &got); err != nil {
			return false, err.Error()
		}
		var pods corev1.PodList
		if err := e.cl.List(ctx, &pods, client.InNamespace(rc.Namespace), client.MatchingLabels{rayv1.LabelCluster: rc.Name}); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, idle.ConditionIdleSuspended)
		return ptr.Deref(got.Spec.Suspend, false) && got.Annotations[idle.AnnotationIdleSuspendedAt] != "" &&
				cond != nil && cond.Status == metav1.ConditionTrue && len(pods.Items) == 0,
			fmt.Sprintf("suspend %v, annotations %v, condition %+v, %d pods", ptr.Deref(got.Spec.Suspend, false), got.Annotations, cond, len(pods.Items))
	})
}
