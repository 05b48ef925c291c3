// Package operator wires Manta's controllers into one controller-runtime manager. `manta operator` runs it
// against a real cluster; `manta dev` runs it in-process against the dev cluster.
package operator

import (
	"context"
	"fmt"
	"net"
	"net/http"
	goruntime "runtime"
	"strings"
	"sync"
	"time"
	"weak"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/idle"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/controller/startphases"
	"github.com/manta-dev/manta/internal/ray"
)

// Options are the operator's settings; flags in cmd/manta map onto them one to one.
type Options struct {
	// MetricsAddr is where /metrics is served (empty or "0" disables it): over HTTPS, to callers whose bearer token
	// Kubernetes authenticates (TokenReview) and authorises for get on the non-resource URL /metrics
	// (SubjectAccessReview), unless MetricsInsecure.
	MetricsAddr string
	// MetricsInsecure serves /metrics as plain HTTP to anyone who connects (--metrics-secure=false): for benchmarks
	// and local runs, so Validate allows it only on a loopback address.
	MetricsInsecure bool
	// MetricsAsKubeRay serves /metrics as KubeRay's operator does, plain HTTP to anyone on MetricsAddr, whatever its
	// address (--metrics-as-kuberay; on by default under KubeRay's command name, whose chart probes and scrapes
	// :8080/metrics without credentials).
	MetricsAsKubeRay bool
	HealthProbeAddr  string
	// PprofAddr serves net/http/pprof when set (empty or "0" disables it); for profiling under load.
	PprofAddr        string
	LeaderElection   bool
	LeaderElectionNS string
	// LeaseDuration, RenewDeadline and RetryPeriod time leader election (client-go's meanings; zero keeps
	// controller-runtime's 15 s, 10 s and 2 s). A standby takes over a killed leader's lease once it has seen the
	// lease unrenewed for LeaseDuration, checking every RetryPeriod; a leader that stops gracefully releases the
	// lease at once.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	WatchNamespaces                           []string
	ReconcileConcurrency                      int
	// UseKubernetesProxy makes the operator reach Ray heads through the API server's services/proxy and
	// pods/proxy subresources instead of connecting to pods directly.
	UseKubernetesProxy bool
	// ClusterDomain is used for direct connections: <svc>.<ns>.svc.<ClusterDomain>.
	ClusterDomain string
	// DefaultPodTemplate names a core/v1 PodTemplate (<namespace>/<name>) merged under every Ray pod.
	DefaultPodTemplate string
	// QPS and Burst limit the operator's requests to the API server (0 keeps the rest.Config's own).
	QPS   float32
	Burst int
	// EventQPS and EventBurst limit the event writes, which go through a client of their own (see events.go);
	// 0 means DefaultEventQPS and DefaultEventBurst.
	EventQPS   float32
	EventBurst int
	// StatusCoalesceWindow bounds, under a burst, how long a RayCluster status change that only reports progress
	// waits to be written with the next one (outside a burst it waits at most a second); 0 writes every change at
	// once (--status-coalesce-window; see internal/controller/raycluster/coalesce.go).
	StatusCoalesceWindow time.Duration
	// PullerImage is Manta's own image, from which ImagePullJob puller pods copy their tiny binary.
	PullerImage string
	// ImagePullNodeSelector (a label selector), ImagePullPriorityClass, ImagePullTolerateAllTaints and
	// ImagePullTolerations (key[=value][:effect]) bound every ImagePullJob's pullers: see imagepulljob.Policy.
	ImagePullNodeSelector      string
	ImagePullPriorityClass     string
	ImagePullTolerateAllTaints bool
	ImagePullTolerations       []string
	// SkipNameValidation lets more than one operator run in one process, as tests do: controller-runtime otherwise
	// refuses a second controller of the same name in a process.
	SkipNameValidation bool
	// RayClients builds the clients every controller that talks to a Ray head uses (RayJob, RayService). Nil
	// means one ray.Factory honouring UseKubernetesProxy and ClusterDomain; tests inject faulty clients here.
	RayClients ray.ClientFactory
	// IdleCheckInterval is the least time between two reads of one opted-in RayCluster's head by the idle
	// controller (--idle-check-interval; zero: idle.DefaultCheckInterval). See internal/controller/idle.
	IdleCheckInterval time.Duration
	// RayTimeout bounds each call to a Ray head (zero: ray.DefaultDirectTimeout, or ray.DefaultProxyTimeout with
	// UseKubernetesProxy).
	RayTimeout time.Duration
	// NoRedisCleanup turns off the Redis cleanup of deleted clusters with a Redis-backed GCS
	// (--gcs-ft-redis-cleanup=false, KubeRay's ENABLE_GCS_FT_REDIS_CLEANUP=false).
	NoRedisCleanup bool
	// RayJobStatusCheckTimeout and RayJobTransitionGracePeriod are the RayJob controller's (zero: its defaults);
	// KubeRay's RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS and RAYJOB_DEPLOYMENT_STATUS_TRANSITION_GRACE_PERIOD_SECONDS.
	RayJobStatusCheckTimeout, RayJobTransitionGracePeriod time.Duration
	// RayClusterResyncPeriod is how often a settled RayCluster is looked at again (zero: 5 minutes); KubeRay's
	// RAYCLUSTER_DEFAULT_REQUEUE_SECONDS_ENV.
	RayClusterResyncPeriod time.Duration
	// DeleteRayJobAfterJobFinishes: KubeRay's DELETE_RAYJOB_CR_AFTER_JOB_FINISHES=true (see rayjob.Options).
	DeleteRayJobAfterJobFinishes bool
	// NoZeroDowntime: KubeRay's ENABLE_ZERO_DOWNTIME=false (see rayservice.Options).
	NoZeroDowntime bool
	// BatchScheduler (--batch-scheduler) names the batch scheduler every Ray pod is handed to, one of
	// clusterbuild.BatchSchedulers; EnableBatchScheduler (--enable-batch-scheduler, KubeRay's deprecated switch) means
	// volcano. KubeRay refuses both together and an unknown name, and so does Validate.
	BatchScheduler       string
	EnableBatchScheduler bool
	// NoKubeRayMetrics is --enable-metrics=false: the kuberay_* series of Ray objects are not emitted (KubeRay's
	// control-plane metrics); Manta's own metrics are.
	NoKubeRayMetrics bool
	// PodDefaults are added to every Ray head and worker pod (KubeRay's Configuration file: sidecars, default env,
	// labels and annotations); see clusterbuild.PodDefaults.
	PodDefaults *clusterbuild.PodDefaults
	// Optimizations switches the performance mechanisms (--disable-optimization; nil: all on): see
	// internal/controller/shared/optimize. Turning one off changes what the operator costs, not what it does.
	Optimizations *optimize.Switches
	// StartPhaseLateThreshold (--start-phase-late-threshold): a step of a Ray pod's, RayCluster's or RayJob's start
	// that takes longer gets a Warning event on the RayCluster or RayJob (internal/controller/startphases); 0
	// records none.
	StartPhaseLateThreshold time.Duration
}

