package devcluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/manta-dev/manta/internal/sys/netns"
)

// A real node lives in one of realNodeSlots slots, so a `manta dev` and the real-node tests can run side by side.
// Each slot has its own network namespace, links and addresses, all in 198.18.0.0/15 (set aside for benchmarking),
// so nothing is routed to a private range:
//
//	slot k: the link       198.18.254.4k/30 (.4k+1 on the root side, .4k+2 the node's address)
//	        pods           198.18.k.0/24    (the node's bridge, inside its namespace)
//	        Services       198.18.(128+16k).0/20 (the API server's --service-cluster-ip-range)
//
// The root namespace gets only the link's address and two routes through it (pods and Services); the bridge, the
// pods' veths and every rule kube-proxy writes are inside the node's namespace, so deleting it removes them.
const realNodeSlots = 4

// nodeNet is the addressing of one slot.
type nodeNet struct {
	slot          int
	netns         string       // the network namespace (ip netns), /run/netns/<netns>
	hostLink      string       // the root-namespace end of the veth; the node's end is eth0 in netns
	hostIP        netip.Prefix // on hostLink
	nodeIP        netip.Prefix // on the node's eth0: the node's InternalIP, where its servers listen
	podCIDR       netip.Prefix
	serviceCIDR   netip.Prefix
	cgroupParent  string // the kubelet's cgroupRoot, under every mounted hierarchy
	cniNetwork    string // the CNI network's name (the prefix of its cache files under /var/lib/cni)
	resolvConfDir string // /etc/netns/<netns>: what `ip netns exec` shows as /etc
}

// kwokServiceCIDR is the Service range of a dev cluster without a real node: nothing routes it, it only has to
// stay off the private ranges.
var kwokServiceCIDR = netip.MustParsePrefix("198.18.128.0/17")

func slotNet(k int) nodeNet {
	return nodeNet{
		slot:          k,
		netns:         "manta-node-" + strconv.Itoa(k),
		hostLink:      "manta-" + strconv.Itoa(k),
		hostIP:        netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, 254, byte(4*k + 1)}), 30),
		nodeIP:        netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, 254, byte(4*k + 2)}), 30),
		podCIDR:       netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(k), 0}), 24),
		serviceCIDR:   netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(128 + 16*k), 0}), 20),
		cgroupParent:  "manta-dev-" + strconv.Itoa(k),
		cniNetwork:    "manta-dev-" + strconv.Itoa(k),
		resolvConfDir: "/etc/netns/manta-node-" + strconv.Itoa(k),
	}
}

// firstIP is the first host address of p: the kubernetes Service's ClusterIP, or the bridge's gateway.
func firstIP(p netip.Prefix) netip.Addr { return p.Masked().Addr().Next() }

func (n nodeNet) netnsPath() string { return netns.Named(n.netns) }

// setUp creates the namespace, the veth and the routes. The node's namespace has no default route: its processes
// and pods reach the node's own address, the pods and nothing else.
func (n nodeNet) setUp(ctx context.Context) error {
	in := []string{"-n", n.netns}
	steps := [][]string{
		{"netns", "add", n.netns},
		{"link", "add", n.hostLink, "type", "veth", "peer", "name", "eth0", "netns", n.netns},
		{"addr", "add", n.hostIP.String(), "dev", n.hostLink},
		{"link", "set", n.hostLink, "up"},
		append(in, "link", "set", "lo", "up"),
		append(in, "addr", "add", n.nodeIP.String(), "dev", "eth0"),
		append(in, "link", "set", "eth0", "up"),
		{"route", "add", n.podCIDR.String(), "via", n.nodeIP.Addr().String(), "dev", n.hostLink},
		{"route", "add", n.serviceCIDR.String(), "via", n.nodeIP.Addr().String(), "dev", n.hostLink},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return err
		}
	}
	// The node routes between its pods' bridge and eth0; the setting is per namespace and off in a new one.
	return netns.Do(n.netnsPath(), func() error {
		return writeSysctl("net/ipv4/ip_forward", "1")
	})
}

// tearDown deletes the namespace (and with it eth0, the bridge, the pods' veths and kube-proxy's rules) and the
// root end of the veth with its routes, if a half-made set-up left it.
func (n nodeNet) tearDown(ctx context.Context) error {
	var errs []string
	if exists(n.netnsPath()) {
		if err := ip(ctx, "netns", "delete", n.netns); err != nil {
			errs = append(errs, err.Error())
		}
	}
	// The kernel destroys a deleted namespace's devices (eth0, and with it its veth peer) asynchronously: the
	// root end may still be listed here and gone by the time `ip link delete` runs, which is the state wanted.
	if _, err := net.InterfaceByName(n.hostLink); err == nil {
		if err := ip(ctx, "link", "delete", n.hostLink); err != nil {
			if _, still := net.InterfaceByName(n.hostLink); still == nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if err := waitLinkGone(ctx, n.hostLink); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("devcluster: remove the real node's network: %s", strings.Join(errs, "; "))
	}
	return nil
}

// waitLinkGone returns once no interface is named name: a link being destroyed is still listed (with its address
// and routes) until the kernel's cleanup finishes.
func waitLinkGone(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, err := net.InterfaceByName(name); err != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devcluster: link %s still exists: %w", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func ip(ctx context.Context, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

func writeSysctl(name, value string) error {
	if err := writeFile("/proc/sys/"+name, value); err != nil {
		return fmt.Errorf("sysctl %s: %w", strings.ReplaceAll(name, "/", "."), err)
	}
	return nil
}
