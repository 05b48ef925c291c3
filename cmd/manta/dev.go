package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	install    string
	opOpts     operator.Options
}

// How `manta dev` runs Manta (--install).
const (
	installProcess = "process"
	installHelm    = "helm"
)

// Where --install=helm installs charts/manta, and as what release.
const (
	devHelmRelease   = "manta"
	devHelmNamespace = "manta-system"
)

func newDevCommand() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:         "dev",
		Short:       "Start a local simulated Kubernetes with Manta's CRDs, operator and API server running",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{ownLogger: "file"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkInstall(cmd, &f); err != nil {
				return err
			}
			return runDev(cmd, &f)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&f.nodes, "nodes", 3, "number of fake nodes")
	fs.StringVar(&f.nodeCPU, "node-cpu", "32", "CPU capacity of each fake node")
	fs.StringVar(&f.nodeMemory, "node-memory", "128Gi", "memory capacity of each fake node")
	fs.IntVar(&f.maxPods, "node-max-pods", 110, "pod capacity of each fake node")
	fs.StringVar(&f.kubeconfig, "kubeconfig", ".manta/dev/kubeconfig", "where to write the admin kubeconfig")
	fs.StringVar(&f.realNode, "real-node", "auto", "run a real node (kubelet, containerd, CoreDNS, kube-proxy, a local registry) beside the fake ones: "+
		"auto (when the machine allows it: root, cgroups, the node binaries from `make tools`), true, or false")
	fs.StringVar(&f.install, "install", installProcess, "how Manta runs in the cluster: "+installProcess+" (the operator and API server in this process, the fastest to start) or "+
		installHelm+" (Manta's image built from this repository as `make image` does, pushed to the real node's registry, and charts/manta installed with bin/helm as release "+
		devHelmRelease+" in "+devHelmNamespace+": the operator and API server run as pods on the real node; needs the real node)")
	addOperatorFlags(fs, &f.opOpts)
	f.opOpts.MetricsAddr = "0"
	return cmd
}

// checkInstall checks --install against the other flags: with helm the chart configures the operator, so an
// operator flag given here would be ignored, and only the real node runs pods.
func checkInstall(cmd *cobra.Command, f *devFlags) error {
	switch f.install {
	case installProcess:
		return nil
	case installHelm:
	default:
		return fmt.Errorf("--install: %q is not %s or %s", f.install, installProcess, installHelm)
	}
	if f.realNode == "false" {
		return fmt.Errorf("--install=%s runs Manta in pods, which only the real node runs: it needs --real-node=auto or true", installHelm)
	}
	op := pflag.NewFlagSet("operator", pflag.ContinueOnError)
	addOperatorFlags(op, &operator.Options{})
	var set []string
	op.VisitAll(func(fl *pflag.Flag) {
		if cmd.Flags().Changed(fl.Name) {
			set = append(set, "--"+fl.Name)
		}
	})
	if len(set) > 0 {
		return fmt.Errorf("--install=%s: %s configure the in-process operator; with Helm, set charts/manta's values instead (helm upgrade %s charts/manta -n %s --reuse-values --set ...)",
			installHelm, strings.Join(set, ", "), devHelmRelease, devHelmNamespace)
	}
	return nil
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
	helm := f.install == installHelm
	if helm && !withNode {
		return fmt.Errorf("--install=%s runs Manta in pods, which only the real node runs, and this machine cannot run it", installHelm)
	}
	start := time.Now()
	c, err := devcluster.Start(ctx, devcluster.Options{
		Nodes: f.nodes, NodeCPU: f.nodeCPU, NodeMemory: f.nodeMemory, NodeMaxPods: f.maxPods,
		RealNode:       withNode,
		MantaImage:     helm,
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

	if helm {
		if err := helmInstall(ctx, c, stderr); err != nil {
			return err
		}
		printDevReady(cmd.OutOrStdout(), devSummary{withNode: withNode, nodes: f.nodes, upIn: time.Since(start), helm: true,
			clusterDir: c.Dir(), kubeconfig: abs})
		<-ctx.Done()
		return nil
	}
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

// helmInstall installs charts/manta into c with bin/helm, at the chart's default image (which the dev cluster
// built from this repository and pushed to the real node's registry), and waits until its pods are Ready.
func helmInstall(ctx context.Context, c *devcluster.Cluster, stderr io.Writer) error {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return fmt.Errorf("--install=%s needs Manta's repository (its chart and source): %w", installHelm, err)
	}
	fmt.Fprintf(stderr, "manta dev: helm install %s charts/manta in %s\n", devHelmRelease, devHelmNamespace)
	start := time.Now()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "helm"), "install", devHelmRelease, filepath.Join(root, "charts", "manta"),
		"--namespace", devHelmNamespace, "--create-namespace", "--wait", "--timeout", "10m", "--kubeconfig", c.Kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm install %s charts/manta (bin/helm is built by `make tools`): %w: %s", devHelmRelease, err, out)
	}
	fmt.Fprintf(stderr, "manta dev: release %s Ready in %s\n", devHelmRelease, time.Since(start).Round(time.Millisecond))
	return nil
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
	helm       bool // Manta runs from the chart's release, not in this process
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
	if s.helm {
		fmt.Fprintf(out, "  operator and API server: Helm release %s in namespace %s, pods on the real node (kubectl -n %s get pods; kubectl -n %s logs deploy/%s-operator)\n",
			devHelmRelease, devHelmNamespace, devHelmNamespace, devHelmNamespace, devHelmRelease)
	} else {
		fmt.Fprintf(out, "  operator and API server logs: %s\n", s.logPath)
	}
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
