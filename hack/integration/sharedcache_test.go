package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// listedPackage is what `go list -deps -json` says of a package that matters here.
type listedPackage struct {
	ImportPath string
	Standard   bool
	Module     *struct{ Path, Version string }
}

// goListDeps lists every package args build, run from dir, keyed by import path.
func goListDeps(t *testing.T, dir string, args ...string) map[string]listedPackage {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,Standard,Module"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", dir, err, stderr.String())
	}
	pkgs := map[string]listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// TestMantaSharesTheToolsBuildCache: Manta's dependencies are compiled once on a cold machine, because every module whose packages both Manta and the tools of hack/tools/k8s
// (the control plane, the kubelet, kwok, controller-gen, helm) build is at the same version in both go.mod files.
// Go's build cache is keyed by a package's source and that of everything it imports, so one differing version deep
// in the graph (golang.org/x/sys, say) makes every package above it compile twice on a cold machine: the tools
// first (make verify builds them), then Manta again for vet, lint and the tests. Aligned, Manta's client-go,
// apimachinery, API types and the rest come from the cache the tools build left; this was minutes of the cold CI.
func TestMantaSharesTheToolsBuildCache(t *testing.T) {
	script, err := os.ReadFile("build-tools.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)\npackages=\(([^)]*)\)`).FindSubmatch(script)
	if m == nil {
		t.Fatal("build-tools.sh: no packages=(...) list")
	}
	tools := goListDeps(t, "tools/k8s", strings.Fields(string(m[1]))...)
	manta := goListDeps(t, "..", "./...")
	differ := map[string]string{}
	for path, p := range manta {
		q, ok := tools[path]
		if p.Standard || !ok || p.Module == nil || q.Module == nil || strings.HasPrefix(path, "github.com/manta-dev/") {
			continue
		}
		if p.Module.Version != q.Module.Version {
			differ[p.Module.Path] = p.Module.Version + " in go.mod, " + q.Module.Version + " in hack/tools/k8s/go.mod"
		}
	}
	for mod, versions := range differ {
		t.Errorf("%s: %s; align them (go get %s@<the tools' version> in the root, or the other way) so the build cache is shared", mod, versions, mod)
	}
	if len(tools) < 1000 || len(manta) < 500 {
		t.Fatalf("go list found %d packages for the tools and %d for Manta: the lists are not what this test expects", len(tools), len(manta))
	}
}
