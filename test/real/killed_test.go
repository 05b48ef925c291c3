package real

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// testKilledRunIsSwept: a `manta dev` with a real node (beside the suite's own, in the next slot) runs a pod, is
// killed outright (no Stop), and the next start's sweep (devcluster.SweepRealNodes) removes what it left: the pod's
// container and shim, its mounts, the node's namespace, link, routes and cgroups.
func testKilledRunIsSwept(t *testing.T, ctx context.Context, e *env) {
	d := startMantaDevWithPod(t, ctx)
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	d.stopped = true
	if _, err := os.Stat(filepath.Join("/run/netns", "manta-node-"+strconv.Itoa(d.slot))); err != nil {
		t.Fatalf("the killed run left no network namespace to sweep (%v): the test proves nothing", err)
	}
	if err := devcluster.SweepRealNodes(ctx, t.Logf); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	checkNodeGone(t, ctx, d.dir, strconv.Itoa(d.slot))
}

// testCtrlCLeavesNothing: a user's `manta dev` with a real node runs a pod; Ctrl-C (SIGINT) ends it cleanly, and
// with no sweep nothing of the node is left: no process, mount, network namespace, link, route or cgroup.
func testCtrlCLeavesNothing(t *testing.T, ctx context.Context, e *env) {
	d := startMantaDevWithPod(t, ctx)
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := d.cmd.Wait()
	d.stopped = true
	if err != nil {
		t.Errorf("manta dev exited with %v after SIGINT, want a clean exit", err)
	}
	checkNodeGone(t, ctx, d.dir, strconv.Itoa(d.slot))
}

// mantaDev is a `manta dev` process of the test's, with a real node.
type mantaDev struct {
	cmd     *exec.Cmd
	slot    int
	dir     string
	stdout  *lockedBuffer // what it printed: the summary once ready
	stderr  *lockedBuffer // its progress lines, and why it runs no real node when it does not
	stopped bool
}

// startMantaDevWithPod starts `manta dev --nodes=1 --real-node=true` (its real node in the next free slot) and runs
// a pause pod on that node.
func startMantaDevWithPod(t *testing.T, ctx context.Context) *mantaDev {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	d := startMantaDev(t, testutil.MustRepoRoot(t), "--nodes=1", "--real-node=true", "--kubeconfig="+kubeconfig)

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "left-behind", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
	}
	waitFor(t, ctx, time.Minute, "default ServiceAccount", func() (bool, string) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, ""
	})
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 3*time.Minute, "pod running on the manta dev's real node", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})
	return d
}

// startMantaDev builds manta, starts `manta dev args...` in dir, waits until it has printed its summary, and finds
// its real node's record under /run/manta-dev (it fails without one). Unless the test stopped it, it is interrupted
// at the end of the test, as Ctrl-C would, so that it removes its node.
func startMantaDev(t *testing.T, dir string, args ...string) *mantaDev {
	t.Helper()
	bin, err := testutil.BuildMantaTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := &mantaDev{stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
	cmd := exec.Command(bin, append([]string{"dev"}, args...)...)
	cmd.Dir = dir
	cmd.Stderr = io.MultiWriter(os.Stderr, d.stderr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.cmd = cmd
	t.Cleanup(func() {
		if !d.stopped {
			d.interrupt()
		}
	})
	// The summary's last line says it is ready; an exit before it ends the wait at once.
	ready, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		s := bufio.NewScanner(stdout)
		for said := false; s.Scan(); {
			d.stdout.WriteString(s.Text() + "\n")
			if !said && strings.Contains(s.Text(), "press Ctrl-C to stop") {
				said = true
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("manta dev %v exited before it was ready:\n%s%s", args, d.stdout, d.stderr)
	case <-time.After(5 * time.Minute):
		t.Fatalf("manta dev %v not ready after 5m:\n%s%s", args, d.stdout, d.stderr)
	}
	var rec struct {
		Slot int    `json:"slot"`
		Dir  string `json:"dir"`
		PID  int    `json:"pid"`
	}
	for k := 0; k < 4; k++ {
		b, err := os.ReadFile("/run/manta-dev/node-" + strconv.Itoa(k) + ".json")
		if err == nil && json.Unmarshal(b, &rec) == nil && rec.PID == cmd.Process.Pid {
			break
		}
		rec.Dir = ""
	}
	if rec.Dir == "" {
		t.Fatalf("no real node record of manta dev (pid %d) under /run/manta-dev:\n%s%s", cmd.Process.Pid, d.stdout, d.stderr)
	}
	d.slot, d.dir = rec.Slot, rec.Dir
	return d
}

// interrupt stops manta dev as Ctrl-C does, and kills it if it has not exited after two minutes.
func (d *mantaDev) interrupt() error {
	d.stopped = true
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Minute):
		_ = d.cmd.Process.Kill()
		<-done
		return errors.New("manta dev did not exit within 2m of SIGINT: killed")
	}
}

// lockedBuffer is a bytes.Buffer that a process's output goroutine writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) WriteString(s string) {
	_, _ = l.Write([]byte(s))
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
