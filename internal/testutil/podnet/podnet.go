// Package podnet makes a dev cluster's fake (kwok) pods reachable at their IPs: kwok gives pods IPs in Range (from
// each node's spec.podCIDR, which SetNodeCIDRs sets), the root namespace routes Range through a veth pair into one
// network namespace where the range is local, so one listener there accepts a connection to any pod IP and sees
// which pod it was meant for. The API server (and so its services/proxy and pods/proxy) reaches fake Ray heads that
// way. Needs root. 198.18.0.0/15 is set aside for benchmarks; the dev cluster's real nodes use 198.18.0-3.0/24,
// 198.18.128.0/17 and 198.18.254.0/24, test/ray 198.19.0.0/16. One Network at a time on a machine: New refuses
// while another run routes the range.
package podnet

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/sys/netns"
)

const (
	// Range holds every fake pod IP.
	Range        = "198.18.64.0/18"
	rangeBase    = 64 // third octet of Range's first address
	nodeCIDRBits = 22
	linkHost     = "198.18.63.253"
	linkPeer     = "198.18.63.254"
	linkNet      = "/30"
	ipCmd        = "/usr/sbin/ip"
	netnsPrefix  = "manta-podnet-"
)

// NodeCIDR is the i-th fake node's pod CIDR.
func NodeCIDR(i int) (string, error) {
	third := rangeBase + i*(1<<(24-nodeCIDRBits))
	if third > 127 {
		return "", fmt.Errorf("%d fake nodes: %s has room for %d /%d pod CIDRs", i+1, Range, 64>>(24-nodeCIDRBits), nodeCIDRBits)
	}
	return fmt.Sprintf("198.18.%d.0/%d", third, nodeCIDRBits), nil
}

// InRange says whether ip is in Range.
func InRange(ip string) bool {
	_, n, _ := net.ParseCIDR(Range)
	a := net.ParseIP(ip)
	return a != nil && n.Contains(a)
}

// SetNodeCIDRs gives every node a pod CIDR in Range (NodeCIDR, by node name order), which kwok allocates pod IPs
// from. Call it before any pod exists.
func SetNodeCIDRs(ctx context.Context, cl client.Client) error {
	nodes := &corev1.NodeList{}
	if err := cl.List(ctx, nodes); err != nil {
		return err
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	for i := range nodes.Items {
		cidr, err := NodeCIDR(i)
		if err != nil {
			return err
		}
		patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%[1]q]}}`, cidr)
		if err := cl.Patch(ctx, &nodes.Items[i], client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			return fmt.Errorf("node %s: pod CIDR: %w", nodes.Items[i].Name, err)
		}
	}
	return nil
}

func ip(args ...string) error {
	out, err := exec.Command(ipCmd, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Network is the namespace that answers for every pod IP.
type Network struct {
	name, hostIf string
}

// removeStale removes what a killed run left: its namespace (and with it the veth pair and the namespace's routes),
// and the root namespace's route to Range through it.
func removeStale() {
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

// New creates the namespace, the veth pair and the routes; Close removes them. A run killed before Close leaves
// them to the next New, which removes the namespaces of processes that no longer exist.
func New() (*Network, error) {
	removeStale()
	// A route into the range (another run, a real node) would take some pod IPs away from this one.
	for _, sel := range [][]string{{"root", Range}, {"match", Range}, {"root", linkHost + linkNet}} {
		out, err := exec.Command(ipCmd, append([]string{"-4", "route", "show", "to"}, sel...)...).Output()
		if err != nil {
			return nil, fmt.Errorf("ip route show to %s: %v", strings.Join(sel, " "), err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" && !strings.HasPrefix(line, "default ") {
				return nil, fmt.Errorf("%s or %s is routed already (another oracle or bench run, a real node?): %s", Range, linkHost+linkNet, line)
			}
		}
	}
	pid := strconv.Itoa(os.Getpid())
	n := &Network{name: netnsPrefix + pid, hostIf: hostIf(pid)}
	peer := strings.TrimSuffix(n.hostIf, "h") + "p"
	for _, s := range [][]string{
		{"netns", "add", n.name},
		{"link", "add", n.hostIf, "type", "veth", "peer", "name", peer, "netns", n.name},
		{"addr", "add", linkHost + linkNet, "dev", n.hostIf},
		{"link", "set", n.hostIf, "up"},
		{"-n", n.name, "addr", "add", linkPeer + linkNet, "dev", peer},
		{"-n", n.name, "link", "set", peer, "up"},
		{"-n", n.name, "link", "set", "lo", "up"},
		{"-n", n.name, "route", "add", "local", Range, "dev", "lo"},
		{"route", "add", Range, "via", linkPeer, "dev", n.hostIf},
	} {
		if err := ip(s...); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

// NewForTest is New, failing t on an error and closed when t ends.
func NewForTest(t testing.TB) *Network {
	t.Helper()
	n, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// Close removes the route, the namespace and the veth pair. Listeners made in the namespace must be closed too.
func (n *Network) Close() {
	_ = ip("route", "del", Range)
	_ = ip("netns", "del", n.name)
	_ = ip("link", "del", n.hostIf) // gone with the namespace already, normally
}

// Listen opens a TCP listener inside the namespace.
func (n *Network) Listen(addr string) (net.Listener, error) {
	return netns.Listen(netns.Named(n.name), "tcp4", addr)
}
