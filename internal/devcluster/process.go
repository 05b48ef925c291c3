package devcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	createOpts = metav1.CreateOptions{}
	listOpts   = metav1.ListOptions{}
)

type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

func (c *Cluster) logPath(name string) string { return filepath.Join(c.dir, "logs", name+".log") }

// run starts a component from BinDir with its output in <dir>/logs/<name>.log.
func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	return c.start(ctx, procSpec{name: name, args: args})
}

// procSpec is a component to start: BinDir/name with args, optionally inside a network namespace (through
// nsenter, which execs the component in place: the process is the component) and with its own environment.
type procSpec struct {
	name  string
	args  []string
	netns string   // a network namespace's path, or "" for this process's own
	env   []string // nil: this process's environment
}

// start starts a component. The process gets its own process group and is killed by the kernel if this process
// dies, so nothing outlives a crashed test or `manta dev`.
func (c *Cluster) start(ctx context.Context, s procSpec) error {
	name := s.name
	if err := os.MkdirAll(filepath.Join(c.dir, "logs"), 0o755); err != nil {
		return err
	}
	log, err := os.Create(c.logPath(name))
	if err != nil {
		return err
	}
	bin := filepath.Join(c.opts.BinDir, name)
	cmd := exec.Command(bin, s.args...)
	if s.netns != "" {
		cmd = exec.Command("nsenter", append([]string{"--net=" + s.netns, "--", bin}, s.args...)...)
	}
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	// A component that dies at once (bad flag, port taken) should fail Start with its log, not a timeout later.
	select {
	case <-p.done:
		out, _ := os.ReadFile(c.logPath(name))
		return fmt.Errorf("%s exited at start: %v\n%s", name, p.err, tail(out, 2000))
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// exitedEarly returns an error naming the first component that has exited, with the end of its log.
func (c *Cluster) exitedEarly() error {
	for _, p := range c.procs {
		select {
		case <-p.done:
			out, _ := os.ReadFile(c.logPath(p.name))
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.err, tail(out, 2000))
		default:
		}
	}
	return nil
}

func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		_ = p.log.Close()
		return nil
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	_ = p.log.Close()
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// waitHealthy polls an API server health path until it answers 200.
func (c *Cluster) waitHealthy(ctx context.Context, path string, timeout time.Duration) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.config.CAData)
	hc := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	return poll(ctx, timeout, func() (bool, error) {
		if err := c.exitedEarly(); err != nil {
			return false, err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Server+path, nil)
		req.Header.Set("Authorization", "Bearer "+c.config.BearerToken)
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// poll calls cond every 100ms until it reports done, returns an error, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		done, err := cond()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("timed out after " + timeout.String())
		case <-t.C:
		}
	}
}
