package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/logging"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/ray"
)

// devService is something `manta dev` runs in-process beside the operator (the REST API server).
type devService struct {
	name  string
	start func(ctx context.Context, cfg *rest.Config, ready chan<- string) error
}

// devServices are the in-process services `manta dev` starts beside the operator; main.go lists them.
var devServices []devService

// devFlags are the flags of `manta dev`.
type devFlags struct {
	nodes      int
	nodeCPU    string
	nodeMemory string
	maxPods    int
	kubeconfig string
	realNode   string
	opOpts     operator.Options
}

func newDevCommand() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:         "dev",
		Short:       "Start a local simulated Kubernetes with Manta's CRDs, operator and API server running",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{ownLogger: "file"},
		RunE:        func(cmd *cobra.Command, _ []string) error { return runDev(cmd, &f) },
	}
	fs := cmd.Flags()
	fs.IntVar(&f.nodes, "nodes", 3, "number of fake nodes")
	fs.StringVar(&f.nodeCPU, "node-cpu", "32", "CPU capacity of each fake node")
	fs.StringVar(&f.nodeMemory, "node-memory", "128Gi", "memory capacity of each fake node")
	fs.IntVar(&f.maxPods, "node-max-pods", 110, "pod capacity of each fake node")
	fs.StringVar(&f.kubeconfig, "kubeconfig", ".manta/dev/kubeconfig", "where to write the admin kubeconfig")
	fs.StringVar(&f.realNode, "real-node", "auto", "run a real node (kubelet, containerd, CoreDNS, kube-proxy, a local registry) beside the fake ones: "+
		"auto (when the machine allows it: root, cgroups, the node binaries from `make tools`), true, or false")
	addOperatorFlags(fs, &f.opOpts)
	f.opOpts.MetricsAddr = "0"
	return cmd
}

// runDev starts the dev cluster, then the operator and the dev services in it, says how to use it, and runs until
// interrupted.
func runDev(cmd *cobra.Command, f *devFlags) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	abs, err := filepath.Abs(f.kubeconfig)
	if err != nil {
		return err
	}
	// The operator's and the API server's logs go to a file, so the terminal keeps the progress lines and the
	// summary; the components' logs are in the cluster's own directory (both named below).
	logPath := filepath.Join(filepath.Dir(abs), "logs", "manta.log")
	logFile, err := setFileLogger(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	fmt.Fprintf(stderr, "manta dev: starting; operator and API server logs in %s\n", logPath)

	withNode, err := chooseRealNode(f.realNode, stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	c, err := devcluster.Start(ctx, devcluster.Options{
		Nodes: f.nodes, NodeCPU: f.nodeCPU, NodeMemory: f.nodeMemory, NodeMaxPods: f.maxPods,
		RealNode:       withNode,
		KubeconfigPath: abs,
		// Puller pods exit on fake nodes (and pulls of images named *does-not-exist* fail) as on real ones.
		ExtraStages: [][]byte{devcluster.PullerStages},
		Logf:        func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) },
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(stderr, "manta dev: stopping")
		_ = c.Stop()
	}()

	g, gctx := errgroup.WithContext(ctx)
	notes, ready, err := startDevProcesses(gctx, g, c, withNode, &f.opOpts)
	if !ready {
		return err
	}
	printDevReady(cmd.OutOrStdout(), devSummary{withNode: withNode, nodes: f.nodes, upIn: time.Since(start), logPath: logPath,
		clusterDir: c.Dir(), kubeconfig: abs, notes: notes})
	err = g.Wait()
	if ctx.Err() != nil {
		return nil // interrupted: a clean shutdown
	}
	return err
}

// setFileLogger sends controller-runtime's and klog's logs to the file at path (created or truncated); the caller
// closes it.
func setFileLogger(path string) (*os.File, error) {
	logFile, err := openLog(path)
	if err != nil {
		return nil, err
	}
	fileOpts := logOptions
	fileOpts.DestWriter = logFile
	logger := logging.Lazy(zap.New(zap.UseFlagOptions(&fileOpts)))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	return logFile, nil
}

