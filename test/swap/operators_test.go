package swap

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/sys/liveproc"
)

// operator is one operator process: KubeRay's or a Manta binary, run as a platform engineer runs a Deployment of
// it, watching every namespace. It reaches Ray heads through the API server's proxy (--use-kubernetes-proxy): this
// process has no cluster DNS, and both operators take the flag.
type operator struct {
	name    string
	cmd     *exec.Cmd
	metrics string // its /metrics URL, on loopback
	log     string
	done    chan struct{}
}

// startOperator starts bin (KubeRay's flags when kuberay, Manta's otherwise) with its log in the dev cluster's log
// directory. The operator outlives the (sub)test that starts it: the caller stops it.
func startOperator(t *testing.T, c *devcluster.Cluster, name, bin string, kuberay bool) *operator {
	t.Helper()
	ports, err := devcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	var args []string
	if kuberay {
		// KubeRay v1.5.0 at its defaults but for leader election (one replica) and where it listens.
		args = []string{"--kubeconfig=" + c.Kubeconfig, "--enable-leader-election=false", "--metrics-addr=" + addr,
			"--health-probe-bind-address=0", "--use-kubernetes-proxy"}
	} else {
		args = []string{"operator", "--enable-leader-election=false", "--metrics-addr=" + addr, "--metrics-secure=false",
			"--health-probe-bind-address=0", "--use-kubernetes-proxy"}
	}
	logPath := filepath.Join(c.Dir(), "logs", name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	cmd.Stdout, cmd.Stderr = f, f
	// A killed test takes the operator with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s (%s): %v", name, bin, err)
	}
	op := &operator{name: name, cmd: cmd, metrics: "http://" + addr + "/metrics", log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(op.done) }()
	t.Logf("%s started: pid %d, log %s", name, cmd.Process.Pid, logPath)
	return op
}

// stop ends the operator as Kubernetes ends a pod scaled away: SIGTERM, then SIGKILL if it has not exited after
// the default grace period. Idempotent.
func (o *operator) stop() {
	liveproc.Terminate(o.cmd.Process, o.done, 30*time.Second)
}

// exited says whether the operator has stopped on its own, with its log's tail.
func (o *operator) exited() error {
	select {
	case <-o.done:
		return fmt.Errorf("%s exited: %v; log tail:\n%s", o.name, o.cmd.ProcessState, tail(o.log, 20))
	default:
		return nil
	}
}

var (
	reconcileTotalRE = regexp.MustCompile(`(?m)^controller_runtime_reconcile_total\{([^}]*)\} (\d+)`)
	controllerRE     = regexp.MustCompile(`controller="([^"]*)"`)
)

// reconciles reads the operator's controller_runtime_reconcile_total, summed over results, per controller
// ("raycluster", "rayjob", "rayservice": the names of both operators' controllers).
func (o *operator) reconciles(ctx context.Context) (map[string]int, error) {
	if err := o.exited(); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.metrics, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "controller_runtime_reconcile_total{") {
			b.WriteString(sc.Text() + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for _, m := range reconcileTotalRE.FindAllStringSubmatch(b.String(), -1) {
		ctrl := controllerRE.FindStringSubmatch(m[1])
		if ctrl == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		counts[ctrl[1]] += n
	}
	return counts, nil
}

// execOut runs a command and returns its combined output.
func execOut(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
