package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/sys/liveproc"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestMantaDev runs the real `manta dev` binary: it must print "manta dev: ready" with how to use it, write a
// kubeconfig that reaches a cluster with the asked number of nodes, and on SIGINT stop everything it started.
func TestMantaDev(t *testing.T) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "manta")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(root, "cmd", "manta")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build manta: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cmd := exec.Command(bin, "dev", "--nodes", "2", "--kubeconfig", kubeconfig, "--real-node=false")
	cmd.Dir = root
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })

	lines := make(chan string, 100)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	var out []string
	deadline := time.After(3 * time.Minute)
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("manta dev exited before ready; output:\n%s", strings.Join(out, "\n"))
			}
			out = append(out, l)
			ready = strings.Contains(l, "press Ctrl-C to stop")
		case <-deadline:
			t.Fatalf("manta dev not ready after 3m; output:\n%s", strings.Join(out, "\n"))
		}
	}
	text := strings.Join(out, "\n")
	logPath := filepath.Join(filepath.Dir(kubeconfig), "logs", "manta.log")
	for _, want := range []string{"manta dev: ready", "export KUBECONFIG=" + kubeconfig, "kubectl apply -f config/samples/raycluster.yaml",
		"operator and API server logs: " + logPath} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	// The terminal keeps progress and the summary; the operator's JSON logs go to the file it names.
	for _, l := range strings.Split(stderr.String()+text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "{") {
			t.Errorf("a log line on the terminal: %s", l)
		}
	}
	// The controllers are launched by then; their first lines follow within moments.
	testutil.Eventually(t, 10*time.Second, "the operator's logs in "+logPath, func() (bool, string) {
		logs, err := os.ReadFile(logPath)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(string(logs), `"controller":"raycluster"`), fmt.Sprintf("%.2000s", logs)
	})
	// The components' logs are in the directory the summary names, one file each.
	const componentsLine = "component logs (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok): "
	if _, dir, ok := strings.Cut(text, componentsLine); !ok {
		t.Errorf("output does not name the components' logs:\n%s", text)
	} else {
		dir, _, _ = strings.Cut(dir, "\n")
		for _, c := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"} {
			if fi, err := os.Stat(filepath.Join(dir, c+".log")); err != nil || fi.Size() == 0 {
				t.Errorf("%s's log in %s is missing or empty: %v", c, dir, err)
			}
		}
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list nodes through the written kubeconfig: %v", err)
	}
	if len(nodes.Items) != 2 {
		t.Errorf("got %d nodes, want 2", len(nodes.Items))
	}
	crds, err := cs.Discovery().ServerResourcesForGroupVersion("ray.io/v1")
	if err != nil || len(crds.APIResources) == 0 {
		t.Errorf("ray.io/v1 not served: %v", err)
	}

	// Component processes are children of manta dev; remember them to check they are gone after SIGINT.
	children := childPIDs(t, cmd.Process.Pid)
	if len(children) < 5 {
		t.Errorf("expected at least 5 component processes under manta dev, found %v", children)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for range lines {
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("manta dev exited with %v after SIGINT, want a clean exit", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("manta dev did not stop within 60s of SIGINT")
	}
	for _, id := range children {
		if id.Exists() {
			t.Errorf("component process %v still alive after manta dev stopped", id)
		}
	}
}

// childPIDs lists the direct children of pid, from /proc/*/stat (children may be started from any thread), by pid
// and start time (a pid may be reused once its process is gone).
func childPIDs(t *testing.T, pid int) []liveproc.ID {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var pids []liveproc.ID
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue // the process has gone
		}
		// Fields after the parenthesised command name: state, ppid, ...
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		f := strings.Fields(rest)
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
			if id, ok := liveproc.Of(child); ok {
				pids = append(pids, id)
			}
		}
	}
	return pids
}

// syncBuffer is a bytes.Buffer safe for the process's writer and the test's reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
