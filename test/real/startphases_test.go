package real

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	summary := e.waitEventNote(t, ctx, ns, "RayCluster", rc.Name, startphases.ReasonSummary, 2*time.Minute)
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
	// The operator computed the summary from the same objects (through its cache).
	if want := "RayCluster " + startphases.Summary("started", &ct, startphases.RayReady); summary != want {
		t.Errorf("summary event %q, computed from the objects %q", summary, want)
	}
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

// sampleImage is the Ray image of the samples, as containerd on the real node names it.
const sampleImage = "docker.io/rayproject/ray:2.52.0"

// testStartPhasesColdWarm runs config/samples/rayjob.yaml twice on the real node: cold (its image removed from the
// node's containerd first, content and all, so the kubelet pulls it from the dev cluster's registry) and warm (the image there). Each
// run's StartPhases event on the RayJob names every step from scheduling to the job's run; the cold image pull is
// the longer. With MANTA_START_PHASES_OUT set, the two summaries are written there, one "<run>\t<note>" a line,
// for hack/phaseplot (docs/start-phases-rayjob.svg).
func testStartPhasesColdWarm(t *testing.T, ctx context.Context, e *env) {
	pulls := map[string]time.Duration{}
	var lines []string
	for _, run := range []string{"cold", "warm"} {
		if run == "cold" {
			e.removeNodeImage(t, ctx, sampleImage)
		}
		ns := e.namespace(t, ctx, "phases-"+run)
		var job rayv1.RayJob
		readSample(t, "rayjob.yaml", &job)
		job.Namespace = ns
		fitRayResources(job.Spec.RayClusterSpec)
		if err := e.cl.Create(ctx, &job); err != nil {
			t.Fatal(err)
		}
		summary := e.waitEventNote(t, ctx, ns, "RayJob", job.Name, startphases.ReasonSummary, 10*time.Minute)
		t.Logf("%s: %s", run, summary)
		pulled, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "Pulled").String()})
		if err != nil {
			t.Fatal(err)
		}
		pulledMessages := ""
		for _, ev := range pulled.Items {
			pulledMessages += fmt.Sprintf("\n%s Pulled %s: %s", ev.InvolvedObject.Name, ev.LastTimestamp.Format(time.TimeOnly), ev.Message)
		}
		t.Logf("%s run, the kubelet's Pulled events:%s", run, pulledMessages)
		total, steps, err := startphases.ParseSummary(summary)
		if err != nil {
			t.Fatal(err)
		}
		got := map[startphases.Phase]time.Duration{}
		for _, s := range steps {
			got[s.Phase] = s.Duration
		}
		// RUNNING is seen only by polling Ray: a short job may end between two polls, and its wait folds into the run.
		for _, p := range []startphases.Phase{startphases.Scheduled, startphases.ImagePulled, startphases.ContainersStarted, startphases.RayReady, startphases.Submitted, startphases.Finished} {
			if _, ok := got[p]; !ok {
				t.Errorf("%s run: the summary lacks the %s step: %q", run, p.Step(), summary)
			}
		}
		var sum time.Duration
		for _, d := range got {
			sum += d
		}
		if diff := sum - total; diff < -time.Duration(len(steps))*time.Second || diff > time.Duration(len(steps))*time.Second {
			t.Errorf("%s run: the steps add up to %s, the total is %s", run, sum, total)
		}
		pulls[run] = got[startphases.ImagePulled]
		if run == "cold" && !strings.Contains(pulledMessages, "Successfully pulled") {
			t.Errorf("cold run: the kubelet pulled nothing:%s", pulledMessages)
		}
		lines = append(lines, run+"\t"+summary)
		e.deleteNamespace(t, ctx, ns)
	}
	if pulls["cold"] <= pulls["warm"] {
		t.Errorf("the cold image pull took %s, the warm one %s", pulls["cold"], pulls["warm"])
	}
	if out := os.Getenv("MANTA_START_PHASES_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// removeNodeImage removes an image from the real node's containerd under every name it has there (the CRI adds
// the digest and the image ID beside the tag), and its content with it (--sync), so that the next pod pulls it whole.
// The exited containers of deleted pods go first: until the kubelet's garbage collection removes them they keep the
// image's unpacked layers, and a pull that finds the layers fetches nothing (CI of 66d86c9: the earlier step's
// containers were still there, the "cold" pull took 128 ms and the head found the image present).
func (e *env) removeNodeImage(t *testing.T, ctx context.Context, ref string) {
	t.Helper()
	// run returns ctr's standard output, which the callers parse; its standard error carries warnings (cgroup v1).
	run := func(args ...string) (string, string, error) {
		var stdout, stderr strings.Builder
		cmd := exec.CommandContext(ctx, filepath.Join(filepath.Dir(e.kubectl), "ctr"),
			append([]string{"--address", e.cluster.ContainerdSocket(), "-n", "k8s.io"}, args...)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	ctr := func(args ...string) string {
		out, errOut, err := run(args...)
		if err != nil {
			t.Fatalf("ctr %v: %v: %s%s", args, err, out, errOut)
		}
		return out
	}
	digest := e.containerdDigest(t, ctx, ref)
	if digest == "" {
		return // not on the node
	}
	var names []string
	for _, line := range strings.Split(ctr("images", "ls"), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[2] == digest {
			names = append(names, f[0])
		}
	}
	// No pod of the cluster may still run the image: the steps before deleted theirs, which may still be stopping.
	waitFor(t, ctx, 5*time.Minute, "no pod running "+ref, func() (bool, string) {
		var pods corev1.PodList
		if err := e.cl.List(ctx, &pods); err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			for _, c := range p.Spec.Containers {
				if strings.HasSuffix(ref, strings.TrimPrefix(c.Image, "docker.io/")) {
					return false, fmt.Sprintf("pod %s/%s (%s) runs it", p.Namespace, p.Name, p.Status.Phase)
				}
			}
		}
		return true, ""
	})
	var leftovers []string
	for _, name := range names {
		leftovers = append(leftovers, strings.Fields(ctr("containers", "ls", "-q", "image=="+name))...)
	}
	for _, id := range leftovers {
		// The task of an exited container may be gone already; a container with a running task is refused below.
		_, _, _ = run("tasks", "rm", id)
		ctr("containers", "rm", id)
	}
	t.Logf("removing %v from the node, and the %d containers of deleted pods that used it", names, len(leftovers))
	ctr(append([]string{"images", "rm", "--sync"}, names...)...)
	if left := e.containerdDigest(t, ctx, ref); left != "" {
		t.Fatalf("%s still on the node (%s)", ref, left)
	}
}

// waitEventNote waits for an event (events.k8s.io) of reason about the object of kind and name, and returns its note.
func (e *env) waitEventNote(t *testing.T, ctx context.Context, ns, kind, name, reason string, timeout time.Duration) string {
	t.Helper()
	var note string
	waitFor(t, ctx, timeout, reason+" event on "+kind+" "+name, func() (bool, string) {
		var l eventsv1.EventList
		if err := e.cl.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range l.Items {
			if ev.Regarding.Kind == kind && ev.Regarding.Name == name && ev.Reason == reason {
				note = ev.Note
				return true, ""
			}
			seen = append(seen, ev.Regarding.Kind+"/"+ev.Reason)
		}
		return false, fmt.Sprint(seen, " ", e.nsReport(ctx, ns))
	})
	return note
}
