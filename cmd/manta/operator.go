package main

import (
	"context"
	goflag "flag"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	crconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/idle"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/controller/startphases"
	"github.com/manta-dev/manta/internal/features"
	"github.com/manta-dev/manta/internal/logging"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/sys/procs"
)

func addOperatorFlags(fs *pflag.FlagSet, o *operator.Options) {
	fs.BoolVar(&o.UseKubernetesProxy, "use-kubernetes-proxy", false, "reach Ray heads through the Kubernetes API server's services/proxy and pods/proxy subresources")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", "cluster.local", "cluster DNS domain used to reach Ray head services directly")
	fs.StringVar(&o.DefaultPodTemplate, "default-pod-template", "", "core/v1 PodTemplate <namespace>/<name> merged under every Ray head and worker pod")
	fs.StringVar(&o.PullerImage, "puller-image", "ghcr.io/manta-dev/manta:latest", "Manta's own image, from which ImagePullJob puller pods copy their binary")
	fs.StringVar(&o.ImagePullNodeSelector, "image-pull-node-selector", "", "label selector of the nodes ImagePullJob pullers may run on, ANDed with each job's own selection (default: every node)")
	fs.StringVar(&o.ImagePullPriorityClass, "image-pull-priority-class", "", "priority class of every ImagePullJob puller pod (default: none); a job's spec.priorityClassName is not used")
	fs.BoolVar(&o.ImagePullTolerateAllTaints, "image-pull-tolerate-all-taints", false, "let ImagePullJob pullers tolerate every taint (narrowed by a job's spec.tolerations); otherwise nodes with a NoSchedule or NoExecute taint outside --image-pull-tolerations are not targeted")
	fs.StringSliceVar(&o.ImagePullTolerations, "image-pull-tolerations", nil, "taints ImagePullJob pullers may tolerate, as key[=value][:effect] (kubectl taint syntax; no value: any value, no effect: every effect), e.g. nvidia.com/gpu:NoSchedule")
	fs.IntVar(&o.ReconcileConcurrency, "reconcile-concurrency", 8, "concurrent reconciles per controller")
	fs.Float32Var(&o.QPS, "qps", 100, "requests per second the operator may send to the Kubernetes API server")
	fs.IntVar(&o.Burst, "burst", 200, "request burst the operator may send to the Kubernetes API server")
	fs.Float32Var(&o.EventQPS, "event-qps", operator.DefaultEventQPS, "events per second the operator may write; events are queued in memory when recorded and have a client and rate limit of their own, apart from --qps")
	fs.IntVar(&o.EventBurst, "event-burst", operator.DefaultEventBurst, "event write burst (see --event-qps)")
	fs.DurationVar(&o.StatusCoalesceWindow, "status-coalesce-window", raycluster.DefaultStatusCoalesceWindow,
		"under a burst of RayClusters (10 or more holding a change), the longest a status change that only reports progress (counts, head address, HeadPodReady, RayClusterProvisioned) waits to be written with the next one; "+
			"outside a burst it waits at most 1s, and state changes, failures and a ready cluster's status with every worker ready are written at once; 0 writes every change at once")
	fs.DurationVar(&o.StartPhaseLateThreshold, "start-phase-late-threshold", startphases.DefaultLateThreshold,
		"a step of a Ray pod's, RayCluster's or RayJob's start (scheduling, image pull, container start, Ray start, job submission, waiting in Ray) that takes longer gets a Warning event on the RayCluster or RayJob; 0 records none")
	fs.StringSliceVar(&o.WatchNamespaces, "watch-namespace", nil, "namespaces to watch (default: all)")
	fs.StringVar(&o.BatchScheduler, "batch-scheduler", "", "batch scheduler every Ray pod is handed to, as KubeRay's flag: "+strings.Join(clusterbuild.BatchSchedulers, ", ")+
		" (empty: the cluster's own scheduler); see docs/compatibility.md")
	fs.BoolVar(&o.EnableBatchScheduler, "enable-batch-scheduler", false, "(deprecated, as in KubeRay) the same as --batch-scheduler=volcano")
	fs.DurationVar(&o.IdleCheckInterval, "idle-check-interval", idle.DefaultCheckInterval,
		"least time between two reads of the Ray head of a RayCluster annotated "+idle.AnnotationIdleTimeout+" (each read: up to 4 requests, jobs, Serve, actors, tasks); at least "+idle.MinCheckInterval.String())
	fs.DurationVar(&o.RayTimeout, "ray-timeout", 0, "bound on each call to a Ray head's dashboard or Serve endpoint (0: 2s direct, 10s through --use-kubernetes-proxy)")
	o.NoRedisCleanup = strings.EqualFold(os.Getenv(envRedisCleanup), "false")
	f := fs.VarPF(negatedBool{&o.NoRedisCleanup}, "gcs-ft-redis-cleanup", "",
		"when a RayCluster with a Redis-backed GCS is deleted, delete its storage namespace from Redis with a Job before releasing the cluster, as KubeRay does; "+
			envRedisCleanup+"=false in the environment (KubeRay's switch) makes the default false")
	f.NoOptDefVal = "true"
	fs.Var(&optimizationsFlag{sw: &o.Optimizations}, "disable-optimization",
		"performance mechanisms to turn off, comma-separated (repeatable): "+optimize.Names()+
			"; each off makes the operator cost more under load and changes nothing it does (docs/operations.md)")
}

