package real

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// docSection is a section of a Markdown file, under the level-2 heading "## <heading>", its subsections included.
type docSection struct{ file, heading string }

// The sections TestDocsQuickStart runs.
var (
	quickStart          = docSection{"README.md", "Quick start"}
	userGuideDevCluster = docSection{"docs/user-guide.md", "The dev cluster: `make run`"}
)

// TestDocsQuickStart types the README's Quick start and the user guide's dev-cluster steps as a reader would: the
// ```sh blocks of each section, read from the Markdown on every run so the docs cannot drift from what works, each
// line run as written by one bash in a copy of the checkout, `make run` being `manta dev` started there. The
// sample's RayCluster must turn ready with every pod Running on the real node (the Quick start once left a worker
// Pending for "Insufficient cpu" on a 2-CPU machine), and the user guide's RayJob must succeed there.
func TestDocsQuickStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	root := testutil.MustRepoRoot(t)
	if err := devcluster.RealNodeSupport(filepath.Join(root, "bin")); err != nil {
		t.Fatalf("this machine cannot run the real node: %v", err)
	}
	checkMakeRun(t, root)

	t.Run(quickStart.file, func(t *testing.T) {
		d := runDocSection(t, root, quickStart)
		seen := d.watchSampleCluster(t, ctx)
		d.run(t, ctx)
		d.waitSampleCluster(t, ctx, seen, "the Quick start's RayCluster ready on the real node")
		// The Quick start leaves the cluster up: it must still be so.
		var rc rayv1.RayCluster
		if err := d.e.cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: "raycluster-sample"}, &rc); err != nil || rc.Status.State != rayv1.Ready {
			t.Errorf("RayCluster raycluster-sample at the end: state %q (%v); %s", rc.Status.State, err, d.e.nsReport(ctx, "default"))
		}
		d.stop(t, ctx)
	})

	t.Run(userGuideDevCluster.file, func(t *testing.T) {
		d := runDocSection(t, root, userGuideDevCluster)
		seen := d.watchSampleCluster(t, ctx)
		out := d.run(t, ctx)
		d.waitSampleCluster(t, ctx, seen, "the user guide's RayCluster ready on the real node before it deletes it")
		var job rayv1.RayJob
		if err := d.e.cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: "rayjob-sample"}, &job); err != nil {
			t.Fatal(err)
		}
		if job.Status.JobStatus != rayv1.JobStatusSucceeded || job.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusComplete {
			t.Errorf("RayJob rayjob-sample: %s / %s: %s", job.Status.JobStatus, job.Status.JobDeploymentStatus, job.Status.Message)
		}
		pods, err := d.e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "job-name=rayjob-sample"})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("the submitter's pods: %v; %s", err, d.e.nsReport(ctx, "default"))
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != devcluster.RealNodeName || p.Status.Phase != corev1.PodSucceeded {
				t.Errorf("submitter pod %s: %s, want Succeeded on %s", p.Name, d.e.podReport(ctx, "default", p.Name), devcluster.RealNodeName)
			}
		}
		// `kubectl logs job/rayjob-sample` printed the entrypoint's ray.cluster_resources(): a CPU each from the
		// head and the worker, so Ray ran in both.
		if !strings.Contains(out, "'CPU': 2.0") {
			t.Errorf("the steps' output lacks the entrypoint's output ('CPU': 2.0)")
		}
		d.stop(t, ctx)
	})
}

// checkMakeRun: the tests start `manta dev` where the docs say `make run`, which holds only while that is all
// `make run` runs once it has built what it needs.
func checkMakeRun(t *testing.T, root string) {
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var recipe []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "run:"):
			in = true
		case in && strings.HasPrefix(line, "\t"):
			recipe = append(recipe, strings.TrimSpace(line))
		case in:
			in = false
		}
	}
	if !slices.Equal(recipe, []string{"$(BIN)/manta dev"}) {
		t.Fatalf("make run's recipe is %q, not `$(BIN)/manta dev`: start what it runs in TestDocsQuickStart", recipe)
	}
}

// TestDocSectionsRunnable checks in a moment what TestDocsQuickStart needs of the docs' sections before it starts a
// cluster: each has shell lines, `make run` first (still just `manta dev`), and every file a line applies exists.
func TestDocSectionsRunnable(t *testing.T) {
	root := testutil.MustRepoRoot(t)
	checkMakeRun(t, root)
	for _, sec := range []docSection{quickStart, userGuideDevCluster} {
		lines := sectionScript(t, root, sec)
		for _, l := range lines {
			f := strings.Fields(commandOf(l))
			if i := slices.Index(f, "-f"); i > 0 && i+1 < len(f) && f[0] == "kubectl" {
				if _, err := os.Stat(filepath.Join(root, f[i+1])); err != nil {
					t.Errorf("%s: %q: %v", sec.file, l, err)
				}
			}
		}
	}
}

