// Package integration holds the tests of the build scripts in hack/ that run them, or what they build.
package integration

import (
	"bytes"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// fakeGo stands for the go command: `go mod download` and `go list -m` do nothing useful, and `go build -o DIR/ PKG...`
// writes one executable per package, named like Go names it, into DIR. After the first binary of a build it waits
// (up to a minute) until tools.sh has reported that binary in its progress log, so the test sees progress whatever
// the load of the machine. Every call is recorded in go-calls, with the directory it ran in.
const fakeGo = `#!/usr/bin/env bash
set -euo pipefail
echo "${PWD#$FAKE_ROOT/}: go $*" >>"$FAKE_ROOT/go-calls"
case $1 in
mod) ;;
list) echo v1.2.3 ;;
build)
	shift
	out="" pkgs=()
	while [ $# -gt 0 ]; do
		case $1 in
		-o) out=$2; shift 2 ;;
		-tags | -ldflags) shift 2 ;;
		*) pkgs+=("$1"); shift ;;
		esac
	done
	dir=${PWD#$FAKE_ROOT/}
	first=1
	for p in "${pkgs[@]}"; do
		printf '#!/bin/sh\n' >"$out${p##*/}"
		chmod +x "$out${p##*/}"
		if [ "$first" = 1 ] && [ "${#pkgs[@]}" -gt 1 ]; then
			first=0
			for _ in $(seq 600); do
				grep -q "make tools: [1-9][0-9]*/${#pkgs[@]} binaries built from $dir " "$FAKE_ROOT/tools.log" 2>/dev/null && break
				sleep 0.1
			done
		fi
	done
	;;
*) echo "fake go: unexpected $*" >&2; exit 1 ;;
esac
`

// nodeBinaries are what the dev cluster's real node runs, paths under bin/.
var nodeBinaries = []string{"kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr", "runc",
	"cni/bridge", "cni/host-local", "cni/loopback", "cni/portmap", "coredns"}

// controlPlaneBinaries are the rest of what build-tools.sh builds.
var controlPlaneBinaries = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl",
	"kwok", "controller-gen", "helm"}

// toolsTree is a copy of the repository's build scripts and tool modules in a temporary directory, with a fake go
// and node-packages.sh, so that tools.sh (what `make tools` runs) can be run fast and observed.
type toolsTree struct {
	t    *testing.T
	root string
}

