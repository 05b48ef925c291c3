package raycluster

import "testing"

// A node port or port that is a multiple of 1000 is still written in digits in status.endpoints.
func TestEndpointPortDigits(t *testing.T) {
	for in, want := range map[int32]string{8000: "8000", 32000: "32000", 31234: "31234", 6379: "6379"} {
		if got := itoa(in); got != want {
			t.Errorf("itoa(%d) = %q, want %q", in, got, want)
		}
	}
}
