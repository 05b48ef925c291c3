package bench

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/manta-dev/manta/internal/controller/shared/optimize"
)

func TestParseMetrics(t *testing.T) {
	text := `# HELP rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 12
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 40
rest_client_requests_total{code="409",host="127.0.0.1:6443",method="PUT"} 1
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PUT"} 9
rest_client_rate_limiter_duration_seconds_sum{host="127.0.0.1:6443",verb="POST"} 1.5
rest_client_rate_limiter_duration_seconds_sum{host="127.0.0.1:6443",verb="PUT"} 0.25
workqueue_depth{controller="raycluster",name="raycluster"} 3
controller_runtime_reconcile_total{controller="raycluster",result="success"} 70
controller_runtime_reconcile_total{controller="raycluster",result="requeue_after"} 5
controller_runtime_reconcile_total{controller="rayjob",result="success"} 9
manta_events_queued 17
manta_raycluster_statuses_held 3
manta_raycluster_status_staleness_seconds_bucket{le="1"} 4
manta_raycluster_status_staleness_seconds_bucket{le="2"} 10
manta_raycluster_status_staleness_seconds_bucket{le="+Inf"} 10
`
	s := parseMetrics(text)
	if s.requests["GET"] != 12 || s.requests["POST"] != 40 || s.requests["PUT"] != 10 || s.rateLimitWait != 1.75 || s.reconciles != 75 ||
		s.eventsQueued != 17 || s.statusesHeld != 3 || !maps.Equal(s.staleness, histogram{1: 4, 2: 10, math.Inf(1): 10}) {
		t.Errorf("parseMetrics = %+v", s)
	}
	if !maps.Equal(s.reconcilesBy, map[string]float64{"raycluster": 75, "rayjob": 9}) {
		t.Errorf("parseMetrics reconciles by controller = %v", s.reconcilesBy)
	}
	d := s.minus(metricsSnapshot{requests: map[string]float64{"POST": 30}, rateLimitWait: 0.75, reconciles: 25, staleness: histogram{1: 2, 2: 2, math.Inf(1): 2},
		reconcilesBy: map[string]float64{"raycluster": 25, "rayjob": 9}})
	if d.requests["POST"] != 10 || d.rateLimitWait != 1 || d.reconciles != 50 || !maps.Equal(d.staleness, histogram{1: 2, 2: 8, math.Inf(1): 8}) ||
		!maps.Equal(d.reconcilesBy, map[string]float64{"raycluster": 50}) {
		t.Errorf("minus = %+v", d)
	}
}

func TestParseServerRequests(t *testing.T) {
	text := `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 400
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 1200
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 7
apiserver_request_duration_seconds_count{component="apiserver",resource="pods",verb="POST"} 400
`
	got := parseServerRequests(text)
	want := map[string]float64{"POST pods": 400, "PATCH pods/status": 1203, "PATCH pods/status 409": 3}
	if !maps.Equal(got, want) {
		t.Fatalf("parseServerRequests = %v, want %v", got, want)
	}
}

