package envtest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// The operator's clients (they share the manager's HTTP client) take the API server's answers without gzip with
// uncompressed-responses on, and with client-go's default (gzip, inflated by the transport) with it off. The API
// server compresses a list of more than 128 KiB, and watch streams.
func TestUncompressedResponses(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "compression"}}
	if err := cl.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: ns.Name},
			Data: map[string]string{"a": strings.Repeat("compressible ", 5000)}}
		if err := cl.Create(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		sw      *optimize.Switches
		gzipped bool
	}{{optimize.Off(), false}, {optimize.Off(optimize.UncompressedResponses), true}} {
		mgr, err := operator.NewManager(cfg, operator.Options{WatchNamespaces: []string{ns.Name}, SkipNameValidation: true, Optimizations: tc.sw})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/namespaces/%s/configmaps", strings.TrimSuffix(mgr.GetConfig().Host, "/"), ns.Name), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := mgr.GetHTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.Uncompressed != tc.gzipped {
			t.Errorf("uncompressed-responses on=%v: status %d, gzipped by the API server %v; want 200, %v",
				tc.sw.On(optimize.UncompressedResponses), resp.StatusCode, resp.Uncompressed, tc.gzipped)
		}
		resp.Body.Close()
		cancel()
		if got := tc.sw.Count(optimize.UncompressedResponses); (got > 0) == tc.gzipped {
			t.Errorf("uncompressed-responses on=%v counted %d acts", tc.sw.On(optimize.UncompressedResponses), got)
		}
	}
}
