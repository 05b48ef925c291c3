package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runAPIServer runs `manta apiserver args...` against a kubeconfig naming an unreachable loopback server, with a
// context already done: a command that passes its checks starts serving and stops at once.
func runAPIServer(t *testing.T, args ...string) error {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	cmd := newAPIServerCommand()
	cmd.SetArgs(args)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cmd.SetContext(ctx)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	return cmd.Execute()
}

// --auth none serves on loopback only; plain HTTP off loopback needs --insecure-http; TLS files go together.
func TestSecurityAPIServerFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--auth=none", "--listen=:8888"}, "loopback"},
		{[]string{"--auth=none", "--listen=0.0.0.0:8888"}, "loopback"},
		{[]string{"--auth=none", "--listen=:8888", "--insecure-http"}, "loopback"},
		{[]string{"--listen=:8888"}, "--insecure-http"},
		{[]string{"--listen=127.0.0.1:0", "--tls-cert-file=/nonexistent/tls.crt"}, "both or neither"},
		{[]string{"--listen=127.0.0.1:0", "--max-requests-inflight=0"}, "at least 1"},
		{[]string{"--auth=none", "--listen=127.0.0.1:0"}, ""},
		{[]string{"--auth=none", "--listen=localhost:0"}, ""},
		{[]string{"--listen=127.0.0.1:0"}, ""},
	} {
		err := runAPIServer(t, c.args...)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.wantErr)
		}
	}
}