// optimizationsFlag is --disable-optimization: it refuses a name that is not a mechanism of
// internal/controller/shared/optimize.
type optimizationsFlag struct {
	names []string
	sw    **optimize.Switches
}

func (f *optimizationsFlag) String() string { return strings.Join(f.names, ",") }
func (f *optimizationsFlag) Type() string   { return "strings" }
func (f *optimizationsFlag) Set(v string) error {
	names := append(slices.Clone(f.names), strings.Split(v, ",")...)
	sw, err := optimize.Parse(names)
	if err != nil {
		return err
	}
	f.names, *f.sw = names, sw
	return nil
}

// applyKubeRayEnv applies the environment variables KubeRay's operator reads (operator.ApplyKubeRayEnv), under the
// flags given on the command line, and returns a warning for each one Manta does not honour.
func applyKubeRayEnv(fs *pflag.FlagSet, o *operator.Options, getenv func(string) string) ([]string, error) {
	domain, noCleanup := o.ClusterDomain, o.NoRedisCleanup
	warnings, err := operator.ApplyKubeRayEnv(getenv, o)
	if err != nil {
		return nil, err
	}
	if fs.Changed("cluster-domain") {
		o.ClusterDomain = domain
	}
	if fs.Changed("gcs-ft-redis-cleanup") {
		o.NoRedisCleanup = noCleanup
	}
	return warnings, nil
}

// envRedisCleanup is KubeRay's environment switch for the Redis cleanup, honoured as --gcs-ft-redis-cleanup's default.
const envRedisCleanup = "ENABLE_GCS_FT_REDIS_CLEANUP"

// negatedBool is a boolean flag stored negated (a flag that turns on what an Options field turns off).
type negatedBool struct{ off *bool }

func (b negatedBool) String() string { return strconv.FormatBool(!*b.off) }
func (b negatedBool) Type() string   { return "bool" }
func (b negatedBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.off = !v
	return nil
}

func newOperatorCommand() *cobra.Command { return newOperatorCommandWith(&operatorFlags{}) }

// operatorFlags hold what `manta operator`'s own flags parse into.
type operatorFlags struct {
	o         operator.Options
	kr        kubeRayFlags
	gcPercent int
	adaptive  bool
}

