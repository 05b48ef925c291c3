package ray_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/manta-dev/manta/internal/devcluster"
)

// rayHead is a `ray start --head --block` process on loopback, with its own temp dir and ports.
type rayHead struct {
	cmd           *exec.Cmd
	done          chan struct{}
	tempDir       string
	logFile       string
	DashboardPort int
	ServePort     int
	GCSPort       int
	AgentPort     int // the dashboard agent's HTTP port (the raylet health check)
	authToken     string
}

// ensureRay returns the path of the pinned `ray` CLI, creating bin/ray-venv with hack/ray-venv.sh when needed
// (the script is a fast no-op when the venv is up to date).
func ensureRay(root string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", "ray-venv.sh"))
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/ray-venv.sh: %v\n%s", err, out.String())
	}
	ray := filepath.Join(root, "bin", "ray-venv", "bin", "ray")
	if _, err := os.Stat(ray); err != nil {
		return "", err
	}
	return ray, nil
}

// startRayHead starts the head and waits until the dashboard's GCS health check and Jobs API answer.
// A non-empty authToken turns on Ray's token authentication (RAY_AUTH_MODE=token); env (NAME=value) is added to
// Ray's environment. A failed start is tried once more with fresh ports: the free ports are only reserved until Ray
// binds them, and other tests run alongside.
func startRayHead(rayBin, authToken string, env ...string) (*rayHead, error) {
	h, err := startRayHeadOnce(rayBin, authToken, env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ray head did not start, trying again: %v\n", err)
		h, err = startRayHeadOnce(rayBin, authToken, env)
	}
	return h, err
}