// leaderElectionJitter is client-go's leaderelection.JitterFactor: a renewal retry waits up to RetryPeriod × 1.2.
const leaderElectionJitter = 1.2

// Validate refuses settings the operator cannot run with, naming the flag.
func (o Options) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--leader-elect-lease-duration", o.LeaseDuration}, {"--leader-elect-renew-deadline", o.RenewDeadline},
		{"--leader-elect-retry-period", o.RetryPeriod}, {"--ray-timeout", o.RayTimeout},
		{"--status-coalesce-window", o.StatusCoalesceWindow}, {"--start-phase-late-threshold", o.StartPhaseLateThreshold}} {
		if d.v < 0 {
			return fmt.Errorf("%s %s: must not be negative", d.name, d.v)
		}
	}
	if _, err := o.batchScheduler(); err != nil {
		return err
	}
	if err := (idle.Options{CheckInterval: o.IdleCheckInterval}).Validate(); err != nil {
		return err
	}
	if err := validateMetrics(o.MetricsAddr, o.MetricsInsecure, o.MetricsAsKubeRay); err != nil {
		return err
	}
	if _, err := o.imagePullPolicy(); err != nil {
		return err
	}
	lease, renew, retry := o.leaderElectionTimes()
	// client-go's own rules (leaderelection.NewLeaderElector), checked here so a bad setting fails at start, not
	// when the manager first campaigns.
	if lease <= renew {
		return fmt.Errorf("--leader-elect-lease-duration %s must be greater than --leader-elect-renew-deadline %s", lease, renew)
	}
	if float64(renew) <= leaderElectionJitter*float64(retry) {
		return fmt.Errorf("--leader-elect-renew-deadline %s must be greater than %.1f × --leader-elect-retry-period %s", renew, leaderElectionJitter, retry)
	}
	return nil
}

