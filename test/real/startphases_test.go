package real

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
	"github.com/manta-dev/manta/internal/controller/startphases"
	"github.com/manta-dev/manta/internal/devcluster"
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

// sampleImage is the Ray image of the samples, as containerd on the real node names it; the dev cluster's registry
// serves it from sampleRepo.
const (
	sampleImage          = "docker.io/rayproject/ray:2.52.0"
	sampleImageAsWritten = "rayproject/ray:2.52.0" // in the samples and the kubelet's events
	sampleRepo           = "rayproject/ray"
)

// testStartPhasesColdWarmPrepulled runs config/samples/rayjob.yaml three times on the real node: cold (its image
// removed from the node's containerd first, content and all, so the kubelet pulls it from the dev cluster's
// registry), warm (the image there), and cold again with the RayJob annotated manta.dev/prepull-images, so that the
// RayCluster it creates gets an ImagePullJob for its image, which must pull it onto the node. Each run's StartPhases
// event on the RayJob names every step from scheduling to the job's run; the cold image pull is longer than the
// warm one. The pre-pulled run is not asserted faster: on one node the Ray pods and the puller fetch the same image
// at once, so there is nothing for the prepull to win. With MANTA_START_PHASES_OUT set, the three summaries are
// written there, one "<run>\t<note>" a line, for hack/phaseplot (docs/start-phases-rayjob.svg).
func testStartPhasesColdWarmPrepulled(t *testing.T, ctx context.Context, e *env) {
	runs := []struct {
		label, ns     string
		cold, prepull bool
	}{
		{"cold", "phases-cold", true, false},
		{"warm", "phases-warm", false, false},
		{"cold, pre-pulled", "phases-prepulled", true, true},
	}
	// Prepull's puller pods start from Manta's own image, which the dev cluster's registry serves only once pushed.
	e.pushPullerImage(t, ctx, t.TempDir())
	pulls := map[string]time.Duration{}
	var lines []string
	for _, run := range runs {
		if run.cold {
			e.removeNodeImage(t, ctx, sampleImage)
		}
		if run.cold && run.prepull {
			// Prepull (IfNotPresent) counts a node that lists the image in status.images as done without a puller:
			// the kubelet reports containerd's images with a lag, and a node still listing it would get no pull.
			e.waitNodeLacks(t, ctx, sampleImage)
		}
		ns := e.namespace(t, ctx, run.ns)
		mark := len(e.cluster.RegistryRequests())
		var job rayv1.RayJob
		readSample(t, "rayjob.yaml", &job)
		job.Namespace = ns
		fitRayResources(job.Spec.RayClusterSpec)
		if run.prepull {
			job.Annotations = map[string]string{imagepulljob.AnnotationPrepullImages: "true"}
		}
		if err := e.cl.Create(ctx, &job); err != nil {
			t.Fatal(err)
		}
		var prepullJob string
		if run.prepull {
			// Before the summary: the job's cluster, and the ImagePullJob it owns, go 60 s after the job ends.
			prepullJob = e.waitPrepulled(t, ctx, &job)
		}
		summary := e.waitEventNote(t, ctx, ns, "RayJob", job.Name, startphases.ReasonSummary, 10*time.Minute)
		t.Logf("%s: %s", run.label, summary)
		pullEvs := e.pullEvents(t, ctx, ns)
		var pulling, pulledMessages string
		for _, ev := range pullEvs {
			pulling += fmt.Sprintf("\n%s %s %s: %s", eventTime(&ev).Format(time.TimeOnly), ev.InvolvedObject.Name, ev.Reason, ev.Message)
			if ev.Reason == "Pulled" {
				pulledMessages += "\n" + ev.Message
			}
		}
		t.Logf("%s run, the kubelet's Pulling and Pulled events:%s", run.label, pulling)
		if run.prepull && !slices.ContainsFunc(pullEvs, func(ev corev1.Event) bool {
			return ev.Reason == "Pulled" && strings.HasPrefix(ev.InvolvedObject.Name, prepullJob+"-") && strings.Contains(ev.Message, `"`+sampleImageAsWritten+`"`)
		}) {
			t.Errorf("%s run: no Pulled event of %s for a puller pod of ImagePullJob %s:%s", run.label, sampleImageAsWritten, prepullJob, pulling)
		}
		// How often the registry served the image's layers: once when the node's concurrent pulls shared the fetch.
		t.Logf("%s run, the registry's requests for %s: %s", run.label, sampleRepo,
			summarize(registryRequestsOf(e.cluster.RegistryRequests()[mark:], sampleRepo)))
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
				t.Errorf("%s run: the summary lacks the %s step: %q", run.label, p.Step(), summary)
			}
		}
		var sum time.Duration
		for _, d := range got {
			sum += d
		}
		if diff := sum - total; diff < -time.Duration(len(steps))*time.Second || diff > time.Duration(len(steps))*time.Second {
			t.Errorf("%s run: the steps add up to %s, the total is %s", run.label, sum, total)
		}
		pulls[run.label] = got[startphases.ImagePulled]
		if run.cold && !strings.Contains(pulledMessages, "Successfully pulled") {
			t.Errorf("%s run: the kubelet pulled nothing:%s", run.label, pulledMessages)
		}
		lines = append(lines, run.label+"\t"+summary)
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

