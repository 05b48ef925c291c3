package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/manta-dev/manta/internal/testutil"
)

// answer runs bin/NAME with args (and env added) and returns its stdout and stderr together.
func answer(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	path := filepath.Join("..", "bin", name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("bin/%s: %v (make tools builds it)", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("bin/%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestNodeBinariesAnswer runs every binary of the real node that `make tools` built into bin/ and checks that each
// is the pinned version and has what the node relies on: runc with seccomp, CoreDNS with the plugins cluster DNS
// uses, the CNI plugins speaking the CNI protocol.
func TestNodeBinariesAnswer(t *testing.T) {
	kube := testutil.PinnedToolVersion(t, "k8s", "k8s.io/kubernetes")
	for _, name := range []string{"kubelet", "kube-proxy"} {
		if got, want := strings.TrimSpace(answer(t, nil, name, "--version")), "Kubernetes "+kube; got != want {
			t.Errorf("bin/%s --version: %q, want %q", name, got, want)
		}
	}

	containerd := testutil.PinnedToolVersion(t, "node/containerd", "github.com/containerd/containerd/v2")
	for name, args := range map[string][]string{
		"containerd":              {"--version"},
		"ctr":                     {"--version"},
		"containerd-shim-runc-v2": {"-v"},
	} {
		if got := answer(t, nil, name, args...); !strings.Contains(got, " "+containerd) {
			t.Errorf("bin/%s %s does not say %s:\n%s", name, args[0], containerd, got)
		}
	}

	runc := answer(t, nil, "runc", "--version")
	if want := "runc version " + strings.TrimPrefix(testutil.PinnedToolVersion(t, "node/runc", "github.com/opencontainers/runc"), "v") + "\n"; !strings.HasPrefix(runc, want) {
		t.Errorf("bin/runc --version does not start with %q:\n%s", want, runc)
	}
	if !regexp.MustCompile(`(?m)^libseccomp: \d+\.\d+\.\d+$`).MatchString(runc) {
		t.Errorf("bin/runc is built without seccomp (no libseccomp line in --version):\n%s", runc)
	}

	cni := testutil.PinnedToolVersion(t, "node/cni", "github.com/containernetworking/plugins")
	for _, plugin := range []string{"bridge", "host-local", "loopback", "portmap"} {
		name := "cni/" + plugin
		if got := answer(t, []string{"CNI_COMMAND=VERSION"}, name); !strings.Contains(got, `"supportedVersions":[`) || !strings.Contains(got, `"1.0.0"`) {
			t.Errorf("bin/%s with CNI_COMMAND=VERSION: %q, want the CNI versions it supports, 1.0.0 among them", name, got)
		}
		if got, want := answer(t, nil, name), "CNI "+plugin+" plugin "+cni; !strings.Contains(got, want) {
			t.Errorf("bin/%s does not say %q:\n%s", name, want, got)
		}
	}

	coredns := strings.TrimPrefix(testutil.PinnedToolVersion(t, "node/coredns", "github.com/coredns/coredns"), "v")
	if got := answer(t, nil, "coredns", "-version"); !strings.Contains(got, "CoreDNS-"+coredns) {
		t.Errorf("bin/coredns -version does not say CoreDNS-%s:\n%s", coredns, got)
	}
	plugins := map[string]bool{}
	for _, l := range strings.Fields(answer(t, nil, "coredns", "-plugins")) {
		plugins[strings.TrimPrefix(l, "dns.")] = true
	}
	for _, p := range []string{"bind", "log", "kubernetes", "forward", "errors", "health", "ready", "cache", "loop", "reload"} {
		if !plugins[p] {
			t.Errorf("bin/coredns lacks the %s plugin", p)
		}
	}
}

// TestRuncAppliesSeccomp runs a container with bin/runc whose seccomp filter refuses mkdir: the process inside sees
// EPERM, so the seccomp runc was built with works on this machine (RuntimeDefault profiles rely on it).
func TestRuncAppliesSeccomp(t *testing.T) {
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "bundle", "rootfs")
	src := filepath.Join(dir, "src")
	for _, d := range []string{rootfs, src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"go.mod": "module probe\n\ngo 1.26\n",
		"main.go": `package main

import (
	"fmt"
	"os"
)

func main() { fmt.Println("mkdir:", os.Mkdir("/made", 0o755)) }
`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-o", filepath.Join(rootfs, "probe"), ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}

	runc, err := filepath.Abs(filepath.Join("..", "bin", "runc"))
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "bundle")
	spec := exec.Command(runc, "spec")
	spec.Dir = bundle
	if out, err := spec.CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	var config map[string]any
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &config); err != nil {
		t.Fatal(err)
	}
	process := config["process"].(map[string]any)
	process["args"] = []string{"/probe"}
	process["terminal"] = false
	config["root"].(map[string]any)["readonly"] = false
	config["linux"].(map[string]any)["seccomp"] = map[string]any{
		"defaultAction": "SCMP_ACT_ALLOW",
		"architectures": []string{"SCMP_ARCH_X86_64"},
		"syscalls":      []map[string]any{{"names": []string{"mkdir", "mkdirat"}, "action": "SCMP_ACT_ERRNO", "errnoRet": 1}},
	}
	if b, err = json.Marshal(config); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// runc run waits for the container and deletes it (and its cgroups) when the process exits.
	run := exec.CommandContext(ctx, runc, "--root", filepath.Join(dir, "state"), "run", fmt.Sprintf("manta-seccomp-probe-%d", os.Getpid()))
	run.Dir = bundle
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("runc run: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "mkdir: mkdir /made: operation not permitted"; got != want {
		t.Errorf("inside the container: %q, want %q (the seccomp filter refusing mkdir)", got, want)
	}
}