// batchScheduler is the scheduler --batch-scheduler or --enable-batch-scheduler selects ("" for none), as KubeRay
// selects it: both at once, or a name it does not know, is an error naming the flag.
func (o Options) batchScheduler() (string, error) {
	switch {
	case o.EnableBatchScheduler && o.BatchScheduler != "":
		return "", fmt.Errorf("--enable-batch-scheduler (deprecated) and --batch-scheduler are both set: use --batch-scheduler only")
	case o.EnableBatchScheduler:
		return clusterbuild.SchedulerVolcano, nil
	case o.BatchScheduler != "" && !clusterbuild.ValidBatchScheduler(o.BatchScheduler):
		return "", fmt.Errorf("--batch-scheduler %q: not a batch scheduler KubeRay supports (%s)", o.BatchScheduler, strings.Join(clusterbuild.BatchSchedulers, ", "))
	}
	return o.BatchScheduler, nil
}

// validateMetrics refuses plain HTTP metrics anywhere but on loopback: they say what runs in the cluster and cost
// the operator CPU to render, so only callers Kubernetes vouches for get them over the network.
func validateMetrics(addr string, insecure, asKubeRay bool) error {
	if asKubeRay && !insecure {
		return fmt.Errorf("--metrics-as-kuberay serves plain HTTP metrics, and --metrics-secure asks for HTTPS: choose one")
	}
	if !insecure || asKubeRay || addr == "" || addr == "0" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--metrics-secure=false with --metrics-addr %q: plain HTTP metrics are served only on a loopback address (127.0.0.1:<port>, [::1]:<port> or localhost:<port>)", addr)
	}
	return nil
}

// metricsOptions serves metrics at addr: HTTPS with a self-signed certificate (controller-runtime's), every
// request authenticated and authorised by the API server, unless insecure.
func metricsOptions(addr string, insecure bool) metricsserver.Options {
	if addr == "" {
		addr = "0"
	}
	if insecure {
		return metricsserver.Options{BindAddress: addr}
	}
	return metricsserver.Options{BindAddress: addr, SecureServing: true, FilterProvider: metricsAuthFilter}
}

// imagePullPolicy is the ImagePullJob policy the --image-pull-* flags describe.
func (o Options) imagePullPolicy() (imagepulljob.Policy, error) {
	p := imagepulljob.Policy{PriorityClassName: o.ImagePullPriorityClass, TolerateAllTaints: o.ImagePullTolerateAllTaints}
	if o.ImagePullNodeSelector != "" {
		sel, err := labels.Parse(o.ImagePullNodeSelector)
		if err != nil {
			return p, fmt.Errorf("--image-pull-node-selector %q: %w", o.ImagePullNodeSelector, err)
		}
		p.NodeSelector = sel
	}
	t, err := imagepulljob.ParseTolerations(o.ImagePullTolerations)
	if err != nil {
		return p, fmt.Errorf("--image-pull-tolerations: %w", err)
	}
	p.Tolerations = t
	return p, nil
}

// leaderElectionTimes are the lease duration, renew deadline and retry period in force: the options, or
// controller-runtime's defaults for the ones left zero.
func (o Options) leaderElectionTimes() (lease, renew, retry time.Duration) {
	lease, renew, retry = 15*time.Second, 10*time.Second, 2*time.Second
	if o.LeaseDuration > 0 {
		lease = o.LeaseDuration
	}
	if o.RenewDeadline > 0 {
		renew = o.RenewDeadline
	}
	if o.RetryPeriod > 0 {
		retry = o.RetryPeriod
	}
	return lease, renew, retry
}

