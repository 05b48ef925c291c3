package devcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSlowRequests(t *testing.T) {
	c := &Cluster{dir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(c.dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	apiserver := `I1207 15:33:01.100000   1 trace.go:236] Trace[11]: "Create" resource:pods,verb:POST (07-Dec-2026 15:33:00.500) (total time: 600ms):
Trace[11]: ---"Write to database call succeeded" 590ms (15:33:01.090)
Trace[11]: [600ms] [600ms] END
I1207 15:33:35.100000   1 trace.go:236] Trace[12]: "Create" resource:pods,verb:POST (07-Dec-2026 15:33:00.100) (total time: 35001ms):
Trace[12]: ---"About to store object in database" 34000ms (15:33:34.100)
Trace[12]: [35.001s] [35.001s] END
E1207 15:33:35.200000   1 finisher.go:175] "Unhandled Error" err="FinishRequest: post-timeout activity - time-elapsed: 100ms, POST \"/api/v1/namespaces/x/pods\" result: <nil>"
I1207 15:33:36.000000   1 controller.go:615] quota admission added evaluator for: leases.coordination.k8s.io
`
	etcd := `{"level":"warn","ts":"2026-12-07T15:33:20Z","caller":"etcdserver/util.go:170","msg":"apply request took too long","took":"20s"}
{"level":"warn","ts":"2026-12-07T15:33:21Z","caller":"embed/config.go:956","msg":"Running http and grpc server on single port."}
`
	for name, text := range map[string]string{"kube-apiserver": apiserver, "etcd": etcd} {
		if err := os.WriteFile(c.logPath(name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := c.SlowRequests(time.Second, 100)
	want := []string{
		"kube-apiserver: " + strings.Split(apiserver, "\n")[3],
		"kube-apiserver: Trace[12]: ---\"About to store object in database\" 34000ms (15:33:34.100)",
		"kube-apiserver: Trace[12]: [35.001s] [35.001s] END",
		"kube-apiserver: " + strings.Split(apiserver, "\n")[6],
		"etcd: " + strings.Split(etcd, "\n")[0],
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("SlowRequests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := c.SlowRequests(time.Second, 2); len(got) != 2 {
		t.Errorf("SlowRequests(max 2) returned %d lines", len(got))
	}
	if got := (&Cluster{dir: t.TempDir()}).SlowRequests(0, 10); len(got) != 0 {
		t.Errorf("a cluster without logs: %q", got)
	}
}
