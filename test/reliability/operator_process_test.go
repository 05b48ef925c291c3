package reliability

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/ray"
)

// The test binary plays `manta operator` when started with these variables set (see TestMain): it runs the same
// operator.NewManager and operator.Setup as the command, with one difference a separate process needs in a test,
// that every connection to a Ray head is dialled to the test's fake Ray server (the dev cluster runs no Ray and its
// Service names do not resolve).
const (
	operatorProcessEnv = "MANTA_RELIABILITY_OPERATOR"
	kubeconfigEnv      = "MANTA_RELIABILITY_KUBECONFIG"
	rayAddrEnv         = "MANTA_RELIABILITY_RAY"
	leaderEnv          = "MANTA_RELIABILITY_LEADER_ELECTION"
	namespacesEnv      = "MANTA_RELIABILITY_NAMESPACES"
	// electedLine is what the operator process prints on stdout when it becomes the leader (or starts without
	// leader election).
	electedLine = "manta-reliability: elected"
)

func runOperatorProcess() int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(kubeconfigEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rayAddr := os.Getenv(rayAddrEnv)
	dial := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, rayAddr)
	}}}
	// A short call timeout, as a busy head's would be: the fake Ray's "slow" fault outlasts it.
	rays, err := ray.NewFactory(ray.Options{HTTPClient: dial, Timeout: 2 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	opts := operator.Options{
		MetricsAddr: "0", PullerImage: "ghcr.io/manta-dev/manta:latest", ReconcileConcurrency: 8, QPS: 100, Burst: 200, RayClients: rays,
		LeaderElection: os.Getenv(leaderEnv) != "", LeaderElectionNS: "default",
	}
	if ns := os.Getenv(namespacesEnv); ns != "" {
		opts.WatchNamespaces = strings.Split(ns, ",")
	}
	mgr, err := operator.NewManager(cfg, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := operator.Setup(mgr, opts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := ctrl.SetupSignalHandler()
	go func() {
		select {
		case <-mgr.Elected():
			fmt.Printf("%s pid=%d\n", electedLine, os.Getpid())
		case <-ctx.Done():
		}
	}()
	if err := mgr.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// operatorProc is one operator process started by a test.
type operatorProc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	mu      sync.Mutex
	elected time.Time
}

type operatorConfig struct {
	kubeconfig     string
	rayAddr        string
	leaderElection bool
	// namespaces are the ones the operator watches (--watch-namespace), so that each test's operator leaves the
	// objects of the tests before it alone.
	namespaces []string
}

// startOperator starts an operator process; its log goes to <name>.log in the test's temp dir. The process is
// killed when the test ends.
func startOperator(t *testing.T, name string, oc operatorConfig) *operatorProc {
	t.Helper()
	logPath := filepath.Join(logDir(t), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), operatorProcessEnv+"=1", kubeconfigEnv+"="+oc.kubeconfig, rayAddrEnv+"="+oc.rayAddr)
	if len(oc.namespaces) > 0 {
		cmd.Env = append(cmd.Env, namespacesEnv+"="+strings.Join(oc.namespaces, ","))
	}
	if oc.leaderElection {
		cmd.Env = append(cmd.Env, leaderEnv+"=1")
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &operatorProc{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), electedLine) {
				p.mu.Lock()
				p.elected = time.Now()
				p.mu.Unlock()
			}
		}
		_ = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	t.Cleanup(func() { p.kill(t) })
	return p
}

// kill SIGKILLs the process (a no-op once it has exited) and waits for it to be gone.
func (p *operatorProc) kill(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Logf("kill %s: %v", p.name, err)
	}
	<-p.exited
}

// electedAt is when the process said it leads; zero while it does not.
func (p *operatorProc) electedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.elected
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
// exits (the operator exits when the API server fails it at start-up), another starts a second later. restarts
// counts them.
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