func TestSideBySideTable(t *testing.T) {
	table := sideBySideTable([]trialResult{
		{Contender: "raw", Clusters: 100, Pods: 400, AllReadyS: 10, ToQuiescence: &quiescentFigures{Reached: true, AtS: 11}},
		{Contender: "manta", Clusters: 100, Pods: 400, AllReadyS: 12, CPUSeconds: 2, PeakRSSMiB: 60, WritesPerCl: 6, ServerWritesPerCl: 14,
			RequestsByVerb: map[string]float64{"POST": 5, "PUT": 1}, ControlPlaneCPU: map[string]float64{"kube-apiserver": 30, "etcd": 5, "kwok": 3},
			StatusStalenessS: &[2]float64{1.2, 4.5},
			ToQuiescence: &quiescentFigures{Reached: true, AtS: 20, counted: counted{CPUSeconds: 2.5, WritesPerCl: 9, ServerWritesPerCl: 17,
				RequestsByVerb: map[string]float64{"POST": 8, "PUT": 1}, ControlPlaneCPU: map[string]float64{"kube-apiserver": 35, "etcd": 6}}}},
		{Contender: "kuberay", Clusters: 100, Pods: 400, AllReadyS: 15, ToQuiescence: &quiescentFigures{}},
	})
	for _, want := range []string{"| 100 (400) | raw | 0 | 10.0 s | 11.0 s | - |", "| 100 (400) | manta | 0 | 12.0 s | 20.0 s | 1.20x |",
		"| 2.0 / 2.5 | 30.0 / 5.0, 35.0 / 6.0 | 60 MiB | POST 8.00, PUT 1.00 | 6.0 / 9.0 | 14.0 / 17.0 | 1.20 / 4.50 s |",
		"| kuberay | 0 | 15.0 s | not reached | 1.50x |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	// With raw-rayclusters in the run, it is the ceiling, though the bare pods were faster.
	table = sideBySideTable([]trialResult{
		{Contender: "raw-parallel", Clusters: 100, Pods: 400, AllReadyS: 8},
		{Contender: "raw-rayclusters", Clusters: 100, Pods: 400, AllReadyS: 10},
		{Contender: "manta", Clusters: 100, Pods: 400, AllReadyS: 11},
	})
	if !strings.Contains(table, "| manta | 0 | 11.0 s | not reached | 1.10x |") || !strings.Contains(table, "| raw-rayclusters | 0 | 10.0 s | not reached | - |") {
		t.Errorf("raw-rayclusters is not the ceiling:\n%s", table)
	}
}

func TestSideBySideMedians(t *testing.T) {
	var rs []trialResult
	for round, ready := range []float64{30, 10, 20} {
		rs = append(rs,
			trialResult{Contender: "raw", Clusters: 100, Pods: 400, Round: round, AllReadyS: 10},
			trialResult{Contender: "manta", Clusters: 100, Pods: 400, Round: round, AllReadyS: ready, CPUSeconds: ready / 10,
				PeakRSSMiB: 50 + ready, WritesPerCl: 6, StatusStalenessS: &[2]float64{ready / 10, ready},
				ToQuiescence: &quiescentFigures{Reached: true, AtS: ready + 5, counted: counted{CPUSeconds: ready / 5, WritesPerCl: 9}}})
	}
	table := sideBySideTable(rs)
	for _, want := range []string{"Medians over the rounds", "| 100 (400) | raw | 3 | 10.0 s | 0.0 s | - |",
		"| 100 (400) | manta | 3 | 20.0 s | 25.0 s | 2.00x |", "| 2.0 / 4.0 | 70 MiB | 6.0 / 9.0 |", "| 2.00 / 20.00 s |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if one := sideBySideTable(rs[:2]); strings.Contains(one, "Medians") {
		t.Errorf("one round has no medians:\n%s", one)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
}

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	h := histogram{0.5: 0, 1: 50, 2: 90, 10: 100, inf: 100}
	for q, want := range map[float64]float64{0.5: 1, 0.25: 0.75, 0.7: 1.5, 0.99: 9.2} {
		if got := h.quantile(q); math.Abs(got-want) > 1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if got := (histogram{0: 80, 0.05: 90, 1: 100, inf: 100}).quantile(0.5); got != 0 {
		t.Errorf("the median of mostly zeros = %v, want 0", got)
	}
	if got := (histogram{1: 1, inf: 4}).quantile(0.99); got != 1 {
		t.Errorf("a quantile in +Inf = %v, want the highest finite bound 1", got)
	}
	if got := stalenessP50P99(histogram{1: 0, inf: 0}); got != nil {
		t.Errorf("an empty histogram has quantiles %v", *got)
	}
	if got := stalenessP50P99(h); got == nil || *got != [2]float64{1, 9.2} {
		t.Errorf("stalenessP50P99 = %v", got)
	}
}

func TestServerWrites(t *testing.T) {
	m := map[string]float64{"POST pods": 400, "PATCH pods/status": 400, "PATCH pods/status 409": 3, "PUT leases": 90,
		"PATCH nodes/status": 60, "POST events": 120, "GET pods": 1000, "LIST rayclusters": 5, "DELETE pods": 2}
	if got := serverWrites(m); got != 922 {
		t.Errorf("serverWrites = %v, want 922 (heartbeats, reads and refusals counted again left out)", got)
	}
}

func TestWritesByResource(t *testing.T) {
	before := map[string]float64{"POST pods": 100, "POST events": 300, "PUT leases": 10, "GET pods": 5}
	after := map[string]float64{"POST pods": 300, "POST events": 300, "PUT leases": 50, "GET pods": 90, "DELETE pods": 50, "PATCH pods/status 409": 4}
	want := map[string]float64{"POST pods": 2, "DELETE pods": 0.5}
	if got := writesByResource(after, before, 100); !maps.Equal(got, want) {
		t.Errorf("writesByResource = %v, want %v (heartbeats, reads, refusals and unchanged writes left out)", got, want)
	}
}

func TestRoundOrder(t *testing.T) {
	names := []string{"raw", "manta", "base", "kuberay"}
	for r, want := range []string{"raw manta base kuberay", "manta base kuberay raw", "base kuberay raw manta", "kuberay raw manta base", "raw manta base kuberay"} {
		if got := strings.Join(roundOrder(names, r), " "); got != want {
			t.Errorf("round %d: %s, want %s", r, got, want)
		}
	}
	if got := strings.Join(names, " "); got != "raw manta base kuberay" {
		t.Errorf("roundOrder changed its argument: %s", got)
	}
	if got := roundOrder(nil, 3); len(got) != 0 {
		t.Errorf("no contenders: %v", got)
	}
}

func TestAfterReadyTable(t *testing.T) {
	if got := afterReadyTable([]trialResult{{Contender: "raw-rayclusters", Clusters: 10}}); got != "" {
		t.Errorf("no operator trial, yet a table:\n%s", got)
	}
	rs := []trialResult{
		{Contender: "raw-rayclusters", Clusters: 10},
		{Contender: "manta", Clusters: 10, Round: 1, Scale: &scaleFigures{From: 3, To: 10, PodsS: 0.42, ReadyS: 1.5},
			Idle: &idleFigures{Seconds: 600, CPUPercent: 0.12, RequestsPerMin: map[string]float64{"GET": 0}, ServerWritesPerMin: 0}},
		{Contender: "kuberay-c8", Clusters: 10, Scale: &scaleFigures{From: 3, To: 10, PodsS: 2, ReadyS: -1}},
	}
	got := afterReadyTable(rs)
	for _, want := range []string{
		"| 10 | manta | 1 | 0.42 s / 1.50 s | 0.12 % (600 s) |",
		"| 10 | kuberay-c8 | 0 | 2.00 s / not reached | - | - | - |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "\n") != 4 {
		t.Errorf("want a header, a rule and 2 rows:\n%s", got)
	}
}

func TestAllOptimizationsOff(t *testing.T) {
	args := allOptimizationsOff()
	sw, err := optimize.Parse(strings.Split(strings.TrimPrefix(args[0], "--disable-optimization="), ","))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range optimize.All {
		if sw.On(m) {
			t.Errorf("%s stays on in manta-off: %v", m, args)
		}
	}
	if !slices.Contains(args, "--gc-percent=100") || !slices.Contains(args, "--adaptive-procs=false") {
		t.Errorf("manta-off keeps the GC target or adaptive GOMAXPROCS: %v", args)
	}
}

func TestLineChartSVG(t *testing.T) {
	svg := lineChartSVG("memory <x>", "clusters", "MiB", []string{"manta", "kuberay-c8"}, map[string][][2]float64{
		"manta":      {{1000, 100}, {2500, 180}, {5000, 330}},
		"kuberay-c8": {{1000, 230}, {2500, 480}},
	})
	for _, want := range []string{"<svg ", "</svg>", "memory &lt;x&gt;", ">manta<", ">kuberay-c8<", ">5000<", ">500<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
	if n := strings.Count(svg, "<polyline"); n != 2 {
		t.Errorf("%d lines, want one per series", n)
	}
	if n := strings.Count(svg, "<circle"); n != 5 {
		t.Errorf("%d points drawn, want 5", n)
	}
	for v, want := range map[float64]float64{0: 1, 0.3: 0.5, 330: 500, 480: 500, 1000: 1000, 1001: 2000, 2100: 2500} {
		if got := niceCeil(v); math.Abs(got-want) > 1e-9 {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}

func TestCurveTable(t *testing.T) {
	got := curveTable([]curvePoint{
		{Contender: "manta", Clusters: 1000, StepS: 60, PerClusterMs: 60, RSSMiB: 100, PeakRSSMiB: 110},
		{Contender: "manta", Clusters: 3000, StepS: 150, PerClusterMs: 75, RSSMiB: 160, PeakRSSMiB: 170},
	})
	if !strings.Contains(got, "| manta | 1000 (4000) | 60.0 s | 60 ms | 100 (110) MiB | - |") ||
		!strings.Contains(got, "| manta | 3000 (12000) | 150.0 s | 75 ms | 160 (170) MiB | 30.0 |") {
		t.Errorf("table:\n%s", got)
	}
}

// A contender rerun alone keeps the earlier run's other contenders: their points come first, the rerun's replace its
// own earlier ones.
func TestWithEarlierCurve(t *testing.T) {
	earlier := `{"points":[{"contender":"manta","clusters":1000,"operatorRSSMiB":90},{"contender":"kuberay-c8","clusters":1000,"operatorRSSMiB":260}]}`
	got, err := withEarlierCurve([]byte(earlier), []curvePoint{{Contender: "kuberay-c8", Clusters: 1000, RSSMiB: 270}, {Contender: "kuberay-c8", Clusters: 10000, RSSMiB: 2000}})
	if err != nil {
		t.Fatal(err)
	}
	want := []curvePoint{{Contender: "manta", Clusters: 1000, RSSMiB: 90}, {Contender: "kuberay-c8", Clusters: 1000, RSSMiB: 270}, {Contender: "kuberay-c8", Clusters: 10000, RSSMiB: 2000}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("point %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := withEarlierCurve([]byte("not json"), nil); err == nil {
		t.Error("a broken curve.json was accepted")
	}
}
