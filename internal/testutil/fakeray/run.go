package fakeray

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/manta-dev/manta/internal/ray"
)

// sysExit finds Python's sys.exit(<arg>) in an entrypoint.
var sysExit = regexp.MustCompile(`sys\.exit\(\s*([^)]*?)\s*\)`)

// ExitCode is the exit status an entrypoint implies without running it: the argument of a sys.exit() call in it
// (an integer; a string is printed and exits 1, as Python does; none, 0, None or False exit 0), or an `exit N` of
// the shell; otherwise 0. The message is what the process would print to stderr.
func ExitCode(entrypoint string) (code int, stderr string) {
	if m := sysExit.FindStringSubmatch(entrypoint); m != nil {
		arg := strings.TrimSpace(m[1])
		switch {
		case arg == "" || arg == "None" || arg == "False" || arg == "0":
			return 0, ""
		case arg == "True":
			return 1, ""
		}
		if n, err := strconv.Atoi(arg); err == nil {
			return n & 0xff, ""
		}
		if s, err := strconv.Unquote(strings.ReplaceAll(arg, "'", `"`)); err == nil {
			return 1, s + "\n"
		}
		return 1, arg + "\n"
	}
	if m := regexp.MustCompile(`(?:^|[;&|\s])exit\s+(\d+)`).FindStringSubmatch(entrypoint); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n & 0xff, ""
	}
	return 0, ""
}

// Scripted runs no process: a job runs for step (until stopped), logs its entrypoint, and ends with the exit code
// ExitCode reads from the entrypoint. Deterministic, for tests whose images and files do not exist here.
func Scripted(step time.Duration) RunFunc {
	return func(ctx context.Context, req ray.JobSubmitRequest, logs io.Writer) int {
		_, _ = fmt.Fprintf(logs, "fakeray: running %s\n", req.Entrypoint)
		select {
		case <-ctx.Done():
			return -1
		case <-time.After(step):
		}
		code, stderr := ExitCode(req.Entrypoint)
		_, _ = io.WriteString(logs, stderr)
		return code
	}
}

// Hold returns a runner that runs each job with run once release(submissionID) is closed; tests that decide when a
// job ends (or that it never does) pass it. A nil channel from release runs the job at once.
func Hold(release func(submissionID string) <-chan struct{}, run RunFunc) RunFunc {
	return func(ctx context.Context, req ray.JobSubmitRequest, logs io.Writer) int {
		if ch := release(req.SubmissionID); ch != nil {
			select {
			case <-ctx.Done():
				return -1
			case <-ch:
			}
		}
		return run(ctx, req, logs)
	}
}

// Exec runs the entrypoint with /bin/sh in a process group of its own, with the runtime environment's env_vars
// added to env; stopping the job kills the group. Its output is the job's log.
func Exec(env []string) RunFunc {
	return func(ctx context.Context, req ray.JobSubmitRequest, logs io.Writer) int {
		cmd := exec.Command("/bin/sh", "-c", req.Entrypoint)
		cmd.Env = append(append([]string(nil), env...), os.Environ()...)
		if vars, ok := req.RuntimeEnv["env_vars"].(map[string]any); ok {
			for k, v := range vars {
				cmd.Env = append(cmd.Env, k+"="+fmt.Sprint(v))
			}
		}
		cmd.Stdout, cmd.Stderr = logs, logs
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			_, _ = fmt.Fprintln(logs, err)
			return 127
		}
		done := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			case <-done:
			}
		}()
		err := cmd.Wait()
		close(done)
		if err == nil {
			return 0
		}
		if ee, ok := err.(*exec.ExitError); ok {
			if ee.ExitCode() >= 0 {
				return ee.ExitCode()
			}
			return 128 + int(syscall.SIGTERM)
		}
		_, _ = fmt.Fprintln(logs, err)
		return 1
	}
}
