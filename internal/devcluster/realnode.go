package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/manta-dev/manta/internal/devcluster/images"
	"github.com/manta-dev/manta/internal/sys/netns"
)

// The real node: a kubelet, containerd with runc, CNI's bridge, kube-proxy and CoreDNS, running in a network
// namespace of their own (nodenet.go), with a local OCI registry serving the images the dev cluster builds
// (package images). Everything it makes is recorded under stateRoot and removed on Stop, or by the next Start
// after a killed run (nodestate.go).

// realNodeBinaries are what the real node runs from BinDir.
var realNodeBinaries = []string{
	"kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "runc", "coredns",
	"cni/bridge", "cni/host-local", "cni/loopback", "cni/portmap",
}

// realNodeTools are what it runs from the machine (Debian's iproute2, util-linux, iptables and conntrack).
var realNodeTools = []string{"ip", "nsenter", "iptables", "ip6tables", "iptables-restore", "conntrack"}

// RealNodeSupport says why this machine cannot run the real node (nil when it can): it needs root, mounted
// cgroups, the node binaries in binDir (`make tools`) and a few system tools.
func RealNodeSupport(binDir string) error {
	if os.Geteuid() != 0 {
		return errors.New("the real node needs root (it makes a network namespace, cgroups and mounts)")
	}
	roots, err := cgroupMounts()
	if err != nil || len(roots) == 0 {
		return fmt.Errorf("the real node needs cgroups mounted under /sys/fs/cgroup (%v)", err)
	}
	var missing []string
	for _, b := range realNodeBinaries {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the real node needs %s in %s (run `make tools`)", strings.Join(missing, ", "), binDir)
	}
	for _, t := range realNodeTools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the real node needs %s on PATH (run `make tools`)", strings.Join(missing, ", "))
	}
	return nil
}

// realNode is the running node's state.
type realNode struct {
	slot  *slotLock
	net   nodeNet
	paths nodePaths
	// firstProc indexes c.procs: the node's daemons are the processes from there on.
	firstProc int

	images     chan imagesResult
	registry   *http.Server
	requests   requestLog
	forwarder  net.Listener
	forwarding sync.WaitGroup
}

type imagesResult struct {
	imgs []images.Image
	err  error
}

// prepareRealNode takes a slot, cleans what earlier runs left and makes the node's network, so that the control
// plane can start with the node's addresses. It also starts building the images, which takes minutes the first
// time, while the control plane starts.
func (c *Cluster) prepareRealNode(ctx context.Context) error {
	if err := RealNodeSupport(c.opts.BinDir); err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	paths := newNodePaths(c.dir, c.opts.BinDir)
	slot, err := acquireSlot(ctx, paths.dir, c.opts.Logf)
	if err != nil {
		return err
	}
	c.node = &realNode{slot: slot, net: slot.net, paths: paths, images: make(chan imagesResult, 1)}
	if err := os.RemoveAll(paths.dir); err != nil {
		return err
	}
	if err := c.node.net.setUp(ctx); err != nil {
		return err
	}
	c.opts.Logf("devcluster: real node network %s: node %s, pods %s, Services %s", c.node.net.netns, c.node.net.nodeIP.Addr(), c.node.net.podCIDR, c.node.net.serviceCIDR)
	go func() {
		imgs, err := images.Ensure(ctx, c.opts.BinDir, c.opts.Logf)
		if err == nil {
			var manta []images.Image
			manta, err = c.mantaImage(ctx)
			imgs = append(imgs, manta...)
		}
		c.node.images <- imagesResult{imgs, err}
	}()
	return nil
}