func startRayHeadOnce(rayBin, authToken string, env []string) (*rayHead, error) {
	// Ray puts unix sockets under the temp dir; keep the path short (sun_path is 108 bytes).
	tempDir, err := os.MkdirTemp("/tmp", "mrt")
	if err != nil {
		return nil, err
	}
	ports, err := devcluster.FreePorts(10)
	if err != nil {
		return nil, err
	}
	h := &rayHead{tempDir: tempDir, logFile: filepath.Join(tempDir, "ray-start.log"), done: make(chan struct{}),
		GCSPort: ports[0], DashboardPort: ports[1], ServePort: ports[2], AgentPort: ports[3], authToken: authToken}
	args := []string{"start", "--head", "--block",
		"--node-ip-address=127.0.0.1",
		"--port=" + strconv.Itoa(ports[0]),
		"--dashboard-host=127.0.0.1",
		"--dashboard-port=" + strconv.Itoa(ports[1]),
		"--include-dashboard=true",
		"--dashboard-agent-listen-port=" + strconv.Itoa(ports[3]),
		"--dashboard-agent-grpc-port=" + strconv.Itoa(ports[4]),
		"--metrics-export-port=" + strconv.Itoa(ports[5]),
		"--ray-client-server-port=" + strconv.Itoa(ports[6]),
		"--node-manager-port=" + strconv.Itoa(ports[7]),
		"--object-manager-port=" + strconv.Itoa(ports[8]),
		"--runtime-env-agent-port=" + strconv.Itoa(ports[9]),
		"--num-cpus=2", "--num-gpus=0",
		`--resources={"manta_test": 4, "manta_gate_direct": 1, "manta_gate_proxy": 1, "manta_gate_token": 1}`,
		"--object-store-memory=100000000",
		"--disable-usage-stats",
		"--temp-dir=" + tempDir,
	}
	log, err := os.Create(h.logFile)
	if err != nil {
		return nil, err
	}
	defer func() { _ = log.Close() }()
	cmd := exec.Command(rayBin, args...)
	venvBin := filepath.Dir(rayBin)
	cmd.Env = append(os.Environ(),
		"PATH="+venvBin+string(os.PathListSeparator)+os.Getenv("PATH"), // `python` in job entrypoints is the venv's
		"RAY_USAGE_STATS_ENABLED=0",
		"PYTHONUNBUFFERED=1",
		"RAY_memory_monitor_refresh_ms=0", // the test machine is shared: do not let Ray kill workers for memory
		// On a loaded 2-core machine the dashboard's module subprocesses can take longer than the default 30 s
		// (seen: "Module MetricsHead failed to start. Timeout after 30.0 seconds").
		"RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT=240",
		"RAY_DASHBOARD_STARTUP_TIMEOUT_S=300",
	)
	if authToken != "" {
		cmd.Env = append(cmd.Env, "RAY_AUTH_MODE=token", "RAY_AUTH_TOKEN="+authToken)
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = log, log
	// Own process group, so teardown reaches every Ray process; SIGTERM if the test binary dies abruptly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h.cmd = cmd
	go func() { _ = cmd.Wait(); close(h.done) }()
	if err := h.waitReady(5 * time.Minute); err != nil {
		h.Stop()
		return nil, err
	}
	return h, nil
}

func (h *rayHead) DashboardURL() string { return "http://127.0.0.1:" + strconv.Itoa(h.DashboardPort) }
func (h *rayHead) ServeURL() string     { return "http://127.0.0.1:" + strconv.Itoa(h.ServePort) }
func (h *rayHead) AgentURL() string     { return "http://127.0.0.1:" + strconv.Itoa(h.AgentPort) }

func (h *rayHead) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := &http.Client{Timeout: 2 * time.Second}
	ready := func(path string) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.DashboardURL()+path, nil)
		if err != nil {
			return false
		}
		if h.authToken != "" {
			req.Header.Set("x-ray-authorization", "Bearer "+h.authToken)
		}
		resp, err := c.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == 200
	}
	for {
		if ready("/api/gcs_healthz") && ready("/api/jobs/") && ready("/api/version") {
			return nil
		}
		select {
		case <-h.done:
			return fmt.Errorf("ray start exited early:\n%s", h.Logs())
		case <-ctx.Done():
			return fmt.Errorf("ray dashboard not ready after %v:\n%s", timeout, h.Logs())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Logs returns the end of `ray start`'s output and of the head's dashboard and job logs, for failure messages.
func (h *rayHead) Logs() string {
	var b strings.Builder
	files := []string{h.logFile}
	for _, pat := range []string{"dashboard.log", "dashboard_agent.log", "job-driver-*.log", "serve/*.log", "raylet.out", "gcs_server.out"} {
		m, _ := filepath.Glob(filepath.Join(h.tempDir, "session_latest", "logs", pat))
		files = append(files, m...)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "==> %s <==\n%s\n", f, data)
	}
	return b.String()
}

// Stop ends every Ray process of this head: SIGTERM to the process group (ray start --block then stops what it
// started), SIGKILL after a grace period, then any stray process still using the head's temp dir. It does not run
// `ray stop --force`, which would kill every Ray process on the machine, not only this test's.
func (h *rayHead) Stop() {
	if h.cmd != nil && h.cmd.Process != nil {
		pgid := h.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-h.done:
		case <-time.After(15 * time.Second):
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-h.done
		for i := 0; i < 50 && syscall.Kill(-pgid, 0) == nil; i++ {
			time.Sleep(200 * time.Millisecond)
		}
	}
	killProcessesMentioning(h.tempDir)
	_ = os.RemoveAll(h.tempDir)
}

// killProcessesMentioning SIGKILLs processes whose command line mentions dir, as an argument of its own or a path
// under it (Ray daemons that left the group). A bare substring match would also hit the processes of another head
// whose temp dir merely starts with dir (/tmp/mrt123 and /tmp/mrt1234), such as the other head of this package or
// a test run alongside.
func killProcessesMentioning(dir string) {
	for range 3 {
		entries, _ := os.ReadDir("/proc")
		found := false
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			// Arguments end with NUL in /proc/<pid>/cmdline.
			if err != nil || !(bytes.Contains(cmdline, []byte(dir+"/")) || bytes.Contains(cmdline, []byte(dir+"\x00"))) {
				continue
			}
			found = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if !found {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
