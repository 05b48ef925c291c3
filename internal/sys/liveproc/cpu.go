package liveproc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPUSeconds is a process's user + system CPU time so far, from /proc/<pid>/stat (clock ticks of 1/100 s); 0 when
// it cannot be read. The benchmarks read it for the operators and the control plane.
func CPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime from the text of /proc/<pid>/stat.
func parseStatCPU(stat string) float64 {
	// Fields after the command name, which is in parentheses and may hold spaces: state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// Terminate ends a child process as Kubernetes ends a pod: SIGTERM, then SIGKILL if exited (closed once the
// process has been waited for) is not closed within grace. It returns once the process has exited; at once when
// it already had.
func Terminate(p *os.Process, exited <-chan struct{}, grace time.Duration) {
	select {
	case <-exited:
		return
	default:
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = p.Kill()
		<-exited
	}
}