// sectionScript returns the section's shell lines after its first, `make run`.
func sectionScript(t *testing.T, root string, sec docSection) []string {
	t.Helper()
	lines := docShellLines(t, filepath.Join(root, sec.file), sec.heading)
	if len(lines) < 2 || commandOf(lines[0]) != "make run" {
		t.Fatalf("%s, section %q: want `make run` and the steps after it, have %q", sec.file, sec.heading, lines)
	}
	return lines[1:]
}

// docRun is one section's steps on its own `manta dev`.
type docRun struct {
	docSection
	dir    string   // the copy of the checkout the steps run in
	script []string // the lines after `make run`, as written
	dev    *mantaDev
	e      *env         // clients of the dev cluster, for the test's own checks
	cfg    *rest.Config // the dev cluster's, for the test's own watches
}

// runDocSection reads the section's steps and starts `manta dev` for them, with its default flags as `make run`
// does, in a copy of the checkout: the checkout's entries linked, so the steps find bin/ and config/ at $PWD, and a
// .manta of its own, so a developer's `make run` in the checkout keeps its kubeconfig.
func runDocSection(t *testing.T, root string, sec docSection) *docRun {
	t.Helper()
	d := &docRun{docSection: sec, dir: t.TempDir(), script: sectionScript(t, root, sec)}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if en.Name() == ".manta" {
			continue
		}
		if err := os.Symlink(filepath.Join(root, en.Name()), filepath.Join(d.dir, en.Name())); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	d.dev = startMantaDev(t, d.dir)
	t.Logf("%s: `make run` (manta dev in %s) ready in %s", d.file, d.dir, time.Since(start).Round(time.Second))
	if !strings.Contains(d.dev.stdout.String(), "real node "+devcluster.RealNodeName) {
		t.Fatalf("manta dev runs no real node:\n%s%s", d.dev.stdout, d.dev.stderr)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(d.dir, ".manta", "dev", "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	d.cfg = cfg
	d.e = &env{cs: kubernetes.NewForConfigOrDie(cfg)}
	if d.e.cl, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	return d
}

// run runs the steps after `make run` as one bash script in the checkout's copy, so that an export holds for the
// lines after it, stopping at the first that fails; bash echoes each line as written before it runs it. It returns
// what the steps printed. The environment is the test's without KUBECONFIG: the steps' own export must lead kubectl.
func (d *docRun) run(t *testing.T, ctx context.Context) string {
	t.Helper()
	script := "set -e -o pipefail -v\n" + strings.Join(d.script, "\n") + "\n"
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-c", script)
	cmd.Dir = d.dir
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "PWD=")
	}), "PWD="+d.dir)
	// A timed-out step's kubectl goes with its bash.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out := &lockedBuffer{}
	logw := &lineLogger{t: t, prefix: d.file + ": "}
	// One writer for both: exec.Cmd then writes from one goroutine, in the order bash wrote.
	cmd.Stdout = io.MultiWriter(out, logw)
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	err := cmd.Run()
	logw.flush()
	if err != nil {
		t.Fatalf("%s, section %q: the steps failed after %s: %v; %s", d.file, d.heading, time.Since(start).Round(time.Second), err, d.e.nsReport(ctx, "default"))
	}
	t.Logf("%s: the steps after `make run` took %s", d.file, time.Since(start).Round(time.Second))
	return out.String()
}

