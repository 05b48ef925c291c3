package operator_test

import (
	"testing"

	"github.com/manta-dev/manta/internal/operator"
)

// TestSecurityOperatorMetricsPlainHTTPOnlyOnLoopback: --metrics-secure=false is refused unless --metrics-addr is
// a loopback address.
func TestSecurityOperatorMetricsPlainHTTPOnlyOnLoopback(t *testing.T) {
	for _, c := range []struct {
		addr     string
		insecure bool
		refused  bool
	}{
		{":8080", true, true},
		{"0.0.0.0:8080", true, true},
		{"10.0.0.7:8080", true, true},
		{"[::]:8080", true, true},
		{"metrics.example.com:8080", true, true},
		{"127.0.0.1:8080", true, false},
		{"[::1]:8080", true, false},
		{"localhost:8080", true, false},
		{"0", true, false}, // disabled
		{":8080", false, false},
	} {
		err := operator.Options{MetricsAddr: c.addr, MetricsInsecure: c.insecure}.Validate()
		if (err != nil) != c.refused {
			t.Errorf("--metrics-addr=%s --metrics-secure=%v: error %v, want refused=%v", c.addr, !c.insecure, err, c.refused)
		}
	}
}
