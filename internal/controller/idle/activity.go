package idle

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/manta-dev/manta/internal/ray"
)

// reads counts the requests idle checks send to Ray heads, by API (jobs, serve, actors, tasks) and outcome (ok,
// error): with one check per cluster per interval, at most four per cluster per interval.
var reads = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "manta_idle_check_reads_total",
	Help: "Requests sent to Ray heads by idle checks (manta.dev/idle-timeout), by API and outcome.",
}, []string{"api", "outcome"})

var registerOnce sync.Once

// registerMetrics adds the counter to controller-runtime's registry once per process (tests run several managers).
func registerMetrics() { registerOnce.Do(func() { ctrlmetrics.Registry.MustRegister(reads) }) }

func count(api string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	reads.WithLabelValues(api, outcome).Inc()
}

// ReadActivity reads the head's jobs, Serve applications, actors and tasks, in that order, and stops at the first
// that shows activity: a busy cluster costs one request, an idle one four.
func ReadActivity(ctx context.Context, d ray.Dashboard) (Activity, error) {
	var a Activity
	jobs, err := d.ListJobs(ctx)
	count("jobs", err)
	if err != nil {
		return a, err
	}
	for i := range jobs {
		if !jobs[i].Status.IsTerminal() {
			a.Jobs++
		}
	}
	if a.Busy() {
		return a, nil
	}
	serve, err := d.GetServeDetails(ctx)
	count("serve", err)
	if err != nil {
		return a, err
	}
	if a.ServeApps = len(serve.Applications); a.Busy() {
		return a, nil
	}
	a.Actors, err = d.CountLiveActors(ctx)
	count("actors", err)
	if err != nil || a.Busy() {
		return a, err
	}
	a.Tasks, err = d.CountActiveTasks(ctx)
	count("tasks", err)
	return a, err
}