func newToolsTree(t *testing.T) *toolsTree {
	tr := &toolsTree{t: t, root: t.TempDir()}
	for _, s := range []string{"tools.sh", "build-tools.sh", "build-node-tools.sh"} {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		tr.write("hack/"+s, string(b), 0o755)
	}
	mods, err := filepath.Glob("tools/*/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("tools/node/*/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range append(mods, more...) {
		for _, p := range append([]string{filepath.Join(filepath.Dir(m), "go.sum"), m}, goFiles(t, filepath.Dir(m))...) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			tr.write("hack/"+p, string(b), 0o644)
		}
	}
	tr.write("hack/node-packages.sh", "#!/usr/bin/env bash\n", 0o755)
	tr.write("hack/build-extra-tools.sh", "#!/usr/bin/env bash\necho extra tools checked >&2\n", 0o755)
	tr.write("fakebin/go", fakeGo, 0o755)
	return tr
}

func (tr *toolsTree) write(path, content string, mode os.FileMode) {
	tr.t.Helper()
	p := filepath.Join(tr.root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		tr.t.Fatal(err)
	}
}

// run runs tools.sh and returns what it wrote to stderr and the go commands it ran.
func (tr *toolsTree) run() (log string, goCalls []string) {
	tr.t.Helper()
	logPath := filepath.Join(tr.root, "tools.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		tr.t.Fatal(err)
	}
	defer logFile.Close()
	callsPath := filepath.Join(tr.root, "go-calls")
	if err := os.RemoveAll(callsPath); err != nil {
		tr.t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(tr.root, "hack", "tools.sh"))
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(tr.root, "fakebin")+":"+os.Getenv("PATH"),
		"MANTA_TOOLS_PROGRESS_SECONDS=1", "FAKE_ROOT="+tr.root)
	cmd.Stderr = logFile
	out, runErr := cmd.Output()
	b, err := os.ReadFile(logPath)
	if err != nil {
		tr.t.Fatal(err)
	}
	if runErr != nil {
		tr.t.Fatalf("tools.sh: %v\nstdout:\n%s\nstderr:\n%s", runErr, out, b)
	}
	calls, err := os.ReadFile(callsPath)
	if err != nil && !os.IsNotExist(err) {
		tr.t.Fatal(err)
	}
	for _, l := range strings.Split(string(calls), "\n") {
		if l != "" {
			goCalls = append(goCalls, l)
		}
	}
	return string(b), goCalls
}

// builds returns the module directories a run built in, in order.
func builds(log string) []string {
	var dirs []string
	for _, m := range regexp.MustCompile(`make tools: building .* from hack/tools/(\S+) into bin/`).FindAllStringSubmatch(log, -1) {
		dirs = append(dirs, m[1])
	}
	return dirs
}

// TestToolsScriptReportsProgress runs hack/tools.sh on a copy of the build scripts with a fake go: a cold build of
// each module says what it builds, downloads the module first, reports how many binaries are built and the time
// elapsed while it builds, and how long it took; a warm one says nothing and runs no go build.
func TestToolsScriptReportsProgress(t *testing.T) {
	tr := newToolsTree(t)
	cold, calls := tr.run()
	t.Logf("cold:\n%s", cold)
	if got, want := builds(cold), []string{"k8s", "node/containerd", "node/runc", "node/cni", "node/coredns"}; !slices.Equal(got, want) {
		t.Errorf("cold run builds %q, want %q", got, want)
	}
	for _, want := range []string{
		"make tools: building etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet kube-proxy kwok controller-gen helm from hack/tools/k8s into bin/",
		"make tools: downloading the modules hack/tools/k8s needs...",
		"make tools: control-plane binaries, kubectl, kubelet, kube-proxy, kwok, controller-gen and helm built in 0m",
		"make tools: building containerd containerd-shim-runc-v2 ctr from hack/tools/node/containerd into bin/",
		"make tools: downloading the modules hack/tools/node/containerd needs...",
		"make tools: containerd containerd-shim-runc-v2 ctr built in 0m",
		"make tools: building runc from hack/tools/node/runc into bin/",
		"make tools: runc built in 0m",
		"make tools: building cni/bridge cni/host-local cni/loopback cni/portmap from hack/tools/node/cni into bin/",
		"make tools: cni/bridge cni/host-local cni/loopback cni/portmap built in 0m",
		"make tools: building coredns from hack/tools/node/coredns into bin/",
		"make tools: coredns built in 0m",
		"extra tools checked",
	} {
		if !strings.Contains(cold, want) {
			t.Errorf("cold run does not say %q", want)
		}
	}
	// Every build of more than one binary reports progress, and its count never goes down.
	for dir, total := range map[string]int{"k8s": 10, "node/containerd": 3, "node/cni": 4} {
		re := regexp.MustCompile(`make tools: (\d+)/` + strconv.Itoa(total) + ` binaries built from hack/tools/` + dir + ` \((\d+)m(\d+)s elapsed\)`)
		progress := re.FindAllStringSubmatch(cold, -1)
		if len(progress) == 0 {
			t.Errorf("the build of hack/tools/%s reports no progress", dir)
			continue
		}
		last := -1
		for _, p := range progress {
			n, _ := strconv.Atoi(p[1])
			if n < last {
				t.Errorf("hack/tools/%s: binaries built went down from %d to %d", dir, last, n)
			}
			last = n
		}
		if last < 1 {
			t.Errorf("hack/tools/%s: progress never counted a built binary", dir)
		}
	}
	if n := countPrefix(calls, "go mod download"); n != 5 {
		t.Errorf("want one `go mod download` per module (5), got %d:\n%s", n, strings.Join(calls, "\n"))
	}

	warm, calls := tr.run()
	if strings.Contains(warm, "make tools:") {
		t.Errorf("a warm run reports a build:\n%s", warm)
	}
	if n := countPrefix(calls, "go build"); n != 0 {
		t.Errorf("a warm run ran go build %d times:\n%s", n, strings.Join(calls, "\n"))
	}
}

// countPrefix counts the go calls (each "DIR: go ARGS") whose command starts with prefix.
func countPrefix(calls []string, prefix string) int {
	n := 0
	for _, c := range calls {
		if _, cmd, ok := strings.Cut(c, ": "); ok && strings.HasPrefix(cmd, prefix) {
			n++
		}
	}
	return n
}

// TestToolsRebuildOnlyWhatIsStale: after a cold build, a changed go.sum, a stamp that does not match, or a missing
// binary rebuilds that module alone.
func TestToolsRebuildOnlyWhatIsStale(t *testing.T) {
	tr := newToolsTree(t)
	tr.run()
	for _, tc := range []struct {
		name   string
		change func()
		want   string
	}{
		{"go.sum changed", func() { tr.write("hack/tools/node/runc/go.sum", "changed\n", 0o644) }, "node/runc"},
		{"stale stamp", func() { tr.write("bin/.stamps/node-coredns", "stale\n", 0o644) }, "node/coredns"},
		{"binary missing", func() {
			if err := os.Remove(filepath.Join(tr.root, "bin", "cni", "portmap")); err != nil {
				t.Fatal(err)
			}
		}, "node/cni"},
		{"script changed", func() {
			b, err := os.ReadFile(filepath.Join(tr.root, "hack", "build-tools.sh"))
			if err != nil {
				t.Fatal(err)
			}
			tr.write("hack/build-tools.sh", string(b)+"\n# changed\n", 0o755)
		}, "k8s"},
		{"k8s stamp stale", func() { tr.write("bin/.stamps/k8s", "stale\n", 0o644) }, "k8s"},
	} {
		tc.change()
		log, calls := tr.run()
		if got := builds(log); !slices.Equal(got, []string{tc.want}) {
			t.Errorf("%s: rebuilt %q, want only %s:\n%s", tc.name, got, tc.want, log)
		}
		for _, c := range calls {
			if dir, cmd, _ := strings.Cut(c, ": "); strings.HasPrefix(cmd, "go build") && dir != "hack/tools/"+tc.want {
				t.Errorf("%s: go build ran in %s", tc.name, dir)
			}
		}
	}
}

// TestToolsOutputsAreComplete: a cold build writes every binary the control plane and the real node need and nothing
// else, each script's outputs list (what its stamp and tools.sh's progress check) names exactly what it builds, and
// every package built is pinned by an import of its module's Go files (tools.go, or a main of ours).
func TestToolsOutputsAreComplete(t *testing.T) {
	tr := newToolsTree(t)
	_, calls := tr.run()

	var built []string
	bin := filepath.Join(tr.root, "bin")
	err := filepath.WalkDir(bin, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(bin, p)
		if !strings.HasPrefix(rel, ".stamps") {
			built = append(built, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(nodeBinaries), controlPlaneBinaries...)
	sort.Strings(built)
	sort.Strings(want)
	if !slices.Equal(built, want) {
		t.Errorf("a cold build writes %q, want %q", built, want)
	}

	script, err := os.ReadFile("build-tools.sh")
	if err != nil {
		t.Fatal(err)
	}
	outputs := strings.Fields(string(regexp.MustCompile(`(?m)^outputs="(.*)"$`).FindSubmatch(script)[1]))
	var fromNode []string
	for _, g := range []string{"containerd", "runc", "cni", "coredns"} {
		out, err := exec.Command("./build-node-tools.sh", "--outputs", g).Output()
		if err != nil {
			t.Fatalf("build-node-tools.sh --outputs %s: %v", g, err)
		}
		fromNode = append(fromNode, strings.Fields(string(out))...)
	}
	listed := append(outputs, fromNode...)
	sort.Strings(listed)
	if !slices.Equal(listed, want) {
		t.Errorf("the scripts' outputs lists name %q, the builds write %q", listed, want)
	}

	for _, c := range calls {
		dir, cmd, _ := strings.Cut(c, ": ")
		if !strings.HasPrefix(cmd, "go build") {
			continue
		}
		pinned := map[string]bool{}
		for _, f := range goFiles(t, strings.TrimPrefix(dir, "hack/")) {
			maps.Copy(pinned, imports(t, f))
		}
		for _, arg := range strings.Fields(cmd) {
			if strings.Contains(arg, ".") && strings.Contains(arg, "/") && !strings.Contains(arg, "=") &&
				!strings.HasPrefix(arg, "./") && !strings.HasPrefix(arg, "/") && !pinned[arg] {
				t.Errorf("%s builds %s, which none of its Go files imports", dir, arg)
			}
		}
	}
}

// goFiles lists the Go files of the module at dir, its subdirectories' included.
func goFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") {
			files = append(files, p)
		}
		return err
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("the Go files of %s: %v (found %d)", dir, err, len(files))
	}
	return files
}

// imports returns the import paths of a Go file.
func imports(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, i := range f.Imports {
		p, _ := strconv.Unquote(i.Path.Value)
		m[p] = true
	}
	return m
}

// runNodePackages runs a copy of hack/node-packages.sh with fake dpkg-query, apt-get and id commands: installed lists the packages dpkg-query reports installed, uid is what id -u answers, and apt-get records its calls and
// fails its first `install` when failFirst is set (as on a machine whose package lists are missing).
func runNodePackages(t *testing.T, installed []string, uid int, failFirst bool) (stderr string, aptCalls []string, err error) {
	t.Helper()
	root := t.TempDir()
	script, err := os.ReadFile("node-packages.sh")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"node-packages.sh": string(script),
		"fakebin/dpkg-query": `#!/usr/bin/env bash
for p in ` + strings.Join(installed, " ") + `; do [ "$p" = "${@: -1}" ] && { printf 'install ok installed'; exit 0; }; done
echo "dpkg-query: no packages found matching ${@: -1}" >&2
exit 1
`,
		"fakebin/id": "#!/usr/bin/env bash\n[ \"$1\" = -u ] && echo " + strconv.Itoa(uid) + "\n",
		"fakebin/apt-get": `#!/usr/bin/env bash
echo "apt-get $*" >>"` + filepath.Join(root, "apt-calls") + `"
if [ "$FAIL_FIRST" = 1 ] && [ ! -f "` + filepath.Join(root, "failed") + `" ] && [[ " $* " == *" install "* ]]; then
	touch "` + filepath.Join(root, "failed") + `"
	echo "E: Unable to locate package" >&2
	exit 100
fi
echo "Setting up packages"
`,
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(root, "node-packages.sh"))
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(root, "fakebin")+":"+os.Getenv("PATH"), "FAIL_FIRST="+map[bool]string{true: "1", false: "0"}[failFirst])
	var errBuf, outBuf bytes.Buffer
	cmd.Stderr, cmd.Stdout = &errBuf, &outBuf
	err = cmd.Run()
	if outBuf.Len() > 0 {
		t.Errorf("node-packages.sh wrote to stdout:\n%s", outBuf.String())
	}
	calls, readErr := os.ReadFile(filepath.Join(root, "apt-calls"))
	if readErr != nil && !os.IsNotExist(readErr) {
		t.Fatal(readErr)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(calls)), "\n") {
		if l != "" {
			aptCalls = append(aptCalls, l)
		}
	}
	return errBuf.String(), aptCalls, err
}

// TestNodePackages: hack/node-packages.sh is quiet when every package is there (root or not), installs the missing
// ones in one apt-get call with one line when root (refreshing the package lists when the first try fails), and
// fails naming the missing packages when not root.
func TestNodePackages(t *testing.T) {
	all := []string{"iptables", "nftables", "conntrack", "debootstrap", "libseccomp-dev", "pkg-config", "chromium"}
	some := []string{"iptables", "nftables", "libseccomp-dev", "pkg-config", "chromium"}
	const install = "apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 conntrack debootstrap"

	for _, uid := range []int{0, 1000} {
		stderr, apt, err := runNodePackages(t, all, uid, false)
		if err != nil || stderr != "" || len(apt) != 0 {
			t.Errorf("uid %d, all present: err %v, stderr %q, apt-get calls %q; want quiet success", uid, err, stderr, apt)
		}
	}

	stderr, apt, err := runNodePackages(t, some, 0, false)
	if err != nil {
		t.Errorf("root, two missing: %v\n%s", err, stderr)
	}
	if want := "make tools: installing the Debian packages conntrack debootstrap (apt-get)\n"; stderr != want {
		t.Errorf("root, two missing: stderr %q, want %q", stderr, want)
	}
	if !slices.Equal(apt, []string{install}) {
		t.Errorf("root, two missing: apt-get calls %q, want %q", apt, install)
	}

	stderr, apt, err = runNodePackages(t, some, 0, true)
	if err != nil {
		t.Errorf("root, stale package lists: %v\n%s", err, stderr)
	}
	if want := []string{install, "apt-get update -q -o DPkg::Lock::Timeout=300", install}; !slices.Equal(apt, want) {
		t.Errorf("root, stale package lists: apt-get calls %q, want %q", apt, want)
	}

	stderr, apt, err = runNodePackages(t, some, 1000, false)
	if err == nil {
		t.Errorf("not root, two missing: succeeded, want an error")
	}
	if !strings.Contains(stderr, "the Debian packages conntrack debootstrap") || !strings.Contains(stderr, "root") {
		t.Errorf("not root, two missing: the error does not name the packages and root: %q", stderr)
	}
	if len(apt) != 0 {
		t.Errorf("not root: apt-get ran: %q", apt)
	}
}
