// Package devcluster starts and stops Manta's local simulated Kubernetes: etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager and kwok with fake nodes, all bound to 127.0.0.1, with Manta's CRDs installed. It is the
// one place that starts the simulated cluster: `manta dev`, the end-to-end tests and the benchmarks all use it.
package devcluster

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/manta-dev/manta/internal/sys/liveproc"
)

//go:embed stages.yaml
var defaultStages []byte

// DefaultStages returns the kwok Stage documents the dev cluster always loads.
func DefaultStages() []byte { return append([]byte(nil), defaultStages...) }

// NodePool describes a set of identical fake nodes.
type NodePool struct {
	// Name prefixes the node names: <name>-0, <name>-1, ...
	Name  string
	Count int
	// CPU, Memory and Pods are the node's capacity; empty means 32 CPUs, 128Gi and 110 pods.
	CPU, Memory string
	Pods        int
	// Extra adds capacity for other resources, such as nvidia.com/gpu or google.com/tpu.
	Extra  map[string]string
	Labels map[string]string
	Taints []corev1.Taint
	// Images are reported in the node's status.images, as a kubelet does for images it has pulled.
	Images []string
}

// Options configure a dev cluster. The zero value starts one node pool of 3 nodes.
type Options struct {
	// Nodes is the size of the default node pool, used when Pools is empty.
	Nodes int
	// NodeCPU, NodeMemory and NodeMaxPods shape the default node pool.
	NodeCPU, NodeMemory string
	NodeMaxPods         int
	// Pools replaces the default node pool.
	Pools []NodePool
	// Dir holds the cluster's files (certificates, etcd data, kubeconfig, logs); empty means a new temp dir,
	// removed on Stop. A given Dir is left in place.
	Dir string
	// BinDir holds etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok; empty means <repo>/bin.
	BinDir string
	// CRDDirs (directories or files) are installed after the API server is up; nil means <repo>/config/crd,
	// the batch schedulers' PodGroup CRDs (SchedulerCRDPaths) and the Gateway API's GatewayClass, Gateway and
	// HTTPRoute CRDs (GatewayAPICRDs).
	CRDDirs []string
	// ExtraStages are more kwok Stage documents (YAML), for tests that need pods to fail or exit.
	ExtraStages [][]byte
	// HoldJobPods leaves out the stage that completes a Job's running pods: they run until the test ends them
	// (a test that plays a submitter pod itself).
	HoldJobPods bool
	// KubeconfigPath, when set, also writes the admin kubeconfig there.
	KubeconfigPath string
	// Profiling serves the API server's /debug/pprof (to the admin), for benchmarks that profile it.
	Profiling bool
	// LogSlowRequests runs the API server at -v=2, where it logs a trace of each request slower than its threshold
	// (500 ms for most writes), for SlowRequests; off, it logs no trace at all. Tests set it, benchmarks do not.
	LogSlowRequests bool
	// RealNode starts a real node beside the fake ones (see realnode.go): a kubelet, containerd and runc,
	// CoreDNS, kube-proxy and a local registry with the images of package images, in a network namespace of its
	// own. While it runs, every fake node carries FakeNodeTaint, so pods land on the real node unless they
	// tolerate it. It needs what RealNodeSupport checks; Start fails naming what is missing.
	RealNode bool
	// MantaImage builds Manta's image from this repository (images.EnsureManta, as `make image` does) while the
	// control plane starts, and pushes it to the real node's registry as images.MantaRef(), charts/manta's default
	// image. Without it, the image `make image` last left in <BinDir>/images/manta, if any, is pushed as it is.
	// Only with RealNode.
	MantaImage bool
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// Cluster is a running dev cluster.
type Cluster struct {
	opts       Options
	dir        string
	removeDir  bool
	Kubeconfig string // path of the admin kubeconfig
	Server     string // https://127.0.0.1:<port>
	config     *rest.Config
	procs      []*process
	apiPort    int
	pki        *pki
	node       *realNode // nil without a real node
	// keepSlot: Stop leaves the real node's slot locked, in heldSlot, for StopHoldingSlot's caller to release.
	keepSlot bool
	heldSlot *slotLock

	stopOnce sync.Once
	stopErr  error
}

// Start brings up a dev cluster and returns when the API server answers, the CRDs are established and every fake
// node is Ready. On error, everything started so far is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	opts, err = opts.complete()
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, dir: opts.Dir}
	// A killed real node's mounts may sit in a stale temp dir: unmount them before sweepStaleDirs removes it.
	if os.Geteuid() == 0 {
		if err := SweepRealNodes(ctx, opts.Logf); err != nil {
			return nil, err
		}
	}
	if err := c.makeDir(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	start := time.Now()
	if opts.RealNode {
		if err := c.prepareRealNode(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.startControlPlaneRetrying(ctx); err != nil {
		return nil, err
	}
	opts.Logf("devcluster: control plane up in %s", time.Since(start).Round(time.Millisecond))
	if err := c.installCRDs(ctx); err != nil {
		return nil, err
	}
	if err := c.startControllerManager(ctx); err != nil {
		return nil, err
	}
	if err := c.startKwok(ctx); err != nil {
		return nil, err
	}
	for _, p := range opts.Pools {
		if err := c.AddNodes(ctx, p); err != nil {
			return nil, err
		}
	}
	if c.node != nil {
		if err := c.startRealNode(ctx, c.pki); err != nil {
			return nil, err
		}
	}
	if err := c.WaitForNodesReady(ctx); err != nil {
		return nil, err
	}
	opts.Logf("devcluster: ready in %s", time.Since(start).Round(time.Millisecond))
	return c, nil
}

// complete fills in the defaults of o (the repository's bin/ and CRDs, one pool of 3 fake nodes, fake nodes
// tainted beside a real one) and checks the control plane's binaries are there.
func (o Options) complete() (Options, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	root, err := RepoRoot()
	if err != nil && (o.BinDir == "" || o.CRDDirs == nil) {
		return o, err
	}
	if o.BinDir == "" {
		o.BinDir = filepath.Join(root, "bin")
	}
	if o.CRDDirs == nil {
		scheduler, err := SchedulerCRDPaths(root)
		if err != nil {
			return o, err
		}
		gw, err := GatewayAPICRDs(root)
		if err != nil {
			return o, err
		}
		o.CRDDirs = append(append([]string{filepath.Join(root, "config", "crd")}, scheduler...), gw...)
	}
	if len(o.Pools) == 0 {
		n := o.Nodes
		if n == 0 {
			n = 3
		}
		o.Pools = []NodePool{{Name: "kwok-node", Count: n, CPU: o.NodeCPU, Memory: o.NodeMemory, Pods: o.NodeMaxPods}}
	}
	if o.MantaImage && !o.RealNode {
		return o, errors.New("devcluster: MantaImage needs RealNode: only the real node runs images")
	}
	if o.RealNode {
		fake := corev1.Taint{Key: FakeNodeTaint, Value: "fake", Effect: corev1.TaintEffectNoSchedule}
		for i := range o.Pools {
			o.Pools[i].Taints = append(append([]corev1.Taint(nil), o.Pools[i].Taints...), fake)
		}
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, name)); err != nil {
			return o, fmt.Errorf("devcluster: %s not found in %s (run `make tools`): %w", name, o.BinDir, err)
		}
	}
	return o, nil
}

