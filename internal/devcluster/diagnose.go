package devcluster

import (
	"bufio"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// KeepLogs copies the components' logs, gzipped, into dst (made if missing): a test that failed on a timing needs
// them after Stop has removed the cluster's directory.
func (c *Cluster) KeepLogs(dst string) error {
	logs, err := filepath.Glob(filepath.Join(c.dir, "logs", "*.log"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, p := range logs {
		if err := gzipFile(p, filepath.Join(dst, filepath.Base(p)+".gz")); err != nil {
			return err
		}
	}
	return nil
}

func gzipFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(out)
	_, err = io.Copy(zw, in)
	return errors.Join(err, zw.Close(), out.Close())
}

// traceHeader is the first line of a request trace kube-apiserver logs (at any verbosity) for a request slower
// than its threshold (500 ms for a write): its id and total time.
var traceHeader = regexp.MustCompile(`Trace\[(\d+)\]: .*\(total time: (\d+)ms\)`)

// SlowRequests returns, in log order and at most max lines, what the control plane logged about requests that took
// at least min: kube-apiserver's traces of them (each step with its time; only with Options.LogSlowRequests), its post-timeout reports of requests it
// answered with a timeout, and etcd's warnings of slow applies and reads. A test that failed on an API timeout
// prints them, so its output says where the time went (admission, the database, or the handler waiting).
func (c *Cluster) SlowRequests(min time.Duration, max int) []string {
	var out []string
	add := func(line string) bool {
		if len(out) == max {
			return false
		}
		out = append(out, line)
		return true
	}
	keep := map[string]bool{}
	scanLog(c.logPath("kube-apiserver"), func(line string) bool {
		if m := traceHeader.FindStringSubmatch(line); m != nil {
			ms, _ := strconv.Atoi(m[2])
			if time.Duration(ms)*time.Millisecond < min {
				return true
			}
			keep[m[1]] = true
			return add("kube-apiserver: " + line)
		}
		if i := strings.Index(line, "Trace["); i >= 0 {
			id, _, _ := strings.Cut(line[i+len("Trace["):], "]")
			if keep[id] {
				return add("kube-apiserver: " + line)
			}
			return true
		}
		if strings.Contains(line, "post-timeout activity") || strings.Contains(line, "Timeout or abort while handling") {
			return add("kube-apiserver: " + line)
		}
		return true
	})
	scanLog(c.logPath("etcd"), func(line string) bool {
		if strings.Contains(line, "took too long") || strings.Contains(line, "slow fdatasync") || strings.Contains(line, "leader failed to send out heartbeat") {
			return add("etcd: " + line)
		}
		return true
	})
	return out
}

// scanLog calls f for each line of the file at path until f returns false; a missing file has no lines.
func scanLog(path string, f func(string) bool) {
	file, err := os.Open(path)
	if err != nil {
		return
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if !f(sc.Text()) {
			return
		}
	}
}