// mantaImage is Manta's image for the node's registry: built from the repository with Options.MantaImage,
// otherwise the one `make image` left, if any.
func (c *Cluster) mantaImage(ctx context.Context) ([]images.Image, error) {
	if !c.opts.MantaImage {
		if img, ok := images.MantaLayout(c.opts.BinDir); ok {
			return []images.Image{img}, nil
		}
		return nil, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	img, err := images.EnsureManta(ctx, c.opts.BinDir, root, c.opts.Logf)
	if err != nil {
		return nil, err
	}
	c.opts.Logf("devcluster: Manta's image %s ready in %s", img.Ref, time.Since(start).Round(time.Millisecond))
	return []images.Image{img}, nil
}

// nodeServer is the API server's URL as the node's namespace sees it: the forwarder on the node's address.
func (c *Cluster) nodeServer() string {
	return "https://" + net.JoinHostPort(c.node.net.nodeIP.Addr().String(), strconv.Itoa(c.apiPort))
}

// startRealNode starts the node once the control plane is up: the API forwarder and the registry in the node's
// namespace, the images pushed, the node's files written, then containerd, CoreDNS, kube-proxy and the kubelet.
func (c *Cluster) startRealNode(ctx context.Context, pk *pki) error {
	p := c.node.paths
	start := time.Now()
	for _, d := range []string{p.dir, p.cniConfDir, p.cniIPAM, p.registryHosts, p.kubeletRoot, p.podLogs, p.registryBlobs, c.node.net.resolvConfDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := c.startForwarder(); err != nil {
		return err
	}
	regHost, err := c.startRegistry()
	if err != nil {
		return err
	}
	pause, err := c.pushNodeImages(ctx, regHost)
	if err != nil {
		return err
	}
	if err := c.writeNodeFiles(ctx, pk, regHost, pause); err != nil {
		return err
	}
	if err := c.startNodeDaemons(ctx); err != nil {
		return err
	}
	c.opts.Logf("devcluster: real node %s started in %s (logs: containerd, coredns, kube-proxy, kubelet)", RealNodeName, time.Since(start).Round(time.Millisecond))
	return nil
}

// pushNodeImages pushes every image the dev cluster builds to the node's registry at regHost, and returns the
// pause image's reference (the pod sandboxes').
func (c *Cluster) pushNodeImages(ctx context.Context, regHost string) (string, error) {
	// Every image the dev cluster builds, in its registry before the kubelet asks for the sandbox image.
	var res imagesResult
	select {
	case res = <-c.node.images:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if res.err != nil {
		return "", fmt.Errorf("devcluster: real node images: %w", res.err)
	}
	pause := ""
	pushTransport := &http.Transport{Proxy: nil}
	defer pushTransport.CloseIdleConnections()
	for _, img := range res.imgs {
		t := time.Now()
		if err := images.Push(ctx, img, regHost, pushTransport); err != nil {
			return "", fmt.Errorf("devcluster: real node: %w", err)
		}
		c.opts.Logf("devcluster: pushed %s to the node's registry in %s", img.Ref, time.Since(t).Round(time.Millisecond))
		if strings.HasPrefix(img.Ref, "registry.k8s.io/pause:") {
			pause = img.Ref
		}
	}
	if pause == "" {
		return "", errors.New("devcluster: real node: the images include no registry.k8s.io/pause image for pod sandboxes")
	}
	return pause, nil
}

// writeNodeFiles writes the configurations of the node's daemons (containerd with regHost mirroring the
// registries and pause as its sandbox image, CNI, the kubelet, kube-proxy, CoreDNS, resolv.conf), their
// kubeconfigs, CoreDNS's rights and the node's cgroup parent.
func (c *Cluster) writeNodeFiles(ctx context.Context, pk *pki, regHost, pause string) error {
	n, p := c.node.net, c.node.paths
	cni, err := cniConfig(n, p)
	if err != nil {
		return err
	}
	files := map[string]string{
		p.containerdConfig: containerdConfig(p, pause),
		filepath.Join(p.cniConfDir, "10-manta.conflist"): string(cni),
		p.kubeletConfig:   kubeletConfig(n, p, pk),
		p.kubeProxyConfig: kubeProxyConfig(n, p),
		p.coreDNSConfig:   coreDNSConfig(n, p),
		p.resolvConf:      resolvConf(n),
		// What `ip netns exec` shows as /etc/resolv.conf: cluster DNS for programs run in the node's namespace.
		filepath.Join(n.resolvConfDir, "resolv.conf"): resolvConf(n),
	}
	for _, r := range mirroredRegistries {
		files[filepath.Join(p.registryHosts, r, "hosts.toml")] = registryHostsTOML(regHost)
	}
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := writeFile(path, content); err != nil {
			return err
		}
	}
	server := c.nodeServer()
	for path, token := range map[string]string{
		p.kubeletKubeconfig:   pk.nodeToken,
		p.kubeProxyKubeconfig: pk.proxyToken,
		p.coreDNSKubeconfig:   pk.dnsToken,
		p.operatorKubeconfig:  pk.adminToken,
	} {
		if err := writeKubeconfig(path, server, pk.caPEM, token); err != nil {
			return err
		}
	}
	if err := c.grantCoreDNS(ctx); err != nil {
		return err
	}
	return makeCgroupParent(n.cgroupParent)
}

// startNodeDaemons starts containerd (waited for until it listens), CoreDNS, kube-proxy and the kubelet in the
// node's namespace.
func (c *Cluster) startNodeDaemons(ctx context.Context) error {
	n, p := c.node.net, c.node.paths
	c.node.firstProc = len(c.procs)
	env := nodeEnv(c.opts.BinDir)
	if err := c.start(ctx, procSpec{name: "containerd", netns: n.netnsPath(), env: env,
		args: []string{"--config", p.containerdConfig, "--log-level", "warn"}}); err != nil {
		return err
	}
	if err := poll(ctx, time.Minute, func() (bool, error) {
		if err := c.exitedEarly(); err != nil {
			return false, err
		}
		conn, err := net.Dial("unix", p.containerdSocket)
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		return true, nil
	}); err != nil {
		return fmt.Errorf("devcluster: containerd did not listen on %s: %w (log: %s)", p.containerdSocket, err, c.logPath("containerd"))
	}
	if err := c.start(ctx, procSpec{name: "coredns", netns: n.netnsPath(), env: env,
		args: []string{"-conf", p.coreDNSConfig}}); err != nil {
		return err
	}
	if err := c.start(ctx, procSpec{name: "kube-proxy", netns: n.netnsPath(), env: env,
		args: []string{"--config", p.kubeProxyConfig, "--v=1"}}); err != nil {
		return err
	}
	return c.start(ctx, procSpec{name: "kubelet", netns: n.netnsPath(), env: env, args: []string{
		"--config", p.kubeletConfig,
		"--kubeconfig", p.kubeletKubeconfig,
		"--root-dir", p.kubeletRoot,
		"--hostname-override", RealNodeName,
		"--node-ip", n.nodeIP.Addr().String(),
		"--node-labels", RealNodeLabel + "=true",
		"--v=1",
	}})
}

// nodeEnv is the node's daemons' environment: containerd finds its shim and the shim finds runc on PATH, and
// kube-proxy runs iptables and conntrack from the machine.
func nodeEnv(binDir string) []string {
	env := []string{"PATH=" + binDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return env
}

// makeCgroupParent creates the kubelet's cgroupRoot in every hierarchy, as the kubelet requires it to exist, and
// weighs it as nodeCPUShares.
func makeCgroupParent(parent string) error {
	roots, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, r := range roots {
		dir := filepath.Join(r, parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("devcluster: cgroup %s: %w", dir, err)
		}
		if exists(filepath.Join(dir, "cpu.shares")) {
			if err := writeFile(filepath.Join(dir, "cpu.shares"), strconv.Itoa(nodeCPUShares)); err != nil {
				return fmt.Errorf("devcluster: cgroup %s: cpu.shares: %w", dir, err)
			}
		}
	}
	return nil
}

// nodeCPUShares is the CPU weight of all the node's pods together against the machine's other processes. On this
// machine those run at the top of the cgroup tree, where each busy process weighs 1024 like a whole cgroup: at the
// default weight, with twenty build and test processes running, every pod together got a twentieth of the CPU and
// a Ray head's dashboard could not start its modules in its 30 s. 8192 weighs the pods as eight busy processes.
const nodeCPUShares = 8192

// startForwarder lets the node's namespace reach the API server, which listens on 127.0.0.1 only: a TCP forwarder
// on the node's address and the API server's port, where the API server advertises itself (the kubernetes
// Service's endpoint), so pods reach it through kube-proxy and the node's daemons directly.
func (c *Cluster) startForwarder() error {
	addr := net.JoinHostPort(c.node.net.nodeIP.Addr().String(), strconv.Itoa(c.apiPort))
	l, err := netns.Listen(c.node.net.netnsPath(), "tcp", addr)
	if err != nil {
		return fmt.Errorf("devcluster: API server forwarder on %s: %w", addr, err)
	}
	c.node.forwarder = l
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(c.apiPort))
	c.node.forwarding.Add(1)
	go func() {
		defer c.node.forwarding.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go forward(conn, target)
		}
	}()
	return nil
}

func forward(conn net.Conn, target string) {
	defer conn.Close()
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, conn)
	go pipe(conn, up)
	<-done
	<-done
}

