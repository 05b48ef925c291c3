package reliability

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/manta-dev/manta/internal/testutil"
)

// The operator the tests kill is the real `manta operator`, built once per run (testutil.BuildManta) and started
// as a process with the flags a Deployment would give it. It reaches Ray heads with --use-kubernetes-proxy
// through the test's API proxy (apiproxy_test.go), which answers the services/…/proxy and pods/…/proxy
// subresources from the fake Ray and passes everything else to the kube-apiserver: the dev cluster runs no Ray
// and its Service names do not resolve.

// What client-go's leader election logs (on stderr), lower-cased: when the process starts trying for the lease
// (its first try follows at once), and when it becomes the leader.
const (
	leaseAttemptLog  = "attempting to acquire leader lease"
	leaseAcquiredLog = "successfully acquired lease"
)

// mantaBin is the built binary, shared by every test of the package; TestMain removes its directory.
var mantaBin struct {
	once      sync.Once
	dir, path string
	took      time.Duration
	err       error
}

// buildManta builds the binary once; devCluster starts it beside the control plane.
func buildManta() {
	mantaBin.once.Do(func() {
		start := time.Now()
		if mantaBin.dir, mantaBin.err = os.MkdirTemp("", "manta-reliability-"); mantaBin.err != nil {
			return
		}
		mantaBin.path, mantaBin.err = testutil.BuildMantaTo(mantaBin.dir)
		mantaBin.took = time.Since(start)
	})
}

func mantaBinary(t *testing.T) string {
	t.Helper()
	buildManta()
	if mantaBin.err != nil {
		t.Fatal(mantaBin.err)
	}
	return mantaBin.path
}

// operatorProc is one `manta operator` process started by a test.
type operatorProc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	mu      sync.Mutex
	elected time.Time
	tried   bool
}

type operatorConfig struct {
	// kubeconfig leads to an API proxy (startAPIProxy), which also plays the Ray heads.
	kubeconfig     string
	leaderElection bool
	// lease, when set, is the leader election timing (--leader-elect-*).
	lease *leaseTiming
	// namespaces are the ones the operator watches (--watch-namespace), so that each test's operator leaves the
	// objects of the tests before it alone.
	namespaces []string
}

type leaseTiming struct{ duration, renewDeadline, retryPeriod time.Duration }

// operatorRayTimeout is --ray-timeout: short, as a busy head's would be; the fake Ray's "slow" fault outlasts it.
const operatorRayTimeout = 2 * time.Second

func (oc operatorConfig) args() []string {
	args := []string{"operator",
		"--metrics-addr=0", "--health-probe-bind-address=0", "--reconcile-concurrency=8", "--qps=100", "--burst=200",
		"--puller-image=ghcr.io/manta-dev/manta:latest", "--use-kubernetes-proxy", "--ray-timeout=" + operatorRayTimeout.String(),
		"--enable-leader-election=" + strconv.FormatBool(oc.leaderElection), "--leader-election-namespace=default"}
	if l := oc.lease; l != nil {
		args = append(args, "--leader-elect-lease-duration="+l.duration.String(), "--leader-elect-renew-deadline="+l.renewDeadline.String(),
			"--leader-elect-retry-period="+l.retryPeriod.String())
	}
	if len(oc.namespaces) > 0 {
		args = append(args, "--watch-namespace="+strings.Join(oc.namespaces, ","))
	}
	return args
}

// startOperator starts `manta operator`; its log goes to <name>.log in the test's temp dir (or
// $MANTA_RELIABILITY_LOGS). The process is killed when the test ends.
func startOperator(t *testing.T, name string, oc operatorConfig) *operatorProc {
	t.Helper()
	bin := mantaBinary(t)
	logPath := filepath.Join(logDir(t), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, oc.args()...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+oc.kubeconfig)
	cmd.Stdout = logf
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &operatorProc{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		// The log is copied to the file line by line, watching for the election.
		sc := bufio.NewScanner(io.TeeReader(stderr, logf))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.ToLower(sc.Text())
			p.mu.Lock()
			if strings.Contains(line, leaseAttemptLog) {
				p.tried = true
			}
			if strings.Contains(line, leaseAcquiredLog) && p.elected.IsZero() {
				p.elected = time.Now()
			}
			p.mu.Unlock()
		}
		_, _ = io.Copy(logf, stderr)
		_ = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	t.Cleanup(func() { p.kill(t) })
	return p
}

// kill SIGKILLs the process (a no-op once it has exited) and waits for it to be gone.
func (p *operatorProc) kill(t *testing.T) { p.signal(t, syscall.SIGKILL) }

// stop sends SIGTERM, as the kubelet does to a pod being deleted, and waits for the process to exit.
func (p *operatorProc) stop(t *testing.T) { p.signal(t, syscall.SIGTERM) }

func (p *operatorProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Logf("%s %s: %v", sig, p.name, err)
	}
	<-p.exited
}

// electedAt is when the process logged that it acquired the lease; zero while it has not.
func (p *operatorProc) electedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.elected
}

// triedLease says the process has started trying for the lease.
func (p *operatorProc) triedLease() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tried
}

func (p *operatorProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// logDir keeps operator logs: in $MANTA_RELIABILITY_LOGS when set (to read them after a failure), else the
// test's temp dir.
func logDir(t *testing.T) string {
	if d := os.Getenv("MANTA_RELIABILITY_LOGS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// superviseOperator keeps an operator process running as a kubelet does for a Deployment's pod: when the process
// exits (the operator exits when the API server fails it at start-up), another starts a second later (the
// kubelet's first crash-loop back-off is 10 s; a second keeps the test short). restarts counts them.
func superviseOperator(t *testing.T, name string, oc operatorConfig) (restarts *atomic.Int32) {
	restarts = &atomic.Int32{}
	p := startOperator(t, name, oc)
	go func() {
		for i := 1; ; i++ {
			select {
			case <-p.exited:
			case <-t.Context().Done():
				return
			}
			select {
			case <-time.After(time.Second):
			case <-t.Context().Done():
				return
			}
			restarts.Add(1)
			p = startOperator(t, fmt.Sprintf("%s-%d", name, i), oc)
		}
	}()
	return restarts
}
