package main

import (
	"go/parser"
	"go/token"
	"slices"
	"testing"
)

// parse makes a unit of Go sources, as classify does from files.
func parse(t *testing.T, id string, srcs ...string) *unit {
	t.Helper()
	fset := token.NewFileSet()
	u := &unit{id: id}
	for _, src := range srcs {
		f, err := parser.ParseFile(fset, "x.go", src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		u.files = append(u.files, f)
	}
	return u
}

func newGraph() *graph {
	return &graph{edges: map[string][]string{}, starts: map[string]bool{}, tainted: map[string]bool{}}
}

// A test is left out when it reaches envtest, devcluster.Start or a process start through helpers, methods,
// package-level variables or another package; tests reaching none of them are unit tests.
func TestSplitFollowsCallsToWhatStartsAControlPlane(t *testing.T) {
	packageNames[module+"/internal/testutil"] = "testutil"
	helper := parse(t, module+"/internal/testutil", `package testutil
import "sigs.k8s.io/controller-runtime/pkg/envtest"
func StartEnvtest() { _ = &envtest.Environment{} }
func Pure() int { return 1 }
`)
	pkg := parse(t, module+"/internal/x", `package x
func Plan() int { return 2 }
`, `package x
import (
	"os/exec"
	"testing"
	"github.com/manta-dev/manta/internal/testutil"
	dc "github.com/manta-dev/manta/internal/devcluster"
)
type env struct{}
func (e *env) start() { testutil.StartEnvtest() }
func startEnv() *env { e := &env{}; e.start(); return e }
var shared = startEnv
func TestPlan(t *testing.T) { _ = Plan(); _ = testutil.Pure() }
func TestViaMethod(t *testing.T) { startEnv() }
func TestViaVar(t *testing.T) { shared() }
func TestDevCluster(t *testing.T) { dc.Start() }
func TestBinary(t *testing.T) { exec.Command("true").Run() }
func FuzzPlan(f *testing.F) { f.Fuzz(func(t *testing.T, b []byte) { Plan() }) }
func TestdataDir() string { return "" }
`)
	ext := parse(t, module+"/internal/x_test", `package x_test
import (
	"testing"
	"github.com/manta-dev/manta/internal/x"
)
func TestExternal(t *testing.T) { x.Plan() }
`)
	g := newGraph()
	for _, u := range []*unit{helper, pkg, ext} {
		g.add(u)
	}
	g.propagate()
	unitTests, out := g.split([]*unit{pkg, ext})
	if want := []string{"FuzzPlan", "TestExternal", "TestPlan"}; !slices.Equal(unitTests, want) {
		t.Errorf("unit tests %v, want %v", unitTests, want)
	}
	if want := []string{"TestBinary", "TestDevCluster", "TestViaMethod", "TestViaVar"}; !slices.Equal(out, want) {
		t.Errorf("left out %v, want %v", out, want)
	}
}

// A TestMain that starts a control plane takes every test of its package out.
func TestSplitTestMainTakesThePackageOut(t *testing.T) {
	pkg := parse(t, "example.com/y", `package y
import (
	"os"
	"testing"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)
func TestMain(m *testing.M) { _ = &envtest.Environment{}; os.Exit(m.Run()) }
func TestA(t *testing.T) {}
`)
	g := newGraph()
	g.add(pkg)
	g.propagate()
	if unitTests, out := g.split([]*unit{pkg}); len(unitTests) != 0 || !slices.Equal(out, []string{"TestA"}) {
		t.Errorf("unit tests %v, left out %v; want none and [TestA]", unitTests, out)
	}
}
