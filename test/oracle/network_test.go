package oracle

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The oracle's pods get their IPs from podRange (kwok allocates from each fake node's spec.podCIDR, one /21 of it
// per node). One network namespace answers for the whole range: the root namespace routes it through a veth pair
// (linkNet) into the namespace, where it is local, so one listener there accepts a connection to any pod IP and
// sees which pod it was meant for. 198.18.0.0/15 is set aside for benchmarks; the dev cluster's real nodes use
// 198.18.0-3.0/24, 198.18.128.0/17 and 198.18.254.0/24, test/ray 198.19.0.0/16.
const (
	podRange     = "198.18.64.0/18"
	podRangeBase = 64 // third octet of podRange's first address
	nodeCIDRBits = 22
	linkHost     = "198.18.63.253"
	linkPeer     = "198.18.63.254"
	linkNet      = "/30"
	ipCmd        = "/usr/sbin/ip"
	netnsPrefix  = "manta-oracle-"
)

// nodeCIDR is the i-th fake node's pod CIDR.
func nodeCIDR(i int) (string, error) {
	third := podRangeBase + i*(1<<(24-nodeCIDRBits))
	if third > 127 {
		return "", fmt.Errorf("%d fake nodes: %s has room for %d /%d pod CIDRs", i+1, podRange, 64>>(24-nodeCIDRBits), nodeCIDRBits)
	}
	return fmt.Sprintf("198.18.%d.0/%d", third, nodeCIDRBits), nil
}

func ip(args ...string) error {
	out, err := exec.Command(ipCmd, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// podNetwork is the namespace that answers for every pod IP.
type podNetwork struct {
	name, hostIf string
}

// removeStaleNetwork removes what a killed run left: its namespace (and with it the veth pair and the namespace's
// routes), and the root namespace's route to podRange through it.
func removeStaleNetwork() {
	out, err := exec.Command(ipCmd, "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		pid, ok := strings.CutPrefix(name, netnsPrefix)
		if !ok {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue
		}
		_ = ip("netns", "del", name)
		_ = ip("link", "del", hostIf(pid))
	}
}

func hostIf(pid string) string {
	n := "mor" + pid + "h"
	if len(n) > 15 {
		n = n[:14] + "h"
	}
	return n
}

// newPodNetwork creates the namespace, the veth pair and the routes, and removes them when the test ends.
func newPodNetwork(t *testing.T) *podNetwork {
	t.Helper()
	removeStaleNetwork()
	// A route into the range (another oracle run, a real node) would take some pod IPs away from the fake heads.
	for _, sel := range [][]string{{"root", podRange}, {"match", podRange}, {"root", linkHost + linkNet}} {
		out, err := exec.Command(ipCmd, append([]string{"-4", "route", "show", "to"}, sel...)...).Output()
		if err != nil {
			t.Fatalf("ip route show to %s: %v", strings.Join(sel, " "), err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" && !strings.HasPrefix(line, "default ") {
				t.Fatalf("%s or %s is routed already (another oracle run, a real node?): %s", podRange, linkHost+linkNet, line)
			}
		}
	}
	pid := strconv.Itoa(os.Getpid())
	n := &podNetwork{name: netnsPrefix + pid, hostIf: hostIf(pid)}
	peer := strings.TrimSuffix(n.hostIf, "h") + "p"
	t.Cleanup(func() {
		_ = ip("route", "del", podRange)
		_ = ip("netns", "del", n.name)
		_ = ip("link", "del", n.hostIf) // gone with the namespace already, normally
	})
	for _, s := range [][]string{
		{"netns", "add", n.name},
		{"link", "add", n.hostIf, "type", "veth", "peer", "name", peer, "netns", n.name},
		{"addr", "add", linkHost + linkNet, "dev", n.hostIf},
		{"link", "set", n.hostIf, "up"},
		{"-n", n.name, "addr", "add", linkPeer + linkNet, "dev", peer},
		{"-n", n.name, "link", "set", peer, "up"},
		{"-n", n.name, "link", "set", "lo", "up"},
		{"-n", n.name, "route", "add", "local", podRange, "dev", "lo"},
		{"route", "add", podRange, "via", linkPeer, "dev", n.hostIf},
	} {
		if err := ip(s...); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// listen opens a TCP listener inside the namespace: only the creating thread switches namespaces, and a socket
// stays in the namespace it was made in.
func (n *podNetwork) listen(addr string) (net.Listener, error) {
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer func() { _ = self.Close() }()
	target, err := os.Open("/var/run/netns/" + n.name)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer func() { _ = target.Close() }()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("setns %s: %w", n.name, err)
	}
	l, lerr := (&net.ListenConfig{}).Listen(context.Background(), "tcp4", addr)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread is stuck in the other namespace: keep it locked so the runtime discards it.
		if l != nil {
			_ = l.Close()
		}
		return nil, fmt.Errorf("setns back: %w", err)
	}
	runtime.UnlockOSThread()
	return l, lerr
}