// makeDir makes the cluster's directory: Options.Dir, or a fresh temporary one (removed by Stop) marked with the
// owner (its pid and start time).
func (c *Cluster) makeDir() error {
	if c.dir != "" {
		return os.MkdirAll(c.dir, 0o755)
	}
	// Short paths: etcd and the components put sockets and files here.
	sweepStaleDirs()
	dir, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		return err
	}
	c.dir, c.removeDir = dir, true
	self, ok := liveproc.Of(os.Getpid())
	if !ok {
		return errors.New("devcluster: no /proc/self/stat to mark the cluster's directory with")
	}
	return os.WriteFile(filepath.Join(c.dir, ownerFile), []byte(self.String()), 0o644)
}

// startControlPlaneRetrying is startControlPlane, started again on fresh ports (up to three times) when a port was
// taken: FreePorts only reserves the ports until it returns, and another process can take one before a component
// binds it (the Ray head in test/ray does the same).
func (c *Cluster) startControlPlaneRetrying(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := c.startControlPlane(ctx)
		if err == nil {
			return nil
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		c.opts.Logf("devcluster: a port was taken before the control plane bound it, starting again on other ports: %v", err)
		c.stopProcesses()
		if err := os.RemoveAll(filepath.Join(c.dir, "etcd")); err != nil {
			return err
		}
	}
}

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.config) }

// Dir is where the cluster keeps its files and component logs.
func (c *Cluster) Dir() string { return c.dir }

// PIDs returns the process IDs of the components the cluster runs (etcd, kube-apiserver, kwok, ...), by name.
func (c *Cluster) PIDs() map[string]int {
	out := make(map[string]int, len(c.procs))
	for _, p := range c.procs {
		out[p.name] = p.cmd.Process.Pid
	}
	return out
}