// startRegistry serves the local OCI registry on the node's address inside its namespace; the blobs live under
// BinDir, so images pushed by an earlier run are not sent again. It returns the registry's host:port.
func (c *Cluster) startRegistry() (string, error) {
	host := net.JoinHostPort(c.node.net.nodeIP.Addr().String(), strconv.Itoa(RegistryPort))
	l, err := netns.Listen(c.node.net.netnsPath(), "tcp", host)
	if err != nil {
		return "", fmt.Errorf("devcluster: registry on %s: %w", host, err)
	}
	logFile, err := os.Create(c.logPath("registry"))
	if err != nil {
		_ = l.Close()
		return "", err
	}
	srv := &http.Server{
		Handler: c.node.requests.wrap(registry.New(
			registry.WithBlobHandler(registry.NewDiskBlobHandler(c.node.paths.registryBlobs)),
			registry.Logger(log.New(logFile, "", log.LstdFlags)),
		)),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(logFile, "", log.LstdFlags),
	}
	c.node.registry = srv
	go func() {
		_ = srv.Serve(l)
		_ = logFile.Close()
	}()
	return host, nil
}

// grantCoreDNS lets CoreDNS's user read what its kubernetes plugin watches.
func (c *Cluster) grantCoreDNS(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.config)
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: coreDNSUser},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: coreDNSUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: coreDNSUser},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: coreDNSUser}},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, createOpts); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("devcluster: CoreDNS's ClusterRole: %w", err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, createOpts); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("devcluster: CoreDNS's ClusterRoleBinding: %w", err)
	}
	return nil
}

