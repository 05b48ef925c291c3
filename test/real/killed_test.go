package real

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// mantaDev is a `manta dev --real-node=true` process of the test's.
type mantaDev struct {
	cmd     *exec.Cmd
	slot    int
	dir     string
	stopped bool
}

// startMantaDevWithPod starts `manta dev --nodes=1 --real-node=true` (its real node in the next free slot), waits
// for it to be ready, finds its node's record under /run/manta-dev, and runs a pause pod on that node. The process
// is killed at the end of the test unless the test stopped it.
func startMantaDevWithPod(t *testing.T, ctx context.Context) *mantaDev {
	bin, err := testutil.BuildMantaTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cmd := exec.Command(bin, "dev", "--nodes=1", "--real-node=true", "--kubeconfig="+kubeconfig)
	cmd.Dir = testutil.MustRepoRoot(t)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &mantaDev{cmd: cmd}
	t.Cleanup(func() {
		if !d.stopped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	ready := make(chan struct{})
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if strings.Contains(s.Text(), "manta dev: ready") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Minute):
		t.Fatal("manta dev --real-node=true not ready after 5m")
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
		t.Fatalf("no real node record of manta dev (pid %d) under /run/manta-dev", cmd.Process.Pid)
	}
	d.slot, d.dir = rec.Slot, rec.Dir

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
