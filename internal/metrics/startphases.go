package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// startPhase is the start-phase histogram of internal/controller/startphases: the time from an object's creation
// to each phase of its start. Labels are bounded: kind (Pod, RayCluster, RayJob), phase (scheduled, image_pulled,
// containers_started, ray_ready, submitted, running, finished) and node_type (head or worker for a Pod, empty for
// the others); no object names.
var startPhase = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name: "manta_start_phase_seconds",
	Help: "Time from a Ray pod's, RayCluster's or RayJob's creation to each phase of its start (scheduled, image_pulled, containers_started, ray_ready; for a RayJob also submitted, running, finished), one sample per object and phase.",
	// 0.5 s (a warm pod scheduled) .. about 68 min (a multi-GB image on a fresh node, a long job).
	Buckets: prometheus.ExponentialBuckets(0.5, 2, 14),
}, []string{"kind", "phase", "node_type"})

// ObserveStartPhase records one object's time from creation to one phase.
func ObserveStartPhase(kind, phase, nodeType string, d time.Duration) {
	startPhase.WithLabelValues(kind, phase, nodeType).Observe(d.Seconds())
}

// StartPhaseSamples is how many samples the start-phase histogram holds for the labels (tests count them).
func StartPhaseSamples(kind, phase, nodeType string) uint64 {
	h, ok := startPhase.WithLabelValues(kind, phase, nodeType).(prometheus.Histogram)
	if !ok {
		return 0
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		return 0
	}
	return m.GetHistogram().GetSampleCount()
}
