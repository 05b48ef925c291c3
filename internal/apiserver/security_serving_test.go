package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/manta-dev/manta/internal/ray"
)

// Auth none only on loopback; plain HTTP on another address only when asked for.
func TestSecurityServingRules(t *testing.T) {
	withTLS := Options{TLSCertFile: "c", TLSKeyFile: "k"}
	for _, c := range []struct {
		addr string
		opts Options
		ok   bool
	}{
		{"127.0.0.1:8888", Options{Auth: AuthNone}, true},
		{"127.9.9.9:0", Options{Auth: AuthNone}, true},
		{"[::1]:8888", Options{Auth: AuthNone}, true},
		{"localhost:8888", Options{Auth: AuthNone}, true},
		{":8888", Options{Auth: AuthNone}, false},
		{"0.0.0.0:8888", Options{Auth: AuthNone}, false},
		{"[::]:8888", Options{Auth: AuthNone}, false},
		{"10.1.2.3:8888", Options{Auth: AuthNone, InsecureHTTP: true}, false},
		{":8888", Options{Auth: AuthNone, TLSCertFile: "c", TLSKeyFile: "k"}, false},
		{"example.com:8888", Options{Auth: AuthNone}, false},
		// Kubernetes auth: plain HTTP off loopback needs the opt-in or TLS.
		{"127.0.0.1:8888", Options{Auth: AuthKubernetes}, true},
		{":8888", Options{Auth: AuthKubernetes}, false},
		{"0.0.0.0:8888", Options{}, false},
		{":8888", Options{Auth: AuthKubernetes, InsecureHTTP: true}, true},
		{":8888", withTLS, true},
		{"8888", Options{}, false},
	} {
		err := CheckServing(c.addr, c.opts)
		if (err == nil) != c.ok {
			t.Errorf("CheckServing(%q, auth=%q tls=%v insecure=%v) = %v, want ok=%v", c.addr, c.opts.Auth, c.opts.TLSCertFile != "", c.opts.InsecureHTTP, err, c.ok)
		}
		if err != nil && c.opts.Auth == AuthNone && !strings.Contains(err.Error(), "loopback") {
			t.Errorf("CheckServing(%q) with auth none: %v does not say why", c.addr, err)
		}
	}
}

// Serve itself refuses a listener CheckServing refuses, whoever embeds the server.
func TestSecurityServeChecksListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{opts: Options{Auth: AuthNone}, handler: http.NotFoundHandler()}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Serve(ctx, ln); err != nil {
		t.Fatalf("auth none on %s: %v", ln.Addr(), err)
	}
	if err := s.ListenAndServe(ctx, ":0"); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("auth none on :0: %v, want a refusal", err)
	}
}

// Errors from Kubernetes about this server's own identity or its network do not reach callers.
func TestSecurityErrorsHideServerIdentity(t *testing.T) {
	const sa = "system:serviceaccount:manta-system:manta-apiserver"
	const url = "https://10.96.0.1:443"
	for _, err := range []error{
		apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "small", fmt.Errorf("User %q cannot get resource", sa)),
		apierrors.NewUnauthorized("token for " + sa + " expired"),
		fmt.Errorf("Get %q: dial tcp 10.96.0.1:443: connect: connection refused", url+"/api/v1/namespaces/a/configmaps/small"),
		apierrors.NewTooManyRequests("throttled "+sa, 1),
	} {
		e := fromKubernetes(err, `compute template "small"`)
		if strings.Contains(e.Message, sa) || strings.Contains(e.Message, "10.96.0.1") || strings.Contains(e.Message, "serviceaccount") {
			t.Errorf("caller-facing message %q reveals the server's identity or URL", e.Message)
		}
		if e.cause == nil {
			t.Errorf("%q: the cause is not kept for the log", e.Message)
		}
	}
	proxied := &ray.APIError{StatusCode: 403, FromProxy: true, Body: `services "c-head-svc:8265" is forbidden: User "` + sa + `"`, URL: url}
	if e := fromRay(proxied, "job"); strings.Contains(e.Message, sa) {
		t.Errorf("dashboard error %q reveals the server's identity", e.Message)
	}
	if e := fromDashboardSetup(fmt.Errorf("ray auth token secret %q: %w", "c", apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "c", errors.New(sa))), "c"); strings.Contains(e.Message, sa) {
		t.Errorf("dashboard setup error %q reveals the server's identity", e.Message)
	}
}