// stopRealNode stops the node's daemons (the kubelet first, so it restarts nothing), then removes its containers,
// shims, mounts, network, cgroups and files, stops the registry and the forwarder, and frees the slot.
func (c *Cluster) stopRealNode() error {
	rn := c.node
	var errs []error
	if rn.firstProc > 0 && rn.firstProc <= len(c.procs) {
		for i := len(c.procs) - 1; i >= rn.firstProc; i-- {
			if err := c.procs[i].stop(10 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
		c.procs = c.procs[:rn.firstProc]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if rn.registry != nil {
		_ = rn.registry.Close()
	}
	if rn.forwarder != nil {
		_ = rn.forwarder.Close()
		rn.forwarding.Wait()
	}
	if took, err := cleanNode(ctx, rn.net, rn.paths.dir); err != nil {
		errs = append(errs, err)
	} else {
		c.opts.Logf("devcluster: removed the real node (%s)", took)
		if c.keepSlot {
			rn.slot.forget()
			c.heldSlot = rn.slot
		} else {
			rn.slot.release()
		}
	}
	c.node = nil
	return errors.Join(errs...)
}

// NodeNetns is the real node's network namespace (run a program there with `ip netns exec`, which also shows it
// cluster DNS as /etc/resolv.conf), or "" without a real node.
func (c *Cluster) NodeNetns() string {
	if c.node == nil {
		return ""
	}
	return c.node.net.netns
}

// NodeKubeconfig is an admin kubeconfig for programs in the real node's namespace (the API server through the
// node's address), or "" without a real node.
func (c *Cluster) NodeKubeconfig() string {
	if c.node == nil {
		return ""
	}
	return c.node.paths.operatorKubeconfig
}

// ContainerdSocket is the real node's containerd socket (for ctr: --address), or "" without a real node.
func (c *Cluster) ContainerdSocket() string {
	if c.node == nil {
		return ""
	}
	return c.node.paths.containerdSocket
}

// NodeIP is the real node's InternalIP, or "" without a real node.
func (c *Cluster) NodeIP() string {
	if c.node == nil {
		return ""
	}
	return c.node.net.nodeIP.Addr().String()
}

// RegistryHost is the host:port of the real node's local registry (reachable from this machine's root namespace
// and from the node), or "" without a real node.
func (c *Cluster) RegistryHost() string {
	if c.node == nil {
		return ""
	}
	return net.JoinHostPort(c.node.net.nodeIP.Addr().String(), strconv.Itoa(RegistryPort))
}

// DialContext dials addr from this machine, resolving names in the cluster's domain (cluster.local) through the
// real node's CoreDNS: for clients outside the cluster that reach Services and pods by their DNS names, as the
// operator reaches Ray heads. Without a real node it dials like net.Dialer.
func (c *Cluster) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || c.node == nil || !strings.HasSuffix(strings.TrimSuffix(host, "."), ".cluster.local") {
		return d.DialContext(ctx, network, addr)
	}
	dns := net.JoinHostPort(c.node.net.nodeIP.Addr().String(), strconv.Itoa(coreDNSPort))
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, dns)
	}}
	ips, err := r.LookupHost(ctx, host)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ip := range ips {
		conn, err := d.DialContext(ctx, network, net.JoinHostPort(ip, port))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}
