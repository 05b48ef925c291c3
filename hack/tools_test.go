// Package hack holds the test of the build scripts beside it.
package hack

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeBuild stands for build-tools.sh: it writes the binaries one after the other, each taking a while, then the
// stamp as the real script does (the hash of the module's go.mod, go.sum and build-tools.sh). tools.sh reads the
// list of binaries from the outputs= line.
const fakeBuild = `#!/usr/bin/env bash
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
outputs="etcd kube-apiserver kwok"
mkdir -p "$root/bin/.stamps"
want=$(cat "$root/hack/tools/k8s/go.mod" "$root/hack/tools/k8s/go.sum" "$root/hack/build-tools.sh" | sha256sum | cut -d' ' -f1)
[ -f "$root/bin/.stamps/k8s" ] && [ "$(cat "$root/bin/.stamps/k8s")" = "$want" ] && exit 0
for o in $outputs; do
	sleep 1.5
	printf '#!/bin/sh\n' >"$root/bin/$o"
	chmod +x "$root/bin/$o"
done
echo "$want" >"$root/bin/.stamps/k8s"
`

// TestToolsScriptReportsProgress runs hack/tools.sh (what `make tools` runs) on a copy of the repository layout
// whose build-tools.sh is fake and fast: a cold build says what it builds, downloads the module first, reports
// how many binaries are built and the time elapsed while it builds, and how long it took; a warm one says nothing.
func TestToolsScriptReportsProgress(t *testing.T) {
	root := t.TempDir()
	script, err := os.ReadFile("tools.sh")
	if err != nil {
		t.Fatal(err)
	}
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("hack/tools.sh", string(script), 0o755)
	write("hack/build-tools.sh", fakeBuild, 0o755)
	write("hack/build-extra-tools.sh", "#!/usr/bin/env bash\necho extra tools checked >&2\n", 0o755)
	write("hack/tools/k8s/go.mod", "module example.com/k8s\n", 0o644)
	write("hack/tools/k8s/go.sum", "", 0o644)
	// A go command that records `go mod download` instead of downloading.
	write("fakebin/go", "#!/usr/bin/env bash\necho \"$PWD: go $*\" >>"+filepath.Join(root, "go-calls")+"\n", 0o755)

	run := func() string {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "hack", "tools.sh"))
		cmd.Env = append(os.Environ(), "PATH="+filepath.Join(root, "fakebin")+":"+os.Getenv("PATH"), "MANTA_TOOLS_PROGRESS_SECONDS=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if out, err := cmd.Output(); err != nil {
			t.Fatalf("tools.sh: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
		}
		return stderr.String()
	}

	start := time.Now()
	cold := run()
	t.Logf("cold %s:\n%s", time.Since(start), cold)
	for _, want := range []string{
		"make tools: building etcd kube-apiserver kwok from hack/tools/k8s into bin/",
		"make tools: downloading the modules hack/tools/k8s needs...",
		"make tools: control-plane binaries, kwok, controller-gen and helm built in 0m",
		"extra tools checked",
	} {
		if !strings.Contains(cold, want) {
			t.Errorf("cold run does not say %q:\n%s", want, cold)
		}
	}
	progress := regexp.MustCompile(`make tools: (\d)/3 binaries built \((\d+)m(\d+)s elapsed\)`).FindAllStringSubmatch(cold, -1)
	if len(progress) < 2 {
		t.Fatalf("cold run reports progress %d times, want it every second of a build of over 4s:\n%s", len(progress), cold)
	}
	last := -1
	for _, p := range progress {
		n, _ := strconv.Atoi(p[1])
		if n < last {
			t.Errorf("binaries built went down from %d to %d:\n%s", last, n, cold)
		}
		last = n
	}
	if last < 1 {
		t.Errorf("progress never counted a built binary:\n%s", cold)
	}
	calls, err := os.ReadFile(filepath.Join(root, "go-calls"))
	if err != nil || strings.Count(string(calls), "go mod download") != 1 {
		t.Errorf("want one `go mod download`, got (%v):\n%s", err, calls)
	}

	warm := run()
	if strings.Contains(warm, "make tools:") {
		t.Errorf("a warm run reports a build:\n%s", warm)
	}
}
