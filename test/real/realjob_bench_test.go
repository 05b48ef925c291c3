package real

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/sys/liveproc"
	"github.com/manta-dev/manta/internal/testutil"
)

// BenchmarkRealJob times config/samples/rayjob.yaml (its Ray containers' CPU requests at 500m, fitRayResources)
// from its create to its end on the real node, under Manta's operator and under KubeRay v1.5.0's
// (bin/kuberay-operator), trials alternated. `make bench-realjob` runs it; test/bench/README.md has the details.
// One dev cluster with its real node serves the whole run, on Manta's CRDs (KubeRay-compatible: KubeRay runs on
// them in test/swap too); one operator runs at a time, as its own process on this machine with
// --use-kubernetes-proxy, started before each trial and stopped after it. Each trial has a namespace of its own,
// deleted, and its pods gone, before the next starts. A cold trial first removes the sample's image from the node
// (content and all); a warm one has it there. Settings come from the environment:
//
//	MANTA_REALJOB_ROUNDS       rounds (default 3); each runs every image kind, and in it every contender, the
//	                           contenders' order rotated by one each round
//	MANTA_REALJOB_CONTENDERS   default manta,kuberay; manta-early is Manta with the sample opted into
//	                           manta.dev/submit-before-cluster-ready
//	MANTA_REALJOB_IMAGE        default warm,cold
//	MANTA_REALJOB_JSON         where to write the trials (default <repo>/bench-realjob.json)
func BenchmarkRealJob(b *testing.B) {
	rounds := 3
	if s := os.Getenv("MANTA_REALJOB_ROUNDS"); s != "" {
		if _, err := fmt.Sscan(s, &rounds); err != nil || rounds < 1 {
			b.Fatalf("MANTA_REALJOB_ROUNDS=%q: want a positive number", s)
		}
	}
	names := strings.Split(envOr("MANTA_REALJOB_CONTENDERS", "manta,kuberay"), ",")
	images := strings.Split(envOr("MANTA_REALJOB_IMAGE", "warm,cold"), ",")
	for _, im := range images {
		if im != "warm" && im != "cold" {
			b.Fatalf("MANTA_REALJOB_IMAGE: %q is neither warm nor cold", im)
		}
	}
	root := testutil.MustRepoRoot(b)
	bins := map[string]string{}
	for _, n := range names {
		switch n {
		case "manta", "manta-early":
			bin, err := testutil.BuildMantaTo(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			bins[n] = bin
		case "kuberay":
			bins[n] = filepath.Join(root, "bin", "kuberay-operator")
			if _, err := os.Stat(bins[n]); err != nil {
				b.Fatalf("%v (hack/build-kuberay.sh, make tools, builds it)", err)
			}
		default:
			b.Fatalf("MANTA_REALJOB_CONTENDERS: unknown contender %q (manta, manta-early, kuberay)", n)
		}
	}
	out := envOr("MANTA_REALJOB_JSON", filepath.Join(root, "bench-realjob.json"))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	e := startCluster(b, ctx)
	wc, err := client.NewWithWatch(e.cluster.RESTConfig(), client.Options{Scheme: e.cl.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	var trials []realJobTrial
	for i := 0; i < b.N; i++ {
		for round := range rounds {
			for _, image := range images {
				for _, name := range rotated(names, round) {
					tr := e.runRealJobTrial(b, ctx, wc, name, bins[name], image, round)
					trials = append(trials, tr)
					// On stdout: testing keeps only the first 10 lines of a benchmark's log.
					fmt.Fprintf(os.Stdout, "%s %s, %s image, round %d: %s / %s, operator %.2f CPU-s, phases %s\n",
						time.Now().Format(time.TimeOnly), name, image, round, tr.JobStatus, tr.DeploymentStatus,
						tr.OperatorCPUSeconds, phaseLine(tr.Phases))
				}
			}
		}
	}
	table := realJobTable(trials)
	fmt.Fprintf(os.Stdout, "\n%s\n", table)
	data, err := json.MarshalIndent(map[string]any{
		"setup": "one dev cluster with its real node for the whole run, on Manta's CRDs; each operator a process " +
			"with --use-kubernetes-proxy, one at a time; phases are the arrival times of watch events, in seconds " +
			"since the RayJob's create (Ray's start and end: status.rayJobInfo, whole seconds)",
		"trials": trials, "table": table,
	}, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "results written to %s\n", out)
}

// runRealJobTrial runs the sample RayJob once under the contender's operator, started for it and stopped after.
func (e *env) runRealJobTrial(b *testing.B, ctx context.Context, wc client.WithWatch, contender, bin, image string, round int) realJobTrial {
	b.Helper()
	switch image {
	case "cold":
		e.removeNodeImage(b, ctx, sampleImage)
		e.waitNodeLacks(b, ctx, sampleImage)
	case "warm":
		e.ensureNodeImage(b, ctx, sampleImage)
	}
	op := startRealJobOperator(b, e.cluster, contender, bin)
	defer op.stop()
	op.waitStarted(b, ctx)

	ns := e.namespace(b, ctx, fmt.Sprintf("realjob-%s-%s-%d", contender, image, round))
	var job rayv1.RayJob
	readSample(b, "rayjob.yaml", &job)
	job.Namespace = ns
	fitRayResources(job.Spec.RayClusterSpec)
	if contender == "manta-early" {
		// Manta's opt-in: the submission does not wait for the cluster to be ready (docs/user-guide.md).
		job.Annotations = map[string]string{rayjob.AnnotationSubmitBeforeClusterReady: "true"}
	}
	workers := 0
	for _, g := range job.Spec.RayClusterSpec.WorkerGroupSpecs {
		if g.Replicas != nil {
			workers += int(*g.Replicas)
		}
	}

	rec := &recorder{done: make(chan struct{})}
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	for _, list := range []client.ObjectList{&corev1.PodList{}, &batchv1.JobList{}, &rayv1.RayJobList{}} {
		w, err := wc.Watch(wctx, list, client.InNamespace(ns))
		if err != nil {
			b.Fatal(err)
		}
		go rec.follow(w)
	}

	cpu0 := liveproc.CPUSeconds(op.pid())
	applied := time.Now()
	if err := e.cl.Create(ctx, &job); err != nil {
		b.Fatal(err)
	}
	select {
	case <-rec.done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("%s, %s image: RayJob not finished after 10 minutes; %s; operator log:\n%s", contender, image,
			e.nsReport(ctx, ns), tail(op.log, 30))
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}
	cpu := liveproc.CPUSeconds(op.pid()) - cpu0
	stopWatches()
	obs, last := rec.snapshot()
	tr := realJobTrial{Contender: contender, Round: round, Image: image, Namespace: ns, AppliedAt: applied,
		Phases: realJobPhaseSeconds(applied, obs, workers), OperatorCPUSeconds: cpu,
		JobStatus: string(last.Status.JobStatus), DeploymentStatus: string(last.Status.JobDeploymentStatus)}
	if last.Status.JobStatus != rayv1.JobStatusSucceeded {
		b.Errorf("%s, %s image: the RayJob ended %s / %s: %s", contender, image, last.Status.JobStatus,
			last.Status.JobDeploymentStatus, last.Status.Message)
	}
	// With its operator still running, so that the finalizers it put on the RayJob and its cluster are removed.
	e.deleteNamespace(b, ctx, ns)
	waitFor(b, ctx, 3*time.Minute, "namespace "+ns+" gone", func() (bool, string) {
		_, err := e.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	return tr
}

// recorder collects what the watches of a trial's namespace deliver, stamped on arrival, and closes done once
// the RayJob's deployment is terminal (Complete or Failed).
type recorder struct {
	mu   sync.Mutex
	obs  []observation
	last *rayv1.RayJob
	done chan struct{}
	once sync.Once
}

func (r *recorder) follow(w watch.Interface) {
	defer w.Stop()
	for ev := range w.ResultChan() {
		at := time.Now()
		obj, ok := ev.Object.(client.Object)
		if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
			continue
		}
		r.mu.Lock()
		r.obs = append(r.obs, observation{at: at, obj: obj})
		if j, ok := obj.(*rayv1.RayJob); ok {
			r.last = j
			if rayv1.IsJobDeploymentTerminal(j.Status.JobDeploymentStatus) {
				r.once.Do(func() { close(r.done) })
			}
		}
		r.mu.Unlock()
	}
}

func (r *recorder) snapshot() ([]observation, *rayv1.RayJob) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.obs), r.last
}

// ensureNodeImage pulls ref onto the real node when it is not there, with a pod that runs the image's true and
// ends: the dev cluster's containerd starts empty, and a warm trial must find the image.
func (e *env) ensureNodeImage(b *testing.B, ctx context.Context, ref string) {
	b.Helper()
	if e.containerdDigest(b, ctx, ref) != "" {
		return
	}
	start := time.Now()
	ns := e.namespace(b, ctx, "realjob-warmup")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "pull", Image: sampleImageAsWritten, Command: []string{"true"}}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, ctx, 10*time.Minute, "pod pulling "+ref+" ends", func() (bool, string) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase == corev1.PodFailed {
			b.Fatalf("the pod pulling %s failed: %s", ref, e.podReport(ctx, ns, pod.Name))
		}
		return p.Status.Phase == corev1.PodSucceeded, e.podReport(ctx, ns, pod.Name)
	})
	e.deleteNamespace(b, ctx, ns)
	waitFor(b, ctx, 3*time.Minute, "namespace "+ns+" gone", func() (bool, string) {
		_, err := e.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	b.Logf("pulled %s onto the node for the warm trials in %s", ref, time.Since(start).Round(time.Second))
}

// realJobOperator is one operator process, Manta's or KubeRay's, with its log in the dev cluster's log directory.
type realJobOperator struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startRealJobOperator starts the contender's operator as a platform engineer runs it, watching every namespace,
// at its defaults but for leader election (one replica), where it listens, and --use-kubernetes-proxy: it runs
// on this machine, outside the node's network namespace, and reaches Ray heads through the API server. Both
// operators take the same flags for that (as in test/swap).
func startRealJobOperator(b *testing.B, c *devcluster.Cluster, name, bin string) *realJobOperator {
	b.Helper()
	ports, err := devcluster.FreePorts(2)
	if err != nil {
		b.Fatal(err)
	}
	metrics := fmt.Sprintf("--metrics-addr=127.0.0.1:%d", ports[0])
	probes := fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1])
	args := []string{"operator", "--enable-leader-election=false", metrics, "--metrics-secure=false", probes, "--use-kubernetes-proxy"}
	if name == "kuberay" {
		args = []string{"--kubeconfig=" + c.Kubeconfig, "--enable-leader-election=false", metrics, probes, "--use-kubernetes-proxy"}
	}
	logPath := filepath.Join(c.Dir(), "logs", fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	cmd.Stdout, cmd.Stderr = f, f
	// A killed benchmark takes the operator with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		b.Fatalf("start %s (%s): %v", name, bin, err)
	}
	op := &realJobOperator{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(op.done) }()
	b.Logf("%s started: pid %d, log %s", name, cmd.Process.Pid, logPath)
	return op
}

