// Package real holds the real-node suite: the dev cluster with its real node (kubelet, containerd, runc, CNI,
// CoreDNS, kube-proxy, a local registry; internal/devcluster) and Manta's operator as a process, running pods and
// Ray clusters in real containers. One Ray cluster at a time, with small resources: the machine has 2 CPUs.
package real

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// env is one dev cluster with a real node and the operator running as a process in the node's network namespace,
// where it resolves head Services through cluster DNS as an in-cluster operator does.
type env struct {
	cluster  *devcluster.Cluster
	cs       kubernetes.Interface
	cl       client.Client
	kubectl  string
	operator *exec.Cmd
	opLog    string
	opBin    string // the operator binary, built once
}

func startEnv(t *testing.T, ctx context.Context) *env {
	t.Helper()
	e := startCluster(t, ctx)
	e.startOperator(t)
	return e
}

// startCluster starts the dev cluster with its real node and no operator: startEnv runs Manta's in the node's
// namespace, a benchmark one operator or another.
func startCluster(t testing.TB, ctx context.Context) *env {
	t.Helper()
	root := testutil.MustRepoRoot(t)
	binDir := filepath.Join(root, "bin")
	if err := devcluster.RealNodeSupport(binDir); err != nil {
		t.Fatalf("this machine cannot run the real node: %v", err)
	}
	start := time.Now()
	c, err := devcluster.Start(ctx, devcluster.Options{Nodes: 1, RealNode: true, Logf: t.Logf})
	if err != nil {
		t.Fatalf("start the dev cluster with a real node: %v", err)
	}
	e := &env{cluster: c, kubectl: filepath.Join(binDir, "kubectl")}
	// Stop is idempotent: the suite's last step stops the cluster itself and checks what is left.
	t.Cleanup(func() {
		e.stopOperator()
		if err := c.Stop(); err != nil {
			t.Errorf("stop the dev cluster: %v", err)
		}
	})
	t.Logf("dev cluster with a real node up in %s", time.Since(start).Round(time.Millisecond))
	e.cs = kubernetes.NewForConfigOrDie(c.RESTConfig())
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if e.cl, err = client.New(c.RESTConfig(), client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	return e
}

// startOperator runs `manta operator` in the node's namespace (ip netns exec shows it cluster DNS as
// /etc/resolv.conf), so it reaches Ray heads directly at <head-svc>.<ns>.svc.cluster.local.
func (e *env) startOperator(t *testing.T) {
	t.Helper()
	e.runOperator(t, true)
}

// runOperator starts the operator in the node's namespace (inNode) or in this machine's, where cluster DNS names
// do not resolve and only the API server leads to the heads (--use-kubernetes-proxy); extra flags go after the
// suite's own. A restarted operator appends to the same log.
func (e *env) runOperator(t *testing.T, inNode bool, extra ...string) {
	t.Helper()
	if e.opBin == "" {
		// startEnv builds it, into the suite's temporary directory: steps restart the operator from there.
		bin, err := testutil.BuildMantaTo(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		e.opBin = bin
	}
	e.opLog = filepath.Join(e.cluster.Dir(), "logs", "operator.log")
	log, err := os.OpenFile(e.opLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"operator",
		"--metrics-addr=0", "--health-probe-bind-address=0", "--enable-leader-election=false", "--reconcile-concurrency=2"}, extra...)
	cmd := exec.Command(e.opBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.cluster.Kubeconfig)
	if inNode {
		cmd = exec.Command("ip", append([]string{"netns", "exec", e.cluster.NodeNetns(), e.opBin}, args...)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+e.cluster.NodeKubeconfig())
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.operator = cmd
	t.Logf("operator (in the node's namespace: %v, flags %v): pid %d, log %s", inNode, extra, cmd.Process.Pid, e.opLog)
}

func (e *env) stopOperator() {
	if e.operator == nil {
		return
	}
	_ = e.operator.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = e.operator.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = e.operator.Process.Kill()
		<-done
	}
	e.operator = nil
}

// kubectlOut runs bin/kubectl against the dev cluster and returns its output.
func (e *env) kubectlOut(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, e.kubectl, append([]string{"--kubeconfig", e.cluster.Kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (e *env) namespace(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := testutil.CreateNamespaceWith(ctx, e.cs, name); err != nil {
		t.Fatal(err)
	}
	return name
}

// deleteNamespace deletes ns and waits until its pods are gone, so the next step has the node's CPUs.
func (e *env) deleteNamespace(t testing.TB, ctx context.Context, ns string) {
	t.Helper()
	// A container's PID 1 that installs no SIGTERM handler (bash, python's http.server) ignores it: one second of
	// grace instead of 30 keeps the suite short.
	grace := int64(1)
	if err := e.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitFor(t, ctx, 3*time.Minute, "pods of "+ns+" gone", func() (bool, string) {
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods left", len(pods.Items))
	})
}

// waitFor polls cond until it holds, failing with cond's last word after timeout.
func waitFor(t testing.TB, ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not after %s: %s", what, timeout, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// podReport says where a pod stands, with its last events, for failure messages.
func (e *env) podReport(ctx context.Context, ns, name string) string {
	p, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s node %q ip %q", p.Status.Phase, p.Spec.NodeName, p.Status.PodIP)
	for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, "; %s ready=%v restarts=%d", s.Name, s.Ready, s.RestartCount)
		if s.State.Waiting != nil {
			fmt.Fprintf(&b, " waiting %s: %s", s.State.Waiting.Reason, s.State.Waiting.Message)
		}
		if s.State.Terminated != nil {
			fmt.Fprintf(&b, " terminated %s (%d)", s.State.Terminated.Reason, s.State.Terminated.ExitCode)
		}
	}
	evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err == nil {
		items := evs.Items
		if len(items) > 5 {
			items = items[len(items)-5:]
		}
		for _, ev := range items {
			fmt.Fprintf(&b, "; event %s: %s", ev.Reason, ev.Message)
		}
	}
	return b.String()
}

func (e *env) waitPodPhase(t *testing.T, ctx context.Context, ns, name string, timeout time.Duration, phases ...corev1.PodPhase) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, ctx, timeout, fmt.Sprintf("pod %s/%s in %v", ns, name, phases), func() (bool, string) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, ph := range phases {
			if p.Status.Phase == ph {
				pod = p
				return true, ""
			}
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			t.Fatalf("pod %s/%s ended: %s", ns, name, e.podReport(ctx, ns, name))
		}
		return false, e.podReport(ctx, ns, name)
	})
	return pod
}

func (e *env) logs(ctx context.Context, ns, pod, container string) (string, error) {
	b, err := e.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	return string(b), err
}
