package devcluster

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
)

// Names and labels of the real node. Pods choose it with a node selector on RealNodeLabel, or simply by not
// tolerating FakeNodeTaint, which every kwok node carries while a real node runs.
const (
	// RealNodeName is the real node's Node name.
	RealNodeName = "real-node"
	// RealNodeLabel is set to "true" on the real node.
	RealNodeLabel = "manta.dev/real-node"
	// RegistryPort is where the node's local registry listens, on the node's address.
	RegistryPort = 5000
	// coreDNSPort is CoreDNS's port on the node's address, where pods' resolv.conf points.
	coreDNSPort = 53
	// kubeletPort is the kubelet's API on the node's address (logs, exec, port-forward).
	kubeletPort = 10250
	// RealNodeEvictionMemory is the kubelet's hard eviction threshold for memory, the only reservation it has: the
	// real node's allocatable memory is the machine's less this, its allocatable CPU all of the machine's.
	RealNodeEvictionMemory = "100Mi"
)

// FakeNodeTaint keeps pods off the kwok nodes while a real node runs: a pod that tolerates it may land on either.
const FakeNodeTaint = FakeNodeAnnotation

// nodePaths are the real node's files, all under dir (<cluster dir>/node) but the CNI plugins.
type nodePaths struct {
	dir                 string
	containerdConfig    string
	containerdRoot      string
	containerdState     string
	containerdSocket    string
	registryHosts       string // containerd's config_path: <host>/hosts.toml per registry
	cniConfDir, cniBin  string
	cniIPAM             string // host-local's leases
	kubeletConfig       string
	kubeletRoot         string
	podLogs             string
	resolvConf          string // the kubelet's upstream resolv.conf, for pods with dnsPolicy Default
	kubeletKubeconfig   string
	kubeProxyConfig     string
	kubeProxyKubeconfig string
	coreDNSConfig       string
	coreDNSKubeconfig   string
	operatorKubeconfig  string // the admin's, through the node's address: for processes inside the namespace
	registryBlobs       string // under BinDir: the images' blobs survive the cluster
}

func newNodePaths(clusterDir, binDir string) nodePaths {
	d := filepath.Join(clusterDir, "node")
	return nodePaths{
		dir:                 d,
		containerdConfig:    filepath.Join(d, "containerd.toml"),
		containerdRoot:      filepath.Join(d, "containerd", "root"),
		containerdState:     filepath.Join(d, "containerd", "state"),
		containerdSocket:    filepath.Join(d, "containerd", "containerd.sock"),
		registryHosts:       filepath.Join(d, "containerd", "hosts"),
		cniConfDir:          filepath.Join(d, "cni", "net.d"),
		cniBin:              filepath.Join(binDir, "cni"),
		cniIPAM:             filepath.Join(d, "cni", "ipam"),
		kubeletConfig:       filepath.Join(d, "kubelet.yaml"),
		kubeletRoot:         filepath.Join(d, "kubelet"),
		podLogs:             filepath.Join(d, "pod-logs"),
		resolvConf:          filepath.Join(d, "resolv.conf"),
		kubeletKubeconfig:   filepath.Join(d, "kubelet.kubeconfig"),
		kubeProxyConfig:     filepath.Join(d, "kube-proxy.yaml"),
		kubeProxyKubeconfig: filepath.Join(d, "kube-proxy.kubeconfig"),
		coreDNSConfig:       filepath.Join(d, "Corefile"),
		coreDNSKubeconfig:   filepath.Join(d, "coredns.kubeconfig"),
		operatorKubeconfig:  filepath.Join(d, "admin.kubeconfig"),
		registryBlobs:       filepath.Join(binDir, "registry", "blobs"),
	}
}

// mirroredRegistries are the registries whose images the node pulls from its local registry; "_default" is
// containerd's name for every other one, so no pull ever leaves the machine.
var mirroredRegistries = []string{"docker.io", "registry.k8s.io", "quay.io", "ghcr.io", "_default"}

// registryHostsTOML is containerd's hosts.toml for one registry: the local registry is the server itself, not a
// mirror in front of the real one, so a missing image fails there (ErrImagePull naming it) instead of falling back
// to the internet.
func registryHostsTOML(registry string) string {
	return fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+registry, "http://"+registry)
}

// containerdConfig is containerd's configuration: everything under the node's directory, the CRI plugin's sandbox
// image pinned (nothing can pull it from the internet), and no negative oom_score_adj (processes here lack
// CAP_SYS_RESOURCE, and runc fails the sandbox with "can't get final child's PID from pipe: EOF" without it).
func containerdConfig(p nodePaths, pauseImage string) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return strings.Join([]string{
		`version = 4`,
		`root = ` + q(p.containerdRoot),
		`state = ` + q(p.containerdState),
		`temp = ` + q(filepath.Join(p.dir, "containerd", "tmp")),
		``,
		`[plugins.'io.containerd.server.v1.grpc']`,
		`  address = ` + q(p.containerdSocket),
		``,
		`[plugins.'io.containerd.server.v1.ttrpc']`,
		`  address = ` + q(p.containerdSocket+".ttrpc"),
		``,
		`[plugins.'io.containerd.cri.v1.images']`,
		`  snapshotter = 'overlayfs'`,
		`  [plugins.'io.containerd.cri.v1.images'.pinned_images]`,
		`    sandbox = ` + q(pauseImage),
		`  [plugins.'io.containerd.cri.v1.images'.registry]`,
		`    config_path = ` + q(p.registryHosts),
		``,
		`[plugins.'io.containerd.cri.v1.runtime']`,
		`  restrict_oom_score_adj = true`,
		`  netns_mounts_under_state_dir = true`,
		`  enable_unprivileged_ports = true`,
		`  enable_unprivileged_icmp = true`,
		`  cdi_spec_dirs = []`,
		`  [plugins.'io.containerd.cri.v1.runtime'.cni]`,
		`    bin_dirs = [` + q(p.cniBin) + `]`,
		`    conf_dir = ` + q(p.cniConfDir),
		``,
		`[plugins.'io.containerd.grpc.v1.cri']`,
		`  stream_server_address = '127.0.0.1'`,
		``,
		`[plugins.'io.containerd.nri.v1.nri']`,
		`  disable = true`,
		``,
		`[plugins.'io.containerd.transfer.v1.local']`,
		`  config_path = ` + q(p.registryHosts),
		``,
	}, "\n")
}

