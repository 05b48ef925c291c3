// Package metrics holds the operator's Prometheus metrics, registered with controller-runtime's registry (served
// on --metrics-addr):
//
//   - KubeRay's, with the names, types, help and labels of KubeRay v1.5.0's operator, so its Grafana dashboards
//     and alerts work unchanged. The *_info and *_condition_* gauges are collected at scrape time from the
//     operator's cache, so a deleted object's series go with it; the two duration gauges are set by the
//     controllers on a status transition and deleted by Forget* when the object is gone.
//   - Manta's own for ImagePullJobs: pulls by outcome and pull duration, with bounded labels (no object names).
//   - Manta's start phases (startphases.go): time from creation to each phase of a Ray pod's, RayCluster's and
//     RayJob's start.
//
// The REST API server's metrics (manta_apiserver_*) live in internal/apiserver, on its own /metrics.
package metrics

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// Outcomes of an image pull, the only label of the ImagePullJob metrics.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
)

var (
	clusterProvisionedDuration = &provisionedGauge{
		desc: prometheus.NewDesc("kuberay_cluster_provisioned_duration_seconds",
			"The time, in seconds, when a RayCluster's `RayClusterProvisioned` status transitions from false (or unset) to true",
			[]string{"name", "namespace", "uid"}, nil),
		m: map[types.NamespacedName]provisionedSample{},
	}
	jobExecutionDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kuberay_job_execution_duration_seconds",
		Help: "Duration from when the RayJob CR’s JobDeploymentStatus transitions from Initializing to either the Retrying state or a terminal state, such as Complete or Failed. The Retrying state indicates that the CR previously failed and that spec.backoffLimit is enabled.",
	}, []string{"name", "namespace", "uid", "job_deployment_status", "retry_count"})

	imagePulls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "manta_imagepulljob_pulls_total",
		Help: "Image pulls finished by ImagePullJob puller pods, by outcome (succeeded, failed).",
	}, []string{"outcome"})
	imagePullDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "manta_imagepulljob_pull_duration_seconds",
		Help:    "Time from a puller pod's creation to the end of its pull, by outcome (succeeded, failed).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12), // 1s .. ~34min: Ray images are GBs
	}, []string{"outcome"})

	statusStaleness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "manta_raycluster_status_staleness_seconds",
		Help: "At each RayCluster status write, how long the oldest change it carries was held back by status coalescing (0 when none was): how far the API server's status was behind the operator's.",
		// 0 for the writes that held nothing back, fine below 2 s (the bound outside a burst), then up to the
		// window's 10 s default and beyond.
		Buckets: []float64{0, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 60, 120},
	})

	objects = newObjectCollector()
)

// ObserveStatusStaleness records how long a written RayCluster status change was held back.
func ObserveStatusStaleness(d time.Duration) { statusStaleness.Observe(d.Seconds()) }

// funcGauge reports what a running component answers (0 until one is set): state that lives in its memory, such
// as a queue's length, read at scrape time.
type funcGauge struct {
	prometheus.GaugeFunc
	f atomic.Pointer[func() int]
}

func newFuncGauge(name, help string) *funcGauge {
	g := &funcGauge{}
	g.GaugeFunc = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
		if f := g.f.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
	return g
}

func (g *funcGauge) set(f func() int) { g.f.Store(&f) }

var (
	// eventsQueued reports the operator's event writes not yet sent (SetEventsQueued): queued in memory, or being
	// written.
	eventsQueued = newFuncGauge("manta_events_queued",
		"Event writes not yet sent: waiting in the operator's memory for a writer (at most --event-qps a second) or being written.")
	// statusesHeld reports the RayClusters whose status change the operator holds back (SetStatusesHeld): the
	// change waits in memory on a timer, which no work queue shows, so a reader that needs the API server to have
	// the operator's whole view (a test's settle, a benchmark's quiescence) waits for it to be 0.
	statusesHeld = newFuncGauge("manta_raycluster_statuses_held",
		"RayClusters whose status change is held back by status coalescing and not yet written.")
)

// SetEventsQueued makes manta_events_queued report f (the running operator's event queue).
func SetEventsQueued(f func() int) { eventsQueued.set(f) }

// SetStatusesHeld makes manta_raycluster_statuses_held report f (the running RayCluster controller's held changes).
func SetStatusesHeld(f func() int) { statusesHeld.set(f) }

var registerOnce sync.Once

// Register adds Manta's collectors to controller-runtime's registry, which the manager's /metrics serves. Setup
// calls it; once per process, since several managers may run in one (tests do).
func Register() {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(clusterProvisionedDuration, jobExecutionDuration, imagePulls, imagePullDuration, objects, eventsQueued, statusesHeld, statusStaleness, startPhase)
	})
}

// kubeRayOff is --enable-metrics=false: KubeRay's control-plane series of Ray objects (kuberay_*) are not
// recorded, as KubeRay's operator then emits none; Manta's own (manta_*) stay.
var kubeRayOff atomic.Bool

