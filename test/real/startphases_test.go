package real

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/startphases"
)

// testStartPhases: a small RayCluster (config/samples/raycluster.yaml with one worker) starts on the real kubelet,
// and its start phases are all there and in order: each pod's from its real conditions, container states and the
// kubelet's Pulled events, the cluster's from those and its status, computed by the functions the operator uses;
// and the operator's summary event on the RayCluster names the steps, the slowest marked.
func testStartPhases(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "startphases")
	var rc rayv1.RayCluster
	readSample(t, "raycluster.yaml", &rc)
	rc.Namespace = ns
	rc.Spec.WorkerGroupSpecs[0].Replicas = ptrTo(int32(1))
	fitRayResources(&rc.Spec)
	if err := e.cl.Create(ctx, &rc); err != nil {
		t.Fatal(err)
	}
	ready := e.waitClusterReady(t, ctx, &rc, 1)

	// The summary comes once the operator has seen the cluster ready.
	var summary string
	waitFor(t, ctx, 2*time.Minute, "the StartPhases event on the RayCluster", func() (bool, string) {
		var l eventsv1.EventList
		if err := e.cl.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range l.Items {
			if ev.Regarding.Kind == "RayCluster" && ev.Regarding.Name == rc.Name && ev.Reason == startphases.ReasonSummary {
				summary = ev.Note
				return ev.Type == corev1.EventTypeNormal, ev.Type
			}
			seen = append(seen, ev.Reason)
		}
		return false, fmt.Sprint(seen)
	})
	t.Logf("summary event: %s", summary)
	for _, step := range []string{"RayCluster started in ", "scheduling ", "image pull ", "container start ", "Ray start ", " (slowest)"} {
		if !strings.Contains(summary, step) {
			t.Errorf("summary %q lacks %q", summary, step)
		}
	}

	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: rayv1.LabelCluster + "=" + rc.Name})
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "Pulled").String()})
	if err != nil {
		t.Fatal(err)
	}
	var observed []startphases.PodOf
	for i := range pods.Items {
		p := &pods.Items[i]
		var pulls []startphases.Pull
		for j := range pulled.Items {
			if ev := &pulled.Items[j]; ev.InvolvedObject.UID == p.UID {
				pulls = append(pulls, startphases.PullFromEvent(ev))
				t.Logf("%s: Pulled %s: %s", p.Name, ev.LastTimestamp.Format(time.TimeOnly), ev.Message)
			}
		}
		pt := startphases.PodTimes(p, pulls)
		checkPhases(t, "pod "+p.Name, &pt)
		observed = append(observed, startphases.PodOf{Name: p.Name, Times: pt})
	}
	ct, _ := startphases.ClusterTimes(ready, observed)
	checkPhases(t, "RayCluster", &ct)
	e.deleteNamespace(t, ctx, ns)
}

// checkPhases: every phase up to Ray ready reached, none before the one it follows (to the second: the API
// server's times are whole seconds), and a table of them in the log.
func checkPhases(t *testing.T, what string, pt *startphases.Times) {
	t.Helper()
	var b strings.Builder
	prev := pt.Created
	for _, p := range []startphases.Phase{startphases.Scheduled, startphases.ImagePulled, startphases.ContainersStarted, startphases.RayReady} {
		if !pt.Has(p) {
			t.Errorf("%s: phase %s not reached", what, p)
			continue
		}
		if pt.At[p].Before(prev.Truncate(time.Second)) {
			t.Errorf("%s: %s at %s, before the phase it follows (%s)", what, p, pt.At[p].Format(time.TimeOnly), prev.Format(time.TimeOnly))
		}
		prev = pt.At[p]
		fmt.Fprintf(&b, " %s +%s (%s %s);", p, startphases.Round(pt.Since(p)), p.Step(), startphases.Round(pt.StepOf(p)))
	}
	t.Logf("%s:%s", what, b.String())
}
