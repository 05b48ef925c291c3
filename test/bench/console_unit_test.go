package bench

import (
	"maps"
	"strconv"
	"testing"
)

func TestParseConsoleMetrics(t *testing.T) {
	at := func(listRC, watchRC, watchNS float64) string {
		return `# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="ray.io",resource="rayclusters",scope="cluster",subresource="",verb="LIST",version="v1"} ` + ftoa(listRC) + `
apiserver_request_total{code="200",component="apiserver",dry_run="",group="ray.io",resource="rayclusters",scope="cluster",subresource="",verb="WATCH",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="status",verb="PATCH",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="",verb="GET",version=""} 99
# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="ray.io",resource="rayclusters",scope="cluster",subresource="",verb="WATCH",version="v1"} ` + ftoa(watchRC) + `
apiserver_longrunning_requests{component="apiserver",group="ray.io",resource="rayjobs",scope="namespace",subresource="",verb="WATCH",version="v1"} ` + ftoa(watchNS) + `
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="log",verb="CONNECT",version="v1"} 1
`
	}
	base := parseConsoleMetrics(at(5, 1, 3))
	if want := map[string]float64{"LIST rayclusters": 5, "WATCH rayclusters": 4, "PATCH nodes/status": 7}; !maps.Equal(base.requests, want) {
		t.Errorf("requests = %v, want %v (the non-resource GET left out)", base.requests, want)
	}
	if want := map[string]float64{"rayclusters (cluster)": 1, "rayjobs (namespace)": 3}; !maps.Equal(base.watches, want) {
		t.Errorf("watches = %v, want %v (CONNECT left out)", base.watches, want)
	}
	now := parseConsoleMetrics(at(6, 3, 3))
	if d := now.minus(base).requests; !maps.Equal(d, map[string]float64{"LIST rayclusters": 1}) {
		t.Errorf("minus = %v, want one LIST", d)
	}
	if w := now.watchesBeyond(base); !maps.Equal(w, map[string]float64{"rayclusters (cluster)": 2}) {
		t.Errorf("watchesBeyond = %v, want two more rayclusters watches", w)
	}
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