// startDevProcesses starts the operator and the dev services in g and waits until they are ready: each service said
// so (its note is returned), the operator's caches synced and its controllers run. When they never get there, ready
// is false and err is what to return.
func startDevProcesses(gctx context.Context, g *errgroup.Group, c *devcluster.Cluster, withNode bool, opOpts *operator.Options) (notes []string, ready bool, err error) {
	cfg := c.RESTConfig()
	if withNode {
		// The operator runs outside the cluster: it resolves head Services through the node's CoreDNS.
		direct := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: c.DialContext}}
		opOpts.RayClients, err = ray.NewFactory(ray.Options{UseKubernetesProxy: opOpts.UseKubernetesProxy, RESTConfig: cfg,
			ClusterDomain: opOpts.ClusterDomain, Timeout: opOpts.RayTimeout, HTTPClient: direct})
		if err != nil {
			return nil, false, err
		}
	}
	mgr, err := operator.NewManager(cfg, *opOpts)
	if err != nil {
		return nil, false, err
	}
	if err := operator.Setup(mgr, *opOpts); err != nil {
		return nil, false, err
	}
	g.Go(func() error { return mgr.Start(gctx) })
	for _, s := range devServices {
		up := make(chan string, 1)
		g.Go(func() error { return s.start(gctx, c.RESTConfig(), up) })
		select {
		case note := <-up:
			notes = append(notes, note)
		case <-gctx.Done():
			return nil, false, g.Wait()
		}
	}
	if !mgr.GetCache().WaitForCacheSync(gctx) {
		return nil, false, errors.Join(errors.New("operator caches did not sync"), g.Wait())
	}
	// The caches can sync before the controllers are launched (an index asks for the pod informer at set-up): ready
	// means the controllers run, which the manager says by electing itself (no leader election here).
	select {
	case <-mgr.Elected():
	case <-gctx.Done():
		return nil, false, g.Wait()
	}
	return notes, true, nil
}

// devSummary is what `manta dev` says once it is ready.
type devSummary struct {
	withNode   bool
	nodes      int
	upIn       time.Duration
	logPath    string
	clusterDir string
	kubeconfig string
	notes      []string
}

// printDevReady says that `manta dev` is ready, where its logs are and how to use the cluster.
func printDevReady(out io.Writer, s devSummary) {
	fmt.Fprintln(out, "manta dev: ready")
	if s.withNode {
		fmt.Fprintf(out, "  real node %s (pods run in containers there; the %d fake nodes carry the taint %s=fake:NoSchedule), up in %s\n",
			devcluster.RealNodeName, s.nodes, devcluster.FakeNodeTaint, s.upIn.Round(time.Millisecond))
	} else {
		fmt.Fprintf(out, "  %d fake nodes, up in %s\n", s.nodes, s.upIn.Round(time.Millisecond))
	}
	fmt.Fprintf(out, "  operator and API server logs: %s\n", s.logPath)
	components := "etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok"
	if s.withNode {
		components += ", containerd, coredns, kube-proxy, kubelet, registry"
	}
	fmt.Fprintf(out, "  component logs (%s): %s\n", components, filepath.Join(s.clusterDir, "logs"))
	fmt.Fprintf(out, "  export KUBECONFIG=%s\n", s.kubeconfig)
	fmt.Fprintln(out, "  kubectl apply -f config/samples/raycluster.yaml   # kubectl is in bin/ after `make tools`")
	fmt.Fprintln(out, "  kubectl get rayclusters,pods")
	for _, n := range s.notes {
		fmt.Fprintln(out, " ", n)
	}
	fmt.Fprintln(out, "  press Ctrl-C to stop")
}

// chooseRealNode decides --real-node: auto runs the real node when the machine allows it and otherwise says in one
// line why the cluster has fake nodes only.
func chooseRealNode(flag string, stderr io.Writer) (bool, error) {
	switch flag {
	case "false":
		return false, nil
	case "true", "auto":
	default:
		return false, fmt.Errorf("--real-node: %q is not auto, true or false", flag)
	}
	bin, err := devcluster.DefaultBinDir()
	if err == nil {
		err = devcluster.RealNodeSupport(bin)
	}
	if err == nil {
		return true, nil
	}
	if flag == "true" {
		return false, fmt.Errorf("--real-node=true: %w", err)
	}
	fmt.Fprintf(stderr, "manta dev: fake (kwok) nodes only: %v\n", err)
	return false, nil
}

// openLog creates (or truncates) the log file of one `manta dev` run.
func openLog(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
}
