// Package hack holds tests of the repository's own rules: that the code, the docs and the build scripts' pins agree.
package hack

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/manta-dev/manta"

// startsProcess names, by import path, what a unit test must not use: the imports that start a control plane or
// another process, and the functions of the module's packages that do. `make test-unit` runs every package but
// those whose path ends in /envtest or /integration and those under test/; a test that needs one of these lives in
// its package's envtest (a control plane) or integration (a dev cluster, another process) package.
var startsProcess = map[string]struct {
	why   string
	funcs []string // empty: the import itself
}{
	"sigs.k8s.io/controller-runtime/pkg/envtest": {why: "starts a kube-apiserver and etcd"},
	"os/exec":                            {why: "starts a process"},
	module + "/internal/testutil/podnet": {why: "runs ip to make a network namespace"},
	"os":                                 {why: "starts a process", funcs: []string{"StartProcess"}},
	"syscall":                            {why: "starts a process", funcs: []string{"ForkExec", "Exec"}},
	// The dev cluster's start, and its look-ups with `go list -m`. Its other functions (RepoRoot, FreePorts,
	// RealNodeSupport, ...) start nothing.
	module + "/internal/devcluster": {why: "starts the dev cluster or runs go", funcs: []string{"Start", "ModuleDir", "GatewayAPICRDs"}},
	module + "/internal/testutil": {why: "starts envtest, or runs go or git", funcs: []string{
		"StartEnvtest", "StartEnvtestWithCRDs", "StartEnvtestAudited", // envtest
		"BuildManta", "BuildMantaTo", "BuildMantaAt", "WorktreeAt", // go build, git worktree
		"FindKubeRayModule", "KubeRayModuleDir", "KubeRayCRDDir", "KubeRaySampleFiles", "MustKubeRaySampleFiles",
		"MustKubeRaySampleFilesNamed",                               // go mod download
		"CertManagerCRDs", "SchedulerPluginsCRDs", "GatewayAPICRDs", // go list -m
	}},
}

// TestUnitPackagesStartNothing: no test file of a package `make test-unit` runs imports or calls what starts a
// control plane, a dev cluster or another process. The check is by name, file by file: an import, or a call of a
// listed function (qualified, or unqualified in the listed package's own tests).
func TestUnitPackagesStartNothing(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dirs := unitPackageDirs(t, root)
	if !slices.Contains(dirs, "internal/clusterbuild") || !slices.Contains(dirs, "internal/apiserver") ||
		slices.Contains(dirs, "internal/operator/envtest") {
		t.Fatalf("unit packages %q: not what the Makefile's test-unit lists", dirs)
	}
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(root, dir, "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range startViolations(t, module+"/"+dir, src) {
				t.Errorf("%s/%s: %s; move the test to %s/envtest (a control plane) or %s/integration (a dev cluster, a process)",
					dir, filepath.Base(f), v, dir, dir)
			}
		}
	}
}

// unitPackageDirs lists, relative to root, the directories of the packages `make test-unit` runs: the directories
// with Go files that `go list ./...` finds (not testdata, vendor, hidden or _ directories, nor nested modules) but
// those ending in /envtest or /integration and those under test/.
func unitPackageDirs(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" ||
			name == "vendor" || name == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() && path != root {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		if d.IsDir() || !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "test" || strings.HasPrefix(rel, "test/") || strings.HasSuffix(rel, "/envtest") || strings.HasSuffix(rel, "/integration") {
			return nil
		}
		if !slices.Contains(dirs, rel) {
			dirs = append(dirs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	return dirs
}

// startViolations says what in the test file src, of the package at importPath, starts a control plane or a
// process.
func startViolations(t *testing.T, importPath string, src []byte) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	local := map[string]string{} // import name in the file -> import path, for the listed functions' packages
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		rule, ok := startsProcess[path]
		if !ok {
			continue
		}
		if len(rule.funcs) == 0 {
			out = append(out, "imports "+path+" ("+rule.why+")")
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		local[name] = path
	}
	own := startsProcess[importPath].funcs
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok {
				if path, ok := local[id.Name]; ok && slices.Contains(startsProcess[path].funcs, x.Sel.Name) {
					out = append(out, "uses "+path+"."+x.Sel.Name+" ("+startsProcess[path].why+")")
				}
			}
		case *ast.CallExpr:
			if id, ok := x.Fun.(*ast.Ident); ok && slices.Contains(own, id.Name) {
				out = append(out, "calls "+id.Name+" ("+startsProcess[importPath].why+")")
			}
		}
		return true
	})
	return out
}

// The check finds each kind of start, under any import name, and passes what starts nothing.
func TestStartViolations(t *testing.T) {
	for _, tc := range []struct {
		name, pkg, src string
		want           int
	}{
		{"envtest import", "x", `package x; import _ "sigs.k8s.io/controller-runtime/pkg/envtest"`, 1},
		{"os/exec", "x", `package x; import "os/exec"; var _ = exec.Command`, 1},
		{"testutil envtest", "x", `package x; import "github.com/manta-dev/manta/internal/testutil"; func f() { testutil.StartEnvtest(nil) }`, 1},
		{"renamed testutil", "x", `package x; import tu "github.com/manta-dev/manta/internal/testutil"; func f() { tu.BuildManta(nil) }`, 1},
		{"testutil builders", "x", `package x; import "github.com/manta-dev/manta/internal/testutil"; var _ = testutil.MakeRayCluster("a", "b")`, 0},
		{"dev cluster", "x", `package x; import "github.com/manta-dev/manta/internal/devcluster"; func f() { devcluster.Start(nil, devcluster.Options{}) }`, 1},
		{"dev cluster's pure functions", "x", `package x; import "github.com/manta-dev/manta/internal/devcluster"; var _, _ = devcluster.RepoRoot()`, 0},
		{"dev cluster from inside", module + "/internal/devcluster", `package devcluster; func f() { Start(nil, Options{}) }`, 1},
		{"os.StartProcess", "x", `package x; import "os"; var _, _ = os.StartProcess("a", nil, nil)`, 1},
		{"os otherwise", "x", `package x; import "os"; var _ = os.Getpid()`, 0},
	} {
		if got := startViolations(t, tc.pkg, []byte(tc.src)); len(got) != tc.want {
			t.Errorf("%s: %q, want %d violations", tc.name, got, tc.want)
		}
	}
}