func newOperatorCommandWith(f *operatorFlags) *cobra.Command {
	o, kr := &f.o, &f.kr
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the RayCluster, RayJob, RayService and ImagePullJob controllers",
		Args:  cobra.NoArgs,
		// The log outputs come from the flags and the configuration file, read in RunE.
		Annotations: map[string]string{ownLogger: "kuberay"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			setGCPercent(cmd.Flags().Changed("gc-percent"), f.gcPercent)
			res, err := resolveOperator(cmd.Flags(), o, kr, os.Getenv, os.ReadFile)
			if err != nil {
				return err
			}
			log, logFile, err := logging.New(logOptions, res.outputs)
			if err != nil {
				return err
			}
			defer logFile.Close()
			ctrl.SetLogger(logging.Lazy(log))
			setupLog := ctrl.Log.WithName("setup")
			for _, w := range res.warnings {
				setupLog.Info("WARNING: " + w)
			}
			setupLog.Info("feature gates", "gates", res.gates.Describe())
			features.Set(res.gates)
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			if adaptProcs(cmd.Flags().Changed("adaptive-procs"), f.adaptive) {
				go (&procs.Adapter{}).Run(ctx)
			}
			return operator.Run(ctx, cfg, *o)
		},
	}
	fs := cmd.Flags()
	addOperatorFlags(fs, o)
	addKubeRayFlags(fs, kr)
	// KubeRay's operator parses Go's flag.CommandLine, where controller-runtime registers --kubeconfig, which
	// ctrl.GetConfig reads; so does this command.
	if kf := goflag.CommandLine.Lookup(crconfig.KubeconfigFlagName); kf != nil {
		fs.AddGoFlag(kf)
	}
	fs.StringVar(&o.MetricsAddr, "metrics-addr", ":8080", "address of the metrics endpoint (0 disables it)")
	fs.Var(negatedBool{&o.MetricsInsecure}, "metrics-secure", "serve metrics over HTTPS to callers whose bearer token Kubernetes authenticates (TokenReview) and authorises for get on /metrics "+
		"(SubjectAccessReview); false serves plain HTTP to anyone, and is refused unless --metrics-addr is a loopback address")
	fs.Lookup("metrics-secure").NoOptDefVal = "true"
	fs.BoolVar(&o.MetricsAsKubeRay, "metrics-as-kuberay", false, "serve /metrics as KubeRay's operator does: plain HTTP to anyone who reaches --metrics-addr, on any address "+
		"(on by default when the binary runs as KubeRay's /manager, whose chart probes and scrapes :8080/metrics without credentials; --metrics-secure turns it off)")
	fs.StringVar(&o.HealthProbeAddr, "health-probe-bind-address", ":8082", "address of the health probes")
	fs.StringVar(&o.PprofAddr, "pprof-addr", "", "address of the net/http/pprof endpoints (empty disables them)")
	fs.IntVar(&f.gcPercent, "gc-percent", defaultGCPercent, "Go garbage collection target (GOGC): the heap may grow this many percent over what is live before a collection; "+
		"the GOGC environment variable applies when this flag is not given, "+fmt.Sprint(defaultGCPercent)+" when neither is")
	fs.BoolVar(&f.adaptive, "adaptive-procs", true, "run Go at one P (GOMAXPROCS=1) while the operator uses well under a core, and at the runtime's default "+
		"while it needs more (see internal/sys/procs); the GOMAXPROCS environment variable turns it off when this flag is not given")
	fs.BoolVar(&o.LeaderElection, "enable-leader-election", true, "elect a leader so only one replica reconciles")
	fs.StringVar(&o.LeaderElectionNS, "leader-election-namespace", "", "namespace of the leader election lease")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a standby waits, from when it last saw the lease renewed, before taking over a leader that stopped without releasing it")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps retrying to renew its lease before it gives up leading (and exits); less than the lease duration")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire or renew the lease; renew deadline must exceed 1.2 × this")
	return cmd
}

// defaultGCPercent is the operator's GOGC when neither --gc-percent nor GOGC is set. The operator's live heap is
// small and mostly its informer caches; at Go's default of 100 the heap grows to twice that, plus what a burst
// allocates, before a collection. It trades CPU for memory: 60 since the binary's own pages are given back
// (startup-pages-release) left room for a larger heap at half KubeRay's memory (the measurements:
// docs/benchmarks.md); raise it (--gc-percent, the chart's operator.gcPercent) where CPU counts more.
const defaultGCPercent = 60

// adaptProcs says whether to adapt GOMAXPROCS to the load: as --adaptive-procs says when it is given, else unless
// GOMAXPROCS is set in the environment.
func adaptProcs(flagGiven, on bool) bool {
	if flagGiven {
		return on
	}
	return on && os.Getenv("GOMAXPROCS") == ""
}

// setGCPercent applies --gc-percent when given, else leaves a GOGC from the environment to the runtime, else
// applies the default.
func setGCPercent(flagGiven bool, percent int) {
	if flagGiven || os.Getenv("GOGC") == "" {
		debug.SetGCPercent(percent)
	}
}