// cniConfig is the pod network: a bridge inside the node's namespace with host-local addresses from the slot's
// pod range, the bridge as every pod's gateway, and portmap for hostPort. No masquerading: the root namespace
// routes the pod range to the node.
func cniConfig(n nodeNet, p nodePaths) ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.cniNetwork,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      "cni0",
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": p.cniIPAM,
					"ranges":  [][]map[string]string{{{"subnet": n.podCIDR.String(), "gateway": firstIP(n.podCIDR).String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}, "", "  ")
}

// kubeletConfig is the KubeletConfiguration. cgroup v1 is mounted here (failCgroupV1: false) and nothing runs
// systemd's cgroup manager (cgroupfs); the node's pods live under the slot's own cgroup, so a cleanup finds every
// process of theirs. Only clients with a certificate from the dev cluster's CA (the API server) may call it.
// Eviction thresholds are low: the node shares the machine's disk with everything else, and a pod evicted for a
// disk another program filled would be a puzzle.
func kubeletConfig(n nodeNet, p nodePaths, pk *pki) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return strings.Join([]string{
		`apiVersion: kubelet.config.k8s.io/v1beta1`,
		`kind: KubeletConfiguration`,
		`failCgroupV1: false`,
		`cgroupDriver: cgroupfs`,
		`cgroupRoot: ` + q("/"+n.cgroupParent),
		`address: ` + q(n.nodeIP.Addr().String()),
		fmt.Sprintf("port: %d", kubeletPort),
		`readOnlyPort: 0`,
		`healthzBindAddress: 127.0.0.1`,
		`healthzPort: 10248`,
		`tlsCertFile: ` + q(pk.kubeletServingCert),
		`tlsPrivateKeyFile: ` + q(pk.kubeletServingKey),
		`authentication:`,
		`  anonymous: {enabled: false}`,
		`  webhook: {enabled: false}`,
		`  x509: {clientCAFile: ` + q(pk.caCert) + `}`,
		`authorization: {mode: AlwaysAllow}`,
		`clusterDNS: [` + q(n.nodeIP.Addr().String()) + `]`,
		`clusterDomain: cluster.local`,
		`resolvConf: ` + q(p.resolvConf),
		`podLogsDir: ` + q(p.podLogs),
		`containerRuntimeEndpoint: ` + q("unix://"+p.containerdSocket),
		`failSwapOn: false`,
		`serializeImagePulls: false`,
		`maxPods: 110`,
		`evictionHard: {memory.available: ` + RealNodeEvictionMemory + `, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}`,
		`imageGCHighThresholdPercent: 99`,
		`imageGCLowThresholdPercent: 98`,
		`nodeStatusReportFrequency: 10s`,
		`registerNode: true`,
		``,
	}, "\n")
}

// kubeProxyConfig is kube-proxy's configuration: iptables mode inside the node's namespace, masquerading all
// Service traffic so a pod reaching a Service backed by a pod on the same bridge gets its answer back through the
// node (the kernel here has no br_netfilter in the node's namespace to do it otherwise). Conntrack limits are
// machine-wide sysctls: left alone.
func kubeProxyConfig(n nodeNet, p nodePaths) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return strings.Join([]string{
		`apiVersion: kubeproxy.config.k8s.io/v1alpha1`,
		`kind: KubeProxyConfiguration`,
		`clientConnection: {kubeconfig: ` + q(p.kubeProxyKubeconfig) + `}`,
		`hostnameOverride: ` + RealNodeName,
		`bindAddress: ` + q(n.nodeIP.Addr().String()),
		`healthzBindAddress: ` + q(n.nodeIP.Addr().String()+":10256"),
		`metricsBindAddress: 127.0.0.1:10249`,
		`mode: iptables`,
		`clusterCIDR: ` + q(n.podCIDR.String()),
		`iptables: {masqueradeAll: true, minSyncPeriod: 0s, syncPeriod: 30s}`,
		`conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}`,
		``,
	}, "\n")
}

// coreDNSConfig serves cluster.local (Services, headless ones included, and pod records) and the reverse zones
// of the pod and Service ranges from the API server, on the node's address. Nothing is forwarded: no name
// outside the cluster resolves, as nothing outside it is reachable.
func coreDNSConfig(n nodeNet, p nodePaths) string {
	return fmt.Sprintf(`.:%d {
    bind %s
    errors
    log . {
        class denial error
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s manta-dev
        pods insecure
        ttl 5
    }
    cache 5
}
`, coreDNSPort, n.nodeIP.Addr(), p.coreDNSKubeconfig)
}

// resolvConf is the kubelet's upstream resolver file: pods with dnsPolicy Default get it. The node has no resolver
// but CoreDNS.
func resolvConf(n nodeNet) string {
	return "nameserver " + n.nodeIP.Addr().String() + "\nsearch svc.cluster.local cluster.local\noptions ndots:5\n"
}
