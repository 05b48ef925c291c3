package devcluster

import (
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestSlotNetworksStayInTheBenchmarkRange: every address a real node uses is in 198.18.0.0/15 (never a private
// range), and no two slots share one, so dev clusters with real nodes can run side by side.
func TestSlotNetworksStayInTheBenchmarkRange(t *testing.T) {
	bench := netip.MustParsePrefix("198.18.0.0/15")
	var all []netip.Prefix
	for k := 0; k < realNodeSlots; k++ {
		n := slotNet(k)
		if n.hostIP.Masked() != n.nodeIP.Masked() || n.hostIP.Addr() == n.nodeIP.Addr() {
			t.Errorf("slot %d: link ends %s and %s are not two addresses of one subnet", k, n.hostIP, n.nodeIP)
		}
		for _, p := range []netip.Prefix{n.hostIP.Masked(), n.podCIDR, n.serviceCIDR} {
			if !bench.Contains(p.Addr()) || p.Bits() < bench.Bits() {
				t.Errorf("slot %d: %s is outside %s", k, p, bench)
			}
			for _, q := range all {
				if p.Overlaps(q) {
					t.Errorf("slot %d: %s overlaps %s", k, p, q)
				}
			}
			all = append(all, p)
		}
		if len(n.hostLink) > 15 {
			t.Errorf("slot %d: link name %q is longer than a Linux interface name may be", k, n.hostLink)
		}
	}
	if !bench.Contains(kwokServiceCIDR.Addr()) {
		t.Errorf("the fake-node cluster's Service range %s is outside %s", kwokServiceCIDR, bench)
	}
}

// TestNodeConfigs checks the settings this machine needs in each daemon's configuration (see DESIGN's facts: no
// negative oom_score_adj, the pinned sandbox image, cgroup v1 with cgroupfs) and that the YAML ones parse.
func TestNodeConfigs(t *testing.T) {
	n := slotNet(1)
	p := newNodePaths("/tmp/manta-dev-x", "/repo/bin")
	pk := &pki{caCert: "/ca.crt", kubeletServingCert: "/k.crt", kubeletServingKey: "/k.key"}

	cd := containerdConfig(p, "registry.k8s.io/pause:3.10")
	for _, want := range []string{
		"restrict_oom_score_adj = true",
		`sandbox = "registry.k8s.io/pause:3.10"`,
		`config_path = "/tmp/manta-dev-x/node/containerd/hosts"`,
		`bin_dirs = ["/repo/bin/cni"]`,
		`root = "/tmp/manta-dev-x/node/containerd/root"`,
		`address = "/tmp/manta-dev-x/node/containerd/containerd.sock"`,
	} {
		if !strings.Contains(cd, want) {
			t.Errorf("containerd config lacks %s:\n%s", want, cd)
		}
	}

	var kubelet map[string]any
	if err := yaml.UnmarshalStrict([]byte(kubeletConfig(n, p, pk)), &kubelet); err != nil {
		t.Fatalf("kubelet config: %v", err)
	}
	for key, want := range map[string]any{
		"failCgroupV1":  false,
		"cgroupDriver":  "cgroupfs",
		"cgroupRoot":    "/manta-dev-1",
		"address":       "198.18.254.6",
		"clusterDomain": "cluster.local",
		"clusterDNS":    []any{"198.18.254.6"},
		"authorization": map[string]any{"mode": "AlwaysAllow"},
	} {
		if got := kubelet[key]; !equalJSON(got, want) {
			t.Errorf("kubelet config %s = %v, want %v", key, got, want)
		}
	}

	var proxy map[string]any
	if err := yaml.UnmarshalStrict([]byte(kubeProxyConfig(n, p)), &proxy); err != nil {
		t.Fatalf("kube-proxy config: %v", err)
	}
	if proxy["clusterCIDR"] != "198.18.1.0/24" || proxy["mode"] != "iptables" {
		t.Errorf("kube-proxy config: clusterCIDR %v mode %v", proxy["clusterCIDR"], proxy["mode"])
	}

	cni, err := cniConfig(n, p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cni), `"subnet": "198.18.1.0/24"`) || !strings.Contains(string(cni), `"name": "manta-dev-1"`) {
		t.Errorf("CNI config:\n%s", cni)
	}
	if got := registryHostsTOML("198.18.254.6:5000"); !strings.HasPrefix(got, `server = "http://198.18.254.6:5000"`) {
		t.Errorf("hosts.toml does not make the local registry the server:\n%s", got)
	}
	if got := coreDNSConfig(n, p); !strings.Contains(got, "bind 198.18.254.6") || strings.Contains(got, "forward") {
		t.Errorf("Corefile must serve on the node's address and forward nothing:\n%s", got)
	}
}

func equalJSON(a, b any) bool {
	x, err1 := yaml.Marshal(a)
	y, err2 := yaml.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\`: `/x\`, `/t\011`: "/t\t"} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