// SetKubeRay turns the recording of KubeRay's series on or off for the process (on unless set).
func SetKubeRay(on bool) { kubeRayOff.Store(!on) }

// ObserveCluster sets kuberay_cluster_provisioned_duration_seconds when c's RayClusterProvisioned condition turns
// true (from false or unset in old), as KubeRay does: the seconds since c was created. Call it after the status
// write succeeded.
func ObserveCluster(c *rayv1.RayCluster, old *rayv1.RayClusterStatus, now time.Time) {
	cond := string(rayv1.RayClusterProvisioned)
	if kubeRayOff.Load() || meta.IsStatusConditionTrue(old.Conditions, cond) || !meta.IsStatusConditionTrue(c.Status.Conditions, cond) {
		return
	}
	g := clusterProvisionedDuration
	g.mu.Lock()
	defer g.mu.Unlock()
	g.m[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = provisionedSample{uid: string(c.UID), seconds: now.Sub(c.CreationTimestamp.Time).Seconds()}
}

// ForgetCluster deletes the series of a RayCluster that no longer exists.
func ForgetCluster(key types.NamespacedName) {
	g := clusterProvisionedDuration
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, key)
}

// provisionedGauge is kuberay_cluster_provisioned_duration_seconds: one series per RayCluster, kept in a compact
// map and made into samples at scrape time (a GaugeVec child, with its label pairs, hash and metric, cost about
// 2 KB per cluster, which thousands of clusters feel). A cluster recreated under the same name replaces its
// predecessor's series.
type provisionedGauge struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	m    map[types.NamespacedName]provisionedSample
}

type provisionedSample struct {
	uid     string
	seconds float64
}

func (g *provisionedGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *provisionedGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	out := make([]prometheus.Metric, 0, len(g.m))
	for k, s := range g.m {
		out = append(out, prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, s.seconds, k.Name, k.Namespace, s.uid))
	}
	g.mu.Unlock()
	for _, m := range out {
		ch <- m
	}
}

// ObserveJob sets kuberay_job_execution_duration_seconds when j's jobDeploymentStatus moves from a non-terminal
// one (in old) to a terminal one or Retrying, as KubeRay does: the seconds since status.startTime, labelled with
// the new status and the failures before this attempt. Call it after the status write succeeded.
func ObserveJob(j *rayv1.RayJob, old *rayv1.RayJobStatus, now time.Time) {
	s := j.Status.JobDeploymentStatus
	if rayv1.IsJobDeploymentTerminal(old.JobDeploymentStatus) || (!rayv1.IsJobDeploymentTerminal(s) && s != rayv1.JobDeploymentStatusRetrying) {
		return
	}
	if j.Status.StartTime == nil || kubeRayOff.Load() {
		return
	}
	retries := 0
	if old.Failed != nil {
		retries = int(*old.Failed)
	}
	jobExecutionDuration.WithLabelValues(j.Name, j.Namespace, string(j.UID), string(s), strconv.Itoa(retries)).
		Set(now.Sub(j.Status.StartTime.Time).Seconds())
}

// ForgetJob deletes the series of a RayJob that no longer exists.
func ForgetJob(key types.NamespacedName) {
	jobExecutionDuration.DeletePartialMatch(prometheus.Labels{"name": key.Name, "namespace": key.Namespace})
}

// ObservePull counts one finished image pull and its duration. outcome is OutcomeSucceeded or OutcomeFailed.
func ObservePull(outcome string, d time.Duration) {
	imagePulls.WithLabelValues(outcome).Inc()
	imagePullDuration.WithLabelValues(outcome).Observe(d.Seconds())
}

// Kind selects the custom resources whose *_info and *_condition_* series a manager's cache reports.
type Kind int

const (
	RayClusters Kind = iota
	RayJobs
	RayServices
)

// Setup makes scrapes report the *_info and *_condition_* series of the given kinds from mgr's cache while mgr
// runs (on every replica, leader or not, as KubeRay's do). Only list kinds the operator has RBAC for and watches.
func Setup(mgr manager.Manager, kinds ...Kind) error {
	Register()
	return mgr.Add(&source{reader: mgr.GetCache(), kinds: kinds})
}

type source struct {
	reader client.Reader
	kinds  []Kind
}

func (s *source) NeedLeaderElection() bool { return false }

func (s *source) Start(ctx context.Context) error {
	objects.add(s)
	defer objects.remove(s)
	<-ctx.Done()
	return nil
}

// objectCollector reports, at each scrape, one series per object of each source (several managers may run in
// one process, as tests do; an object seen by two is reported once).
type objectCollector struct {
	mu      sync.Mutex
	sources []*source

	clusterInfo, clusterProvisioned             *prometheus.Desc
	jobInfo, jobDeploymentStatus                *prometheus.Desc
	serviceInfo, serviceReady, serviceUpgrading *prometheus.Desc
}