func (o *realJobOperator) pid() int { return o.cmd.Process.Pid }

// waitStarted waits until the operator's RayJob controller runs its workers, which controller-runtime starts once
// the caches have synced (its "Starting workers" log line names the controller), so that no trial counts an
// operator's start-up.
func (o *realJobOperator) waitStarted(b *testing.B, ctx context.Context) {
	b.Helper()
	waitFor(b, ctx, 2*time.Minute, o.name+" runs its RayJob workers", func() (bool, string) {
		select {
		case <-o.done:
			b.Fatalf("%s exited: %v; log tail:\n%s", o.name, o.cmd.ProcessState, tail(o.log, 30))
		default:
		}
		data, err := os.ReadFile(o.log)
		if err != nil {
			return false, err.Error()
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "Starting workers") && strings.Contains(strings.ToLower(line), "rayjob") {
				return true, ""
			}
		}
		return false, "log tail:\n" + tail(o.log, 10)
	})
}

// stop ends the operator as Kubernetes ends a pod: SIGTERM, then SIGKILL after 30 s.
func (o *realJobOperator) stop() {
	liveproc.Terminate(o.cmd.Process, o.done, 30*time.Second)
}

// rotated is names rotated left by r, so that no contender always runs first in a round.
func rotated(names []string, r int) []string {
	k := r % len(names)
	return append(slices.Clone(names[k:]), names[:k]...)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// phaseLine is a trial's phases in run order, for the progress log.
func phaseLine(phases map[string]float64) string {
	var parts []string
	for _, p := range realJobPhases {
		if v, ok := phases[p.name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1fs", p.name, v))
		}
	}
	return strings.Join(parts, ", ")
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
