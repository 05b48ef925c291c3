// Package apiservertest holds what internal/apiserver's unit tests and its envtests share: request models that
// pass validation, a server on loopback, and the decoding of an error body as KubeRay's Go client does it.
package apiservertest

import (
	"context"
	"net"
	"testing"

	"github.com/manta-dev/manta/internal/apiserver"
)

// NewLoopbackServer serves s with Serve (so its checks apply) on a loopback port until the test ends.
func NewLoopbackServer(t *testing.T, s *apiserver.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + ln.Addr().String()
}