func newObjectCollector() *objectCollector {
	return &objectCollector{
		clusterInfo: prometheus.NewDesc("kuberay_cluster_info", "Metadata information about RayCluster custom resources",
			[]string{"name", "namespace", "uid", "owner_kind"}, nil),
		clusterProvisioned: prometheus.NewDesc("kuberay_cluster_condition_provisioned", "Indicates whether the RayCluster is provisioned",
			[]string{"name", "namespace", "uid", "condition"}, nil),
		jobInfo: prometheus.NewDesc("kuberay_job_info", "Metadata information about RayJob custom resources",
			[]string{"name", "namespace", "uid"}, nil),
		jobDeploymentStatus: prometheus.NewDesc("kuberay_job_deployment_status", "The RayJobs current deployment status",
			[]string{"name", "namespace", "uid", "deployment_status"}, nil),
		serviceInfo: prometheus.NewDesc("kuberay_service_info", "Metadata information about RayService custom resources",
			[]string{"name", "namespace", "uid"}, nil),
		serviceReady: prometheus.NewDesc("kuberay_service_condition_ready",
			"Describes whether the RayService is ready. Ready means users can send requests to the underlying cluster and the number of serve endpoints is greater than 0.",
			[]string{"name", "namespace", "uid", "condition"}, nil),
		serviceUpgrading: prometheus.NewDesc("kuberay_service_condition_upgrade_in_progress",
			"Describes whether the RayService is performing a zero-downtime upgrade.",
			[]string{"name", "namespace", "uid", "condition"}, nil),
	}
}

func (o *objectCollector) add(s *source) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sources = append(o.sources, s)
}

func (o *objectCollector) remove(s *source) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, x := range o.sources {
		if x == s {
			o.sources = append(o.sources[:i], o.sources[i+1:]...)
			return
		}
	}
}

func (o *objectCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{o.clusterInfo, o.clusterProvisioned, o.jobInfo, o.jobDeploymentStatus, o.serviceInfo, o.serviceReady, o.serviceUpgrading} {
		ch <- d
	}
}

// Collect lists each kind from the informer cache without deep copies (client.UnsafeDisableDeepCopy): it only reads
// the objects, and a copy of every RayCluster at each scrape was about 16 KB of garbage per cluster (8 MB per scrape
// with 500 clusters in a heap profile of the benchmark).
func (o *objectCollector) Collect(ch chan<- prometheus.Metric) {
	o.mu.Lock()
	sources := append([]*source(nil), o.sources...)
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := map[types.UID]bool{}
	first := func(uid types.UID) bool {
		if seen[uid] {
			return false
		}
		seen[uid] = true
		return true
	}
	gauge := func(d *prometheus.Desc, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 1, labels...)
	}
	log := ctrl.Log.WithName("metrics")
	for _, s := range sources {
		for _, k := range s.kinds {
			switch k {
			case RayClusters:
				var l rayv1.RayClusterList
				if err := s.reader.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
					log.Error(err, "list RayClusters")
					continue
				}
				for i := range l.Items {
					c := &l.Items[i]
					if !first(c.UID) {
						continue
					}
					owner := c.Labels[rayv1.LabelOriginCRD] // RayJob or RayService when one made the cluster
					if owner == "" {
						owner = "None"
					}
					gauge(o.clusterInfo, c.Name, c.Namespace, string(c.UID), owner)
					gauge(o.clusterProvisioned, c.Name, c.Namespace, string(c.UID),
						strconv.FormatBool(meta.IsStatusConditionTrue(c.Status.Conditions, string(rayv1.RayClusterProvisioned))))
				}
			case RayJobs:
				var l rayv1.RayJobList
				if err := s.reader.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
					log.Error(err, "list RayJobs")
					continue
				}
				for i := range l.Items {
					j := &l.Items[i]
					if !first(j.UID) {
						continue
					}
					gauge(o.jobInfo, j.Name, j.Namespace, string(j.UID))
					gauge(o.jobDeploymentStatus, j.Name, j.Namespace, string(j.UID), string(j.Status.JobDeploymentStatus))
				}
			case RayServices:
				var l rayv1.RayServiceList
				if err := s.reader.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
					log.Error(err, "list RayServices")
					continue
				}
				for i := range l.Items {
					svc := &l.Items[i]
					if !first(svc.UID) {
						continue
					}
					gauge(o.serviceInfo, svc.Name, svc.Namespace, string(svc.UID))
					gauge(o.serviceReady, svc.Name, svc.Namespace, string(svc.UID),
						strconv.FormatBool(meta.IsStatusConditionTrue(svc.Status.Conditions, string(rayv1.RayServiceReady))))
					gauge(o.serviceUpgrading, svc.Name, svc.Namespace, string(svc.UID),
						strconv.FormatBool(meta.IsStatusConditionTrue(svc.Status.Conditions, string(rayv1.UpgradeInProgress))))
				}
			}
		}
	}
}