// Scheme holds the types the operator reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := addTypes(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewManager builds the manager with the cache scoped to what the controllers need: pods are cached only when
// they carry ray.io/node-type and Services when they carry ray.io/cluster, so the operator's memory follows Ray pods, not the cluster.
func NewManager(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	// rest_client_rate_limiter_duration_seconds: how long requests waited on the client-side rate limiter (--qps,
	// --burst), the figure that says whether the limit or the API server bounds the operator under load. Once per
	// process (controller-runtime guards it).
	metrics.RegisterRESTClientMetrics(metrics.MetricRateLimiterLatency)
	cfg = rest.CopyConfig(cfg)
	if opts.QPS > 0 {
		cfg.QPS = opts.QPS
	}
	if opts.Burst > 0 {
		cfg.Burst = opts.Burst
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	cacheOpts, podSel, err := cacheOptions(cfg, opts.WatchNamespaces)
	if err != nil {
		return nil, err
	}
	pprofAddr := opts.PprofAddr
	if pprofAddr == "" {
		pprofAddr = "0"
	}
	var ctrlOpts config.Controller
	if opts.SkipNameValidation {
		ctrlOpts.SkipNameValidation = ptr.To(true)
	}
	lease, renew, retry := opts.leaderElectionTimes()
	// HTTP/1.1: ALPN offers only http/1.1, so client-go's transport does not set up HTTP/2 (utilnet.SetTransportDefaults).
	// shortIdle is the first wrap, so it is handed client-go's transport itself.
	if opts.Optimizations.On(optimize.HTTP1Connections) {
		cfg.NextProtos = []string{"http/1.1"}
		cfg.Wrap(shortIdle)
		cfg.Wrap(countHTTP1(opts.Optimizations))
	}
	if opts.Optimizations.On(optimize.UncompressedResponses) {
		cfg.DisableCompression = true
		cfg.Wrap(countRequests(opts.Optimizations, optimize.UncompressedResponses))
	}
	// The Ray pod watch reaches client-go with what stripPod would drop already gone (see podWatchBody).
	if opts.Optimizations.On(optimize.PodWatchPruning) {
		cfg.Wrap(pruneRayPodWatches(podSel.String(), opts.Optimizations))
	}
	// And the watches of Manta's custom resources without the managedFields stripUnread drops (see crWatchBody).
	if opts.Optimizations.On(optimize.CRWatchPruning) {
		cfg.Wrap(pruneCRWatches(opts.Optimizations))
	}
	// Their informers decode those watches in one pass per event (see crWatchDecoder), and the pod informer its
	// protobuf watch in place (podWatchDecoder); the capture is outermost.
	if opts.Optimizations.On(optimize.CRWatchDecoding) || opts.Optimizations.On(optimize.PodWatchDecoding) {
		cfg.Wrap(captureWatches)
		cacheOpts.NewInformer = DecodeWatches(scheme, opts.Optimizations)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Controller:              ctrlOpts,
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 metricsOptions(opts.MetricsAddr, opts.MetricsInsecure),
		PprofBindAddress:        pprofAddr,
		HealthProbeBindAddress:  opts.HealthProbeAddr,
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        "manta-operator-leader",
		LeaderElectionNamespace: opts.LeaderElectionNS,
		LeaseDuration:           &lease,
		RenewDeadline:           &renew,
		RetryPeriod:             &retry,
		// A leader that stops (SIGTERM, a rolling update) hands the lease back, so its successor takes over at once
		// instead of after the lease runs out. Safe because `manta operator` exits as soon as the manager returns.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, err
	}
	eventQPS, eventBurst := opts.EventQPS, opts.EventBurst
	if eventQPS <= 0 {
		eventQPS = DefaultEventQPS
	}
	if eventBurst <= 0 {
		eventBurst = DefaultEventBurst
	}
	return withEventRecorder(mgr, eventQPS, eventBurst)
}

// cacheOptions scopes the manager's cache to what the controllers read (see NewManager); podSel is the Ray pods'
// label selector.
func cacheOptions(cfg *rest.Config, namespaces []string) (cache.Options, labels.Selector, error) {
	podSel, err := cachedPodSelector()
	if err != nil {
		return cache.Options{}, nil, err
	}
	svcSel, err := existsSelector(rayv1.LabelCluster)
	if err != nil {
		return cache.Options{}, nil, err
	}
	cacheOpts := cache.Options{
		DefaultTransform: cacheObject,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: podSel, Transform: cachePod},
			// The operator reads only the Services it made, which all carry ray.io/cluster.
			&corev1.Service{}: {Label: svcSel},
			// Its NetworkPolicies and Ingresses carry ray.io/cluster too.
			&networkingv1.NetworkPolicy{}: {Label: svcSel},
			&networkingv1.Ingress{}:       {Label: svcSel},
			// And the claims of the embedded GCS backend it creates (a user's claim is read past the cache).
			&corev1.PersistentVolumeClaim{}: {Label: svcSel},
			// The only Jobs it reads are RayJob submitters and Redis cleanup Jobs, labelled
			// created-by=kuberay-operator as KubeRay's are.
			&batchv1.Job{}: {Label: labels.SelectorFromSet(labels.Set{rayv1.LabelCreatedBy: rayv1.CreatedByValue})},
			// The kubelet's Pulled events, the image-pull phase of the start phases.
			&corev1.Event{}: startphases.PulledEvents(),
		},
	}
	// And its cert-manager Issuers and Certificates (tlsOptions), where cert-manager is installed: the cache looks
	// up every kind it is told about when it starts, and one the API server does not serve would stop it.
	if certManagerServed(cfg) {
		cacheOpts.ByObject[&cmv1.Issuer{}] = cache.ByObject{Label: svcSel}
		cacheOpts.ByObject[&cmv1.Certificate{}] = cache.ByObject{Label: svcSel}
	}
	// Likewise the Gateways and HTTPRoutes of RayServices' incremental upgrades, where the Gateway API is installed.
	if gatewayAPIServed(cfg) {
		rs := labels.SelectorFromSet(labels.Set{rayv1.LabelOriginCRD: clusterbuild.KindRayService})
		cacheOpts.ByObject[&gwv1.Gateway{}] = cache.ByObject{Label: rs}
		cacheOpts.ByObject[&gwv1.HTTPRoute{}] = cache.ByObject{Label: rs}
	}
	if len(namespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return cacheOpts, podSel, nil
}