// waitPrepulled waits for the RayJob's RayCluster to get its prepull ImagePullJob, one for the sample's one image
// on the real node alone (the kwok nodes' taint keeps Ray pods off them), and for that job to have the image there.
// A prepull job never completes (new nodes are pulled too), so "done" is its node counted succeeded.
func (e *env) waitPrepulled(t *testing.T, ctx context.Context, job *rayv1.RayJob) string {
	t.Helper()
	image := job.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image
	var cluster string
	waitFor(t, ctx, 2*time.Minute, "RayJob "+job.Name+" names its RayCluster", func() (bool, string) {
		var got rayv1.RayJob
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
			return false, err.Error()
		}
		cluster = got.Status.RayClusterName
		return cluster != "", fmt.Sprintf("status %+v", got.Status)
	})
	start := time.Now()
	key := client.ObjectKey{Namespace: job.Namespace, Name: imagepulljob.PrepullJobName(cluster, image)}
	var pj mantav1alpha1.ImagePullJob
	waitFor(t, ctx, 10*time.Minute, "prepull ImagePullJob "+key.Name+" of "+image+" succeeded on the real node", func() (bool, string) {
		var l mantav1alpha1.ImagePullJobList
		if err := e.cl.List(ctx, &l, client.InNamespace(job.Namespace)); err != nil {
			return false, err.Error()
		}
		if len(l.Items) != 1 || l.Items[0].Name != key.Name {
			var names []string
			for _, j := range l.Items {
				names = append(names, j.Name+" ("+j.Spec.Image+")")
			}
			return false, fmt.Sprintf("ImagePullJobs %v, want %s alone", names, key.Name)
		}
		pj = l.Items[0]
		s := pj.Status
		if s.Failed != 0 {
			t.Fatalf("prepull ImagePullJob %s failed: %+v", pj.Name, s)
		}
		done := s.Desired == 1 && s.Succeeded == 1 && len(s.SucceededNodes) == 1 && s.SucceededNodes[0] == devcluster.RealNodeName
		return done, fmt.Sprintf("status %+v; %s", s, e.nsReport(ctx, job.Namespace))
	})
	if ref := metav1.GetControllerOf(&pj); ref == nil || ref.Kind != "RayCluster" || ref.Name != cluster {
		t.Errorf("prepull ImagePullJob %s is controlled by %+v, want RayCluster %s", pj.Name, ref, cluster)
	}
	if pj.Spec.Image != image || pj.Annotations[imagepulljob.AnnotationPrepullImage] != image {
		t.Errorf("prepull ImagePullJob %s pulls %q (annotated %q), want %q", pj.Name, pj.Spec.Image, pj.Annotations[imagepulljob.AnnotationPrepullImage], image)
	}
	t.Logf("prepull ImagePullJob %s: %d of %d nodes have %s (%s), seen %s after the RayCluster was named",
		pj.Name, pj.Status.Succeeded, pj.Status.Desired, image, pj.Status.Message, time.Since(start).Round(time.Second))
	return pj.Name
}

// waitNodeLacks waits until the real node no longer lists ref in status.images.
func (e *env) waitNodeLacks(t testing.TB, ctx context.Context, ref string) {
	t.Helper()
	start := time.Now()
	waitFor(t, ctx, 3*time.Minute, "node "+devcluster.RealNodeName+" no longer lists "+ref, func() (bool, string) {
		var n corev1.Node
		if err := e.cl.Get(ctx, client.ObjectKey{Name: devcluster.RealNodeName}, &n); err != nil {
			return false, err.Error()
		}
		for _, img := range n.Status.Images {
			if slices.Contains(img.Names, ref) {
				return false, fmt.Sprintf("listed as %v", img.Names)
			}
		}
		return true, ""
	})
	t.Logf("node status stopped listing %s %s after its removal", ref, time.Since(start).Round(time.Second))
}

// pullEvents returns the kubelet's Pulling and Pulled events in ns in time order: with the puller's pod beside the
// Ray pods, they show who started to fetch first, and each pull's time with its wait.
func (e *env) pullEvents(t *testing.T, ctx context.Context, ns string) []corev1.Event {
	t.Helper()
	evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var items []corev1.Event
	for _, ev := range evs.Items {
		if ev.Reason == "Pulling" || ev.Reason == "Pulled" {
			items = append(items, ev)
		}
	}
	sort.SliceStable(items, func(i, j int) bool { return eventTime(&items[i]).Before(eventTime(&items[j])) })
	return items
}

// eventTime is when the event happened: the kubelet's recorder stamps lastTimestamp (to the second), an events.k8s.io
// recorder eventTime.
func eventTime(ev *corev1.Event) time.Time {
	if !ev.LastTimestamp.IsZero() {
		return ev.LastTimestamp.Time
	}
	return ev.EventTime.Time
}

// removeNodeImage removes an image from the real node's containerd under every name it has there (the CRI adds
// the digest and the image ID beside the tag), and its content with it (--sync), so that the next pod pulls it whole.
// The exited containers of deleted pods go first: until the kubelet's garbage collection removes them they keep the
// image's unpacked layers, and a pull that finds the layers fetches nothing (CI of 66d86c9: the earlier step's
// containers were still there, the "cold" pull took 128 ms and the head found the image present).
func (e *env) removeNodeImage(t testing.TB, ctx context.Context, ref string) {
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