// Stop stops every process the cluster started, in reverse order, and removes the temp dir it created. It is safe
// to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		if c.node != nil {
			errs = append(errs, c.stopRealNode())
		}
		errs = append(errs, c.stopProcesses())
		if c.removeDir {
			errs = append(errs, os.RemoveAll(c.dir))
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// StopHoldingSlot stops the cluster like Stop, but keeps its real node's slot (removed, its record gone) locked until
// release is called. A test that checks what the node left looks for it by slot, and a slot set free at once can be
// taken by another run's node (the first free slot is taken) before the check reads it.
func (c *Cluster) StopHoldingSlot() (release func(), err error) {
	c.keepSlot = true
	err = c.Stop()
	held := c.heldSlot
	c.heldSlot = nil
	return func() {
		if held != nil {
			held.release()
		}
	}, err
}

// stopProcesses stops every process started so far, in reverse order, and forgets them.
func (c *Cluster) stopProcesses() error {
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := c.procs[i].stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	c.procs = nil
	return errors.Join(errs...)
}

func (c *Cluster) startKwok(ctx context.Context) error {
	docs := [][]byte{kwokConfiguration}
	for _, d := range strings.Split(string(defaultStages), "\n---\n") {
		if c.opts.HoldJobPods && strings.Contains(d, "\n  name: pod-complete\n") {
			continue
		}
		docs = append(docs, []byte(d))
	}
	docs = append(docs, c.opts.ExtraStages...)
	cfg := filepath.Join(c.dir, "kwok.yaml")
	var b strings.Builder
	for i, d := range docs {
		if i > 0 {
			b.WriteString("\n---\n")
		}
		b.Write(d)
	}
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		return err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	return c.run(ctx, "kwok",
		"--kubeconfig="+c.Kubeconfig,
		"--config="+cfg,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+FakeNodeAnnotation+"=fake",
		"--cidr=10.128.0.1/10",
		"--node-ip=10.127.0.1",
		"--server-address=127.0.0.1:"+strconv.Itoa(ports[0]),
	)
}

// kwokConfiguration raises kwok's stage parallelism from its default of 4 workers, which otherwise paces how fast
// hundreds of pods turn Ready and hides the operator's own time, to 12, not more: with 32, when a cluster's pods
// arrive together kwok (v0.8.0) plays some pod stages twice, one of them from a stale pod, sending pods back to
// Pending (the measurements: docs/benchmarks.md). kwok reads it from the same file as the Stages.
var kwokConfiguration = []byte(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 12
  nodePlayStageParallelism: 16
`)

// FakeNodeAnnotation marks the nodes kwok manages.
const FakeNodeAnnotation = "kwok.x-k8s.io/node"

// AddNodes creates a pool of fake nodes (they become Ready shortly after; see WaitForNodesReady).
func (c *Cluster) AddNodes(ctx context.Context, p NodePool) error {
	cs, err := kubernetes.NewForConfig(c.config)
	if err != nil {
		return err
	}
	errs := make(chan error, p.Count)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := 0; i < p.Count; i++ {
		node, err := buildNode(p, i)
		if err != nil {
			return err
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			created, err := cs.CoreV1().Nodes().Create(ctx, node, createOpts)
			if err != nil {
				errs <- fmt.Errorf("create node %s: %w", node.Name, err)
				return
			}
			// The API server may drop status on create, and kwok writes status concurrently: a merge patch of
			// just the fields we own cannot conflict with it.
			if equality.Semantic.DeepEqual(created.Status.Capacity, node.Status.Capacity) && len(node.Status.Images) == len(created.Status.Images) {
				return
			}
			patch, err := json.Marshal(map[string]any{"status": map[string]any{
				"capacity": node.Status.Capacity, "allocatable": node.Status.Allocatable, "images": node.Status.Images,
			}})
			if err != nil {
				errs <- err
				return
			}
			if _, err := cs.CoreV1().Nodes().PatchStatus(ctx, node.Name, patch); err != nil {
				errs <- fmt.Errorf("set status of node %s: %w", node.Name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

func buildNode(p NodePool, i int) (*corev1.Node, error) {
	name := p.Name
	if name == "" {
		name = "kwok-node"
	}
	name = fmt.Sprintf("%s-%d", name, i)
	quantity := func(s, def string) (resource.Quantity, error) {
		if s == "" {
			s = def
		}
		return resource.ParseQuantity(s)
	}
	capacity := corev1.ResourceList{}
	cpu, err := quantity(p.CPU, "32")
	if err != nil {
		return nil, fmt.Errorf("node pool %q: cpu: %w", p.Name, err)
	}
	mem, err := quantity(p.Memory, "128Gi")
	if err != nil {
		return nil, fmt.Errorf("node pool %q: memory: %w", p.Name, err)
	}
	pods := p.Pods
	if pods == 0 {
		pods = 110
	}
	capacity[corev1.ResourceCPU] = cpu
	capacity[corev1.ResourceMemory] = mem
	capacity[corev1.ResourcePods] = *resource.NewQuantity(int64(pods), resource.DecimalSI)
	capacity[corev1.ResourceEphemeralStorage] = resource.MustParse("1Ti")
	for k, v := range p.Extra {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("node pool %q: %s: %w", p.Name, k, err)
		}
		capacity[corev1.ResourceName(k)] = q
	}
	labels := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"type":                   "kwok",
	}
	for k, v := range p.Labels {
		labels[k] = v
	}
	node := &corev1.Node{}
	node.Name = name
	node.Labels = labels
	node.Annotations = map[string]string{FakeNodeAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"}
	node.Spec.Taints = p.Taints
	node.Status.Capacity = capacity
	node.Status.Allocatable = capacity.DeepCopy()
	for _, img := range p.Images {
		node.Status.Images = append(node.Status.Images, corev1.ContainerImage{Names: []string{img}, SizeBytes: 1 << 30})
	}
	return node, nil
}

// WaitForNodesReady waits until every node of the cluster is Ready.
func (c *Cluster) WaitForNodesReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.config)
	if err != nil {
		return err
	}
	want := 0
	for _, p := range c.opts.Pools {
		want += p.Count
	}
	if c.node != nil {
		want++
	}
	return poll(ctx, 5*time.Minute, func() (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, listOpts)
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= want && ready == len(nodes.Items), nil
	})
}

func (c *Cluster) installCRDs(ctx context.Context) error {
	var dirs []string
	for _, d := range c.opts.CRDDirs {
		if _, err := os.Stat(d); err == nil {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return nil
	}
	names, err := installCRDFiles(ctx, c.config, dirs, 2*time.Minute)
	// A create the API server did not finish within its request timeout (a loaded machine: every suite starts its
	// control plane at once) may or may not have been applied; installCRDFiles creates what is missing and updates
	// what exists, so installing again is safe.
	for attempt := 1; err != nil && crdInstallRetriable(err) && attempt < crdInstallAttempts && ctx.Err() == nil; attempt++ {
		c.opts.Logf("devcluster: installing CRDs again (attempt %d): %v", attempt+1, err)
		names, err = installCRDFiles(ctx, c.config, dirs, 2*time.Minute)
	}
	if err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	c.opts.Logf("devcluster: installed CRDs %s", strings.Join(names, ", "))
	return nil
}

// crdInstallAttempts bounds installCRDs' attempts when the API server answers a CRD write with a timeout.
const crdInstallAttempts = 4

// crdInstallRetriable says whether a CRD install failed only because the API server did not answer in time.
func crdInstallRetriable(err error) bool {
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) ||
		errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

const (
	tempPrefix = "manta-dev-"
	ownerFile  = "owner.pid"
)

// sweepStaleDirs removes the temp dirs of dev clusters whose process is gone: a process killed outright cannot
// clean up after itself (its components die with it, see run), so the next cluster does it. The owner is named by
// pid and start time, so a pid reused by another program does not keep a dead cluster's directory.
func sweepStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		owner, err := liveproc.Parse(string(b))
		if err != nil {
			continue
		}
		if !owner.Exists() {
			_ = os.RemoveAll(d)
		}
	}
}

// DefaultBinDir is where Start finds the binaries when Options.BinDir is empty: <repo>/bin.
func DefaultBinDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// ModulePath is Manta's Go module path; RepoRoot looks for the go.mod that declares it.
const ModulePath = "github.com/manta-dev/manta"

// RepoRoot returns the root of the Manta repository: the nearest directory holding the go.mod of ModulePath,
// searched upwards from the working directory and then from this source file. Other go.mod files on the way
// (hack/tools/...) are skipped.
func RepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, start := range starts {
		for dir := start; ; dir = filepath.Dir(dir) {
			if isModuleRoot(dir) {
				return dir, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	return "", fmt.Errorf("devcluster: no go.mod of module %s above %v", ModulePath, starts)
}

func isModuleRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "module ") {
			return strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "module ")), `"`) == ModulePath
		}
	}
	return false
}