// certManagerServed says whether the API server serves cert-manager's Certificates (and so its Issuers).
func certManagerServed(cfg *rest.Config) bool {
	return kindsServed(cfg, cmv1.SchemeGroupVersion.WithKind(cmv1.CertificateKind))
}

// gatewayAPIServed says whether the API server serves the Gateway API's Gateways and HTTPRoutes.
func gatewayAPIServed(cfg *rest.Config) bool {
	return kindsServed(cfg, schema.GroupVersionKind{Group: gwv1.GroupVersion.Group, Version: gwv1.GroupVersion.Version, Kind: "Gateway"}, schema.GroupVersionKind{Group: gwv1.GroupVersion.Group, Version: gwv1.GroupVersion.Version, Kind: "HTTPRoute"})
}

// kindsServed says whether the API server serves every one of kinds.
func kindsServed(cfg *rest.Config, kinds ...schema.GroupVersionKind) bool {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return false
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return false
	}
	for _, k := range kinds {
		if _, err := mapper.RESTMapping(k.GroupKind(), k.Version); err != nil {
			return false
		}
	}
	return true
}

// cachedPodSelector selects Ray pods. (The ImagePullJob controller keeps its puller pods in a cache of its own.)
func cachedPodSelector() (labels.Selector, error) {
	return existsSelector(rayv1.LabelNodeType)
}

func existsSelector(key string) (labels.Selector, error) {
	req, err := labels.NewRequirement(key, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	return labels.NewSelector().Add(*req), nil
}

// Run starts the operator and blocks until ctx is done.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	mgr, err := NewManager(cfg, opts)
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := Setup(mgr, opts); err != nil {
		return err
	}
	if opts.HealthProbeAddr != "" && opts.HealthProbeAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return err
		}
	}
	return mgr.Start(ctx)
}

// http1IdleTimeout is how long an idle HTTP/1.1 connection to the API server is kept for the next request: under
// kube-apiserver's own 90 s (its http.Server IdleTimeout), so that the client ends an idle connection first.
// client-go keeps one 90 s too, and where the two meet a request can be written on a connection the server has
// just closed: a POST that fails so part-way ("transport connection broken: ... broken pipe") is not retried. Over
// HTTP/2 (the optimization off) the one connection is closed with GOAWAY instead, and a request on it retried.
const http1IdleTimeout = 45 * time.Second

// shortened holds the transports shortIdle has set, each set once. Its keys are weak, and a transport's entry is
// dropped when the transport is collected: client-go's cache holds its transports weakly, and a process that starts
// many managers (a test) would otherwise keep every transport it ever made.
var shortened sync.Map // weak.Pointer[http.Transport] -> struct{}

// shortIdle gives client-go's transport http1IdleTimeout. It sets a transport the first time it is handed one:
// client-go's transport cache made it then (its key holds the http/1.1-only NextProtos, which no client but the
// operator's uses), before any request; later configs get the cached transport, which is left alone.
func shortIdle(rt http.RoundTripper) http.RoundTripper {
	inner := rt
	for {
		w, ok := inner.(utilnet.RoundTripperWrapper) // client-go's cache hands its transport in a wrapper of its own
		if !ok {
			break
		}
		inner = w.WrappedRoundTripper()
	}
	if t, ok := inner.(*http.Transport); ok {
		key := weak.Make(t)
		if _, seen := shortened.LoadOrStore(key, struct{}{}); !seen {
			t.IdleConnTimeout = http1IdleTimeout
			goruntime.AddCleanup(t, func(k weak.Pointer[http.Transport]) { shortened.Delete(k) }, key)
		}
	}
	return rt
}

// countHTTP1 counts the answers that came over HTTP/1.1 as acts of http1-connections.
func countHTTP1(sw *optimize.Switches) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.ProtoMajor == 1 {
				sw.Acted(optimize.HTTP1Connections)
			}
			return resp, err
		})
	}
}

// countRequests counts each request sent as an act of mechanism m (a mechanism that acts on every request).
func countRequests(sw *optimize.Switches, m optimize.Mechanism) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			sw.Acted(m)
			return rt.RoundTrip(r)
		})
	}
}
