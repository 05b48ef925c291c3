package real

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/sys/liveproc"
)

// TestRealNode runs the suite on one dev cluster, step by step (each step leaves the node's CPUs free for the
// next), and ends by stopping the cluster and checking that nothing of the node is left on the machine.
func TestRealNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	suiteStart := time.Now()
	e := startEnv(t, ctx)

	steps := []struct {
		name string
		run  func(*testing.T, context.Context, *env)
	}{
		{"pause pod on the real node", testPausePod},
		{"cluster DNS and Services", testDNSAndServices},
		{"RayJob sample succeeds", testRayJobSample},
		{"RayJob sample submitted before its cluster is ready", testRayJobSampleEarly},
		{"RayCluster worker joins the head", testRayClusterWorkerJoins},
		{"start phases of a RayCluster", testStartPhases},
		{"start phases of the RayJob sample cold, warm and pre-pulled", testStartPhasesColdWarmPrepulled},
		{"RayJob modes on a selected cluster", testRayJobModesOnSelectedCluster},
		{"RayJob SidecarMode suspended and resumed", testRayJobSidecarSuspendResume},
		{"RayJobs that cannot start say why", testStartTrouble},
		{"idle clusters suspend themselves and a RayJob resumes one", testIdleSuspend},
		{"RayCluster Recreate on an image change", testRayClusterRecreate},
		{"RayService sample serves and upgrades", testRayServiceSample},
		{"autoscaler scales a group up and down", testAutoscaler},
		{"ImagePullJob pulls from the registry", testImagePullJob},
		{"REST API cluster and job", testRESTAPI},
		{"console RayJob on the real node", testConsoleRealJob},
		{"GCS fault tolerance with Redis", testGCSFaultTolerance},
		{"Ctrl-C on manta dev leaves nothing", testCtrlCLeavesNothing},
		{"a killed run is swept by the next start", testKilledRunIsSwept},
	}
	for _, s := range steps {
		start := time.Now()
		t.Run(s.name, func(t *testing.T) { s.run(t, ctx, e) })
		t.Logf("step %q took %s", s.name, time.Since(start).Round(time.Second))
	}

	t.Run("stop leaves the machine clean", func(t *testing.T) { testStopLeavesNothing(t, ctx, e) })
	t.Logf("real-node suite took %s", time.Since(suiteStart).Round(time.Second))
}

// testPausePod: a pod of the sandbox image runs on the real node with an address from the node's pod range, and
// its logs come back through the API server from the kubelet.
func testPausePod(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "pause")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pause", Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := e.waitPodPhase(t, ctx, ns, "pause", 3*time.Minute, corev1.PodRunning)
	if got.Spec.NodeName != devcluster.RealNodeName {
		t.Fatalf("pod ran on %q, want the real node %q (kwok nodes carry %s)", got.Spec.NodeName, devcluster.RealNodeName, devcluster.FakeNodeTaint)
	}
	ip, err := netip.ParseAddr(got.Status.PodIP)
	if err != nil || !netip.MustParsePrefix("198.18.0.0/16").Contains(ip) {
		t.Fatalf("pod IP %q, want one in 198.18.0.0/16", got.Status.PodIP)
	}
	// The sandbox image prints nothing; that the API server gets the (empty) log from the kubelet is the point.
	if _, err := e.logs(ctx, ns, "pause", "pause"); err != nil {
		t.Fatalf("logs of a pod on the real node: %v", err)
	}
	if out, err := e.kubectlOut(ctx, "-n", ns, "logs", "pause"); err != nil {
		t.Fatalf("kubectl logs: %v: %s", err, out)
	}
	e.deleteNamespace(t, ctx, ns)
}

// testStopLeavesNothing stops the cluster and looks for what the real node made.
func testStopLeavesNothing(t *testing.T, ctx context.Context, e *env) {
	c := e.cluster
	dir, netns := c.Dir(), c.NodeNetns()
	// By pid and start time: the test run starts thousands of processes and pid_max is 32768, so a stopped
	// daemon's pid can be another program's a moment later.
	procs := map[string]liveproc.ID{}
	for name, pid := range c.PIDs() {
		if id, ok := liveproc.Of(pid); ok {
			procs[name] = id
		} else {
			t.Errorf("%s (pid %d) had exited before the cluster was stopped", name, pid)
		}
	}
	e.stopOperator()
	// The slot stays locked while it is checked: set free, another package's real node (they run beside this one)
	// takes it, and its fresh namespace, link and record would read as this node's leftovers.
	release, err := c.StopHoldingSlot()
	defer release()
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
	for name, id := range procs {
		if id.Exists() {
			t.Errorf("%s (%v) still runs", name, id)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory %s left (%v)", dir, err)
	}
	checkNodeGone(t, ctx, dir, strings.TrimPrefix(netns, "manta-node-"))
}

// checkNodeGone looks for what the real node of slot k, with its files under dir, made: processes naming dir
// (containerd's shims, containers' processes), mounts under dir, its network namespace, the root end of its link
// and routes, its cgroups, /etc/netns/<netns> and the slot's record.
func checkNodeGone(t *testing.T, ctx context.Context, dir, slot string) {
	t.Helper()
	k, err := strconv.Atoi(slot)
	if err != nil {
		t.Fatalf("slot %q: %v", slot, err)
	}
	netns := "manta-node-" + slot
	hostIP := fmt.Sprintf("198.18.254.%d", 4*k+1)
	nodeIP := fmt.Sprintf("198.18.254.%d", 4*k+2)
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if strings.Contains(string(cmdline), dir) {
			t.Errorf("process %s still runs: %s", d.Name(), strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/manta-dev-" + slot)
	if len(cgroups) > 0 {
		t.Errorf("cgroups left: %v", cgroups)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (strings.HasPrefix(f[4], dir) || strings.HasSuffix(f[4], "/netns/"+netns)) {
			t.Errorf("mount left: %s", line)
		}
	}
	for _, path := range []string{"/run/netns/" + netns, "/etc/netns/" + netns, "/run/manta-dev/node-" + slot + ".json"} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left (%v)", path, err)
		}
	}
	out, err := exec.CommandContext(ctx, "ip", "-o", "addr", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr: %v: %s", err, out)
	}
	if strings.Contains(string(out), " "+hostIP+"/") {
		t.Errorf("the node link's address %s is left:\n%s", hostIP, out)
	}
	out, err = exec.CommandContext(ctx, "ip", "route", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip route: %v: %s", err, out)
	}
	if strings.Contains(string(out), "via "+nodeIP+" ") {
		t.Errorf("routes through the node are left:\n%s", out)
	}
}
