package integration

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"golang.org/x/sys/unix"

	"github.com/manta-dev/manta/internal/devcluster/images"
	"github.com/manta-dev/manta/internal/sys/liveproc"
	"github.com/manta-dev/manta/internal/testutil"
)

// repoBin is the repository's bin/, where `make` keeps built tools: the tests build there so the stamped images
// are shared with `manta dev` and the other packages' tests instead of rebuilt per run.
func repoBin(t *testing.T) string {
	t.Helper()
	return filepath.Join(testutil.MustRepoRoot(t), "bin")
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// layerFiles reads every file of img's layers into a map from path to header and, for regular files no larger than
// maxData, content.
func layerFiles(t *testing.T, img v1.Image, maxData int64) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
			hdrs[p] = h
			if h.Typeflag == tar.TypeReg && h.Size <= maxData {
				b, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				data[p] = b
			}
		}
		rc.Close()
	}
	return hdrs, data
}

func TestPauseImage(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	img, err := images.EnsurePause(ctx, repoBin(t), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if img.Ref != "registry.k8s.io/pause:3.10" {
		t.Fatalf("ref %q, want registry.k8s.io/pause:3.10", img.Ref)
	}
	v := testutil.LayoutImage(t, img.Path)
	if err := validate.Image(v); err != nil {
		t.Fatalf("pause image is not valid: %v", err)
	}
	cf, err := v.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.Config.Entrypoint; len(got) != 1 || got[0] != "/pause" {
		t.Fatalf("entrypoint %q, want [/pause]", got)
	}
	if cf.OS != "linux" {
		t.Fatalf("os %q, want linux", cf.OS)
	}
	hdrs, data := layerFiles(t, v, 64<<20)
	h, ok := hdrs["pause"]
	if !ok || h.Mode&0o111 == 0 {
		t.Fatalf("layer has no executable /pause: %+v", h)
	}

	// The binary in the layer is the program the entrypoint names: run it and see it exit 0 on SIGTERM, as a
	// sandbox must (TestPauseReapsOrphans checks the reaping).
	bin := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(bin, data["pause"], 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bin, "-v").Output()
	if err != nil || !strings.Contains(string(out), "pause") {
		t.Fatalf("pause -v: %q, %v", out, err)
	}
	// A SIGTERM that lands before the program's handler is installed kills it by the signal's default action; that
	// is the Go runtime starting, so start again and signal again until a run handles it or the deadline passes.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for attempt := 1; ; attempt++ {
		cmd := exec.CommandContext(ctx, bin)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		var err error
	wait:
		for {
			select {
			case err = <-waited:
				break wait
			case <-tick.C:
				_ = cmd.Process.Signal(syscall.SIGTERM)
			case <-ctx.Done():
				t.Fatal("pause did not exit on SIGTERM")
			}
		}
		if err == nil {
			return
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != -1 {
			t.Fatalf("pause exited with %v on SIGTERM, want status 0", err)
		}
		t.Logf("attempt %d: pause was signalled before its handler was installed (%v)", attempt, err)
	}
}

func TestPauseImageRebuildsOnlyWhenInputsChange(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	bin := t.TempDir()
	first, err := images.EnsurePause(ctx, bin, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	// The stamp a build writes: the hash of the pause recipe's inputs.
	stamp := filepath.Join(bin, ".stamps", "image-pause")
	built, err := os.ReadFile(stamp)
	if err != nil {
		t.Fatal(err)
	}
	st1, err := os.Stat(filepath.Join(first.Path, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	second, err := images.EnsurePause(ctx, bin, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	st2, err := os.Stat(filepath.Join(second.Path, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(st1, st2) {
		t.Fatalf("the second Ensure rebuilt the pause image with nothing changed")
	}
	t.Logf("second Ensure took %s", time.Since(start))

	// A stamp from other inputs makes the next Ensure build again.
	if err := os.WriteFile(stamp, []byte("other inputs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	third, err := images.EnsurePause(ctx, bin, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	st3, err := os.Stat(filepath.Join(third.Path, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(st2, st3) {
		t.Fatalf("a changed stamp did not rebuild the pause image")
	}
	got, err := os.ReadFile(stamp)
	if err != nil || string(got) != string(built) {
		t.Fatalf("stamp after rebuild %q (%v), want the recipe's hash %q, as the first build wrote it", got, err, built)
	}
}

// countingRegistry serves go-containerregistry's in-memory registry on loopback and counts blob upload sessions.
type countingRegistry struct {
	host    string
	uploads atomic.Int64
}

func newCountingRegistry(t *testing.T) *countingRegistry {
	c := &countingRegistry{}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/blobs/uploads/") {
			c.uploads.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c.host = strings.TrimPrefix(srv.URL, "http://")
	return c
}

func TestPushPause(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	img, err := images.EnsurePause(ctx, repoBin(t), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	reg := newCountingRegistry(t)
	if err := images.Push(ctx, img, reg.host, nil); err != nil {
		t.Fatal(err)
	}
	if n := reg.uploads.Load(); n != 2 {
		t.Fatalf("first push started %d blob uploads, want 2 (the layer and the config)", n)
	}
	local := testutil.LayoutImage(t, img.Path)
	want, err := local.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(reg.host+"/pause:3.10", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	got, err := pulled.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("pulled digest %s, pushed %s", got, want)
	}
	if err := validate.Image(pulled); err != nil {
		t.Fatalf("pulled image is not valid: %v", err)
	}

	if err := images.Push(ctx, img, reg.host, nil); err != nil {
		t.Fatal(err)
	}
	if n := reg.uploads.Load(); n != 2 {
		t.Fatalf("second push started %d more blob uploads, want none", n-2)
	}
}

// TestPauseReapsOrphans runs the packed pause binary as PID 1 of a new PID namespace, as a pod sandbox with a
// shared process namespace does, leaves an orphan in that namespace, kills it, and waits for pause to reap it:
// a pause that does not reap keeps the zombie as its child and the test runs into its deadline.
func TestPauseReapsOrphans(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	img, err := images.EnsurePause(ctx, repoBin(t), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	v := testutil.LayoutImage(t, img.Path)
	_, data := layerFiles(t, v, 64<<20)
	bin := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(bin, data["pause"], 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	// nsenter waits for sh, so when it returns sh has exited and its background sleep is pause's child.
	out, err := exec.CommandContext(ctx, "nsenter", "--target", strconv.Itoa(pid), "--pid", "--",
		"sh", "-c", "sleep 600 >/dev/null 2>&1 &").CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter: %v: %s", err, out)
	}
	kids := childrenOf(t, pid)
	if len(kids) != 1 {
		t.Fatalf("pause has children %v, want the orphaned sleep", kids)
	}
	if err := syscall.Kill(kids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for len(childrenOf(t, pid)) > 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("pause did not reap its killed child %d", kids[0])
		case <-tick.C:
		}
	}
}

// TestPauseReapsChildrenOfBefore runs pause as PID 1 of a new PID namespace with a child that had exited before pause
// started: the test binary (execWithZombie) forks a child, waits until it is a zombie, then execs pause in its place.
// That child's SIGCHLD came before pause had a handler, and the kernel drops a signal the init of a PID namespace
// does not handle, so only a reap at pause's start collects it. A child dying while pause's Go runtime starts is
// the same case, which a loaded machine meets (a cold CI run, 2026-12-06: TestPauseReapsOrphans waited 2 minutes
// on a zombie).
func TestPauseReapsChildrenOfBefore(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	img, err := images.EnsurePause(ctx, repoBin(t), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	v := testutil.LayoutImage(t, img.Path)
	_, data := layerFiles(t, v, 64<<20)
	bin := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(bin, data["pause"], 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), execWithZombieEnv+"="+bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		exe, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
		if exe == bin && len(childrenOf(t, pid)) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pid %d (exe %q) still has children %v: a child that exited before pause started was not reaped", pid, exe, childrenOf(t, pid))
		case <-tick.C:
		}
	}
}

// execWithZombieEnv, set to pause's path, makes the test binary execWithZombie instead of running tests.
const execWithZombieEnv = "MANTA_TEST_EXEC_PAUSE_WITH_ZOMBIE"

func init() {
	if bin := os.Getenv(execWithZombieEnv); bin != "" {
		execWithZombie(bin)
	}
}

// execWithZombie forks a child that exits at once, waits until it is a zombie (exited, not reaped), and execs bin,
// which inherits it as its child.
func execWithZombie(bin string) {
	child, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		log.Fatal(err)
	}
	// Waited for without being reaped (WNOWAIT): this process's /proc is the parent namespace's, where the child's
	// PID means another process.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, child.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		log.Fatal(err)
	}
	log.Fatal(syscall.Exec(bin, []string{"pause"}, os.Environ()))
}

// childrenOf lists the processes whose parent is pid, zombies included.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	kids, err := liveproc.Children(pid)
	if err != nil {
		t.Fatal(err)
	}
	return kids
}