// watchSampleCluster watches, until the test ends, for config/samples/raycluster.yaml's cluster in state ready with
// all its pods (the head and every worker at its replicas) Running and Ready on the real node: some steps go on to
// delete it a few seconds after it turns ready. The state is checked on every watch event of the cluster and its
// pods, against the informers' stores. A poll once a second, each miss costing a report of several requests through
// clients limited to 5 a second, can take longer on a loaded machine than the user guide's window between ready and
// its delete (the `ray status` it runs there): one CI run saw no poll land in it. The returned value holds "" once that was seen, and
// until then why not.
func (d *docRun) watchSampleCluster(t *testing.T, ctx context.Context) *atomic.Value {
	t.Helper()
	var rc rayv1.RayCluster
	readSample(t, "raycluster.yaml", &rc)
	want := 1
	for _, g := range rc.Spec.WorkerGroupSpecs {
		want += int(ptr.Deref(g.Replicas, 0))
	}
	seen := &atomic.Value{}
	seen.Store("not seen yet")
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := crcache.New(d.cfg, crcache.Options{Scheme: scheme, DefaultNamespaces: map[string]crcache.Config{"default": {}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	var mu sync.Mutex
	check := func() {
		mu.Lock()
		defer mu.Unlock()
		if seen.Load().(string) == "" {
			return
		}
		ok, why := sampleClusterOnRealNode(ctx, c, rc.Name, want)
		if ok {
			why = ""
		}
		seen.Store(why)
	}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { check() },
		UpdateFunc: func(any, any) { check() },
		DeleteFunc: func(any) { check() },
	}
	for _, obj := range []client.Object{&rayv1.RayCluster{}, &corev1.Pod{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		defer close(done)
		if err := c.Start(ctx); err != nil && ctx.Err() == nil {
			seen.Store("the watch of the sample cluster ended: " + err.Error())
		}
	}()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the watch of the sample cluster did not sync")
	}
	return seen
}

// waitSampleCluster waits for watchSampleCluster to have seen the cluster ready; the steps usually waited for it
// already.
func (d *docRun) waitSampleCluster(t *testing.T, ctx context.Context, seen *atomic.Value, what string) {
	t.Helper()
	waitFor(t, ctx, 2*time.Minute, what, func() (bool, string) {
		why := seen.Load().(string)
		if why == "" {
			return true, ""
		}
		// The watcher's reason is short; the namespace's pods and events say why (off the watcher's path).
		return false, why + "; " + d.e.nsReport(ctx, "default")
	})
}

// sampleClusterOnRealNode says whether r holds the cluster name in state ready with its want pods Running and Ready
// on the real node, and if not, why.
func sampleClusterOnRealNode(ctx context.Context, r client.Reader, name string, want int) (bool, string) {
	var rc rayv1.RayCluster
	if err := r.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &rc); err != nil {
		return false, err.Error()
	}
	if rc.Status.State != rayv1.Ready {
		return false, fmt.Sprintf("state %q", rc.Status.State)
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{rayv1.LabelCluster: name}); err != nil {
		return false, err.Error()
	}
	if len(pods.Items) != want {
		return false, fmt.Sprintf("%d pods, want %d", len(pods.Items), want)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || !testutil.PodReady(&p) || p.Spec.NodeName != devcluster.RealNodeName {
			return false, fmt.Sprintf("pod %s: phase %s, ready %v, node %q", p.Name, p.Status.Phase, testutil.PodReady(&p), p.Spec.NodeName)
		}
	}
	return true, ""
}

// stop ends `manta dev` as Ctrl-C would, and checks that its real node left nothing behind.
func (d *docRun) stop(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := d.dev.interrupt(); err != nil {
		t.Errorf("manta dev after SIGINT: %v", err)
	}
	checkNodeGone(t, ctx, d.dev.dir, strconv.Itoa(d.dev.slot))
}

// docShellLines returns the lines of the ```sh blocks in the section of the Markdown file under the level-2
// heading "## <heading>" (its subsections included), in order.
func docShellLines(t *testing.T, file, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	found, inSection, inBlock := false, false, false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case inBlock && strings.TrimSpace(line) == "```":
			inBlock = false
		case inBlock:
			if strings.TrimSpace(line) != "" {
				lines = append(lines, line)
			}
		case strings.HasPrefix(line, "# ") || strings.HasPrefix(line, "## "):
			inSection = line == "## "+heading
			found = found || inSection
		case inSection && strings.TrimSpace(line) == "```sh":
			inBlock = true
		}
	}
	if !found {
		t.Fatalf("%s has no section %q", file, heading)
	}
	return lines
}

// commandOf is a shell line without its comment and surrounding blanks.
func commandOf(line string) string {
	cmd, _, _ := strings.Cut(line, "#")
	return strings.TrimSpace(cmd)
}

// lineLogger writes each complete line to the test's log, as the steps run.
type lineLogger struct {
	t       *testing.T
	prefix  string
	pending []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.pending = append(l.pending, p...)
	for {
		i := slices.Index(l.pending, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.t.Log(l.prefix + string(l.pending[:i]))
		l.pending = l.pending[i+1:]
	}
}

func (l *lineLogger) flush() {
	if len(l.pending) > 0 {
		l.t.Log(l.prefix + string(l.pending))
		l.pending = nil
	}
}
