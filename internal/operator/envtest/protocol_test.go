package envtest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// The operator's clients (they share the manager's HTTP client) reach the API server over HTTP/1.1 with
// http1-connections on, and over HTTP/2, client-go's default, with it off; only the HTTP/1.1 answers are counted.
func TestHTTP1Connections(t *testing.T) {
	cfg, _ := testutil.StartEnvtest(t)
	for _, tc := range []struct {
		sw    *optimize.Switches
		proto int
	}{{optimize.Off(), 1}, {optimize.Off(optimize.HTTP1Connections), 2}} {
		mgr, err := operator.NewManager(cfg, operator.Options{WatchNamespaces: []string{"default"}, SkipNameValidation: true, Optimizations: tc.sw})
		if err != nil {
			t.Fatal(err)
		}
		before := tc.sw.Count(optimize.HTTP1Connections) // NewManager's own requests (discovery) included
		for range 2 {                                    // the second request reuses the first one's connection
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet,
				fmt.Sprintf("%s/api/v1/namespaces/default/configmaps", strings.TrimSuffix(mgr.GetConfig().Host, "/")), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := mgr.GetHTTPClient().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != tc.proto {
				t.Errorf("http1-connections on=%v: status %d over %s; want 200 over HTTP/%d",
					tc.sw.On(optimize.HTTP1Connections), resp.StatusCode, resp.Proto, tc.proto)
			}
		}
		if got, want := tc.sw.Count(optimize.HTTP1Connections)-before, map[int]int64{1: 2, 2: 0}[tc.proto]; got != want {
			t.Errorf("http1-connections on=%v counted %d acts, want %d", tc.sw.On(optimize.HTTP1Connections), got, want)
		}
	}
}
