// Command unittests runs the module's unit tests: every test that runs in its own process alone, with no control
// plane (kube-apiserver and etcd through envtest, or the dev cluster) and no other process (a built binary, a script,
// an image build). They take seconds. `make test-unit` runs it; `make test` runs every test.
//
// Which tests those are is derived from the source on every run, so the set cannot drift from the code: a test is
// left out when it reaches, through the functions it calls, a use of controller-runtime's envtest package,
// devcluster.Start, or a process start (os/exec, os.StartProcess); testutil.StartEnvtest reaches envtest, so every
// envtest test is found through it. A TestMain that reaches one takes its whole package out. The calls are followed by name, without type checking: a selector
// pkg.F goes to F of the imported package, x.M to every method named M of the same package, and a bare F to the
// package-level F. That over-approximates (a test is at worst left to `make test`), never the other way round.
//
// Usage: go run ./hack/unittests [-list] [packages] [-- go test flags]. Packages default to ./... . -list prints each
// package's unit tests and the tests left out, and runs nothing.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

const (
	module     = "github.com/manta-dev/manta"
	envtestPkg = "sigs.k8s.io/controller-runtime/pkg/envtest"
	devcluster = module + "/internal/devcluster"
)

// roots are the functions that start a dev cluster or another process, besides every use of the envtest package.
var roots = []string{devcluster + ".Start", "os/exec.Command", "os/exec.CommandContext", "os.StartProcess", "syscall.ForkExec", "syscall.Exec"}

// goPackage is what `go list -json` says of one package.
type goPackage struct {
	ImportPath   string
	Name         string
	Dir          string
	GoFiles      []string
	CgoFiles     []string
	TestGoFiles  []string
	XTestGoFiles []string
}

// unit is one compiled package as the analysis sees it: a package's own files with its internal test files, or its
// external (_test) test files.
type unit struct {
	id    string // the import path; with "_test" for the external test package
	files []*ast.File
}

// graph is the name-level call graph of the module: node ids are "unit.Name" for package-level functions and
// variables and "unit.#Name" for all methods called Name.
type graph struct {
	edges   map[string][]string
	starts  map[string]bool // nodes that use the envtest package themselves
	tainted map[string]bool
}

func main() {
	list := flag.Bool("list", false, "print each package's unit tests and the tests left out; run nothing")
	flag.Parse()
	// flag.Parse drops the "--" that ends the flags: what followed it in os.Args ends flag.Args().
	args := flag.Args()
	var testFlags []string
	if i := slices.Index(os.Args, "--"); i >= 0 {
		n := len(os.Args) - i - 1
		args, testFlags = args[:len(args)-n], args[len(args)-n:]
	}
	if err := run(args, testFlags, *list); err != nil {
		fmt.Fprintln(os.Stderr, "unittests:", err)
		os.Exit(1)
	}
}

func run(patterns, testFlags []string, list bool) error {
	all, err := goList([]string{"./..."})
	if err != nil {
		return err
	}
	targets := all
	if len(patterns) > 0 {
		if targets, err = goList(patterns); err != nil {
			return err
		}
	}
	g, units, err := classify(all)
	if err != nil {
		return err
	}
	type split struct {
		pkg        string
		unit, left []string
	}
	var splits []split
	leftNames := map[string]bool{}
	var ran, left int
	for _, p := range targets {
		tests, out := g.split(units[p.ImportPath])
		ran, left = ran+len(tests), left+len(out)
		if list {
			fmt.Printf("%s\n  unit: %s\n  left to make test: %s\n", p.ImportPath, strings.Join(tests, " "), strings.Join(out, " "))
		}
		for _, n := range out {
			leftNames[n] = true
		}
		if len(tests) > 0 {
			splits = append(splits, split{p.ImportPath, tests, out})
		}
	}
	fmt.Printf("unittests: %d tests in %d packages are unit tests; %d start a control plane or another process and are left to make test\n", ran, len(splits), left)
	if ran == 0 {
		return errors.New("no unit tests found")
	}
	if list {
		return nil
	}
	// One go test runs every package whose unit tests' names are not left-out tests elsewhere (then one -run
	// pattern selects exactly the unit tests of each); a package with such a name gets a go test of its own.
	var shared, names []string
	for _, s := range splits {
		if slices.ContainsFunc(s.unit, func(n string) bool { return leftNames[n] }) {
			if err := goTest(testFlags, s.unit, s.pkg); err != nil {
				return err
			}
			continue
		}
		shared, names = append(shared, s.pkg), append(names, s.unit...)
	}
	if len(shared) > 0 {
		slices.Sort(names)
		return goTest(testFlags, slices.Compact(names), shared...)
	}
	return nil
}

// goTest runs go test on pkgs with only the named tests. MANTA_UNIT_TESTS (testutil.UnitTestsEnv) makes
// testutil.StartEnvtest fail the test instead of starting a control plane the analysis missed.
func goTest(testFlags, tests []string, pkgs ...string) error {
	args := slices.Concat([]string{"test"}, testFlags, []string{"-run", "^(" + strings.Join(tests, "|") + ")$"}, pkgs)
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "MANTA_UNIT_TESTS=1")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go test of %s: %w", strings.Join(pkgs, " "), err)
	}
	return nil
}

// classify parses every package of the module and taints the functions that start a control plane or a process.
// It returns, by import path, the package with its internal tests and its external test package.
func classify(all []goPackage) (*graph, map[string][]*unit, error) {
	fset := token.NewFileSet()
	g := &graph{edges: map[string][]string{}, starts: map[string]bool{}, tainted: map[string]bool{}}
	for _, p := range all {
		packageNames[p.ImportPath] = p.Name
	}
	units := map[string][]*unit{} // by import path: the package with its internal tests, then the external tests
	for _, p := range all {
		own, err := parseFiles(fset, p.Dir, slices.Concat(p.GoFiles, p.CgoFiles, p.TestGoFiles))
		if err != nil {
			return nil, nil, err
		}
		ext, err := parseFiles(fset, p.Dir, p.XTestGoFiles)
		if err != nil {
			return nil, nil, err
		}
		units[p.ImportPath] = []*unit{{id: p.ImportPath, files: own}, {id: p.ImportPath + "_test", files: ext}}
		for _, u := range units[p.ImportPath] {
			g.add(u)
		}
	}
	g.propagate()
	return g, units, nil
}

func goList(patterns []string) ([]goPackage, error) {
	out, err := exec.Command("go", append([]string{"list", "-json"}, patterns...)...).Output()
	if err != nil {
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			return nil, fmt.Errorf("go list: %v: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

func parseFiles(fset *token.FileSet, dir string, names []string) ([]*ast.File, error) {
	var files []*ast.File
	for _, n := range names {
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// packageNames are the names of the module's packages by import path.
var packageNames = map[string]string{}

// imports maps a file's import names to import paths. An import without a name is known by its package's name
// (the module's packages) or else by the last element of its path: only references to the module's packages and
// to envtest matter here.
func imports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, `"`)
		name, ok := packageNames[path]
		if !ok {
			name = path[strings.LastIndex(path, "/")+1:]
		}
		if imp.Name != nil {
			name = imp.Name.Name
		}
		m[name] = path
	}
	return m
}

// add records the package-level declarations of u and what each refers to.
func (g *graph) add(u *unit) {
	// Package-level names of the unit, to tell its own references from locals (which may shadow them: then a
	// reference is taken as the package-level one, which only over-approximates).
	own := map[string]bool{}
	for _, f := range u.files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					own[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if vs, ok := s.(*ast.ValueSpec); ok {
						for _, n := range vs.Names {
							own[n.Name] = true
						}
					}
				}
			}
		}
	}
	for _, f := range u.files {
		imps := imports(f)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				id := u.id + "." + d.Name.Name
				if d.Recv != nil {
					id = u.id + ".#" + d.Name.Name
				}
				g.refs(u, id, d, imps, own)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if vs, ok := s.(*ast.ValueSpec); ok {
						for _, n := range vs.Names {
							g.refs(u, u.id+"."+n.Name, vs, imps, own)
						}
					}
				}
			}
		}
	}
}

// refs adds the edges from node id to what the declaration n refers to.
func (g *graph) refs(u *unit, id string, n ast.Node, imps map[string]string, own map[string]bool) {
	// An external test package refers to the package under test by its import.
	base := strings.TrimSuffix(u.id, "_test")
	var visit func(ast.Node) bool
	visit = func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			if pkg, ok := x.X.(*ast.Ident); ok {
				if path, ok := imps[pkg.Name]; ok && !own[pkg.Name] {
					if path == envtestPkg {
						g.starts[id] = true
					}
					g.edges[id] = append(g.edges[id], path+"."+x.Sel.Name)
					return false
				}
			}
			g.edges[id] = append(g.edges[id], u.id+".#"+x.Sel.Name)
			if u.id != base {
				g.edges[id] = append(g.edges[id], base+".#"+x.Sel.Name)
			}
			// The selected name is a method or field, not a package-level name.
			ast.Inspect(x.X, visit)
			return false
		case *ast.Ident:
			if own[x.Name] {
				g.edges[id] = append(g.edges[id], u.id+"."+x.Name)
			}
		}
		return true
	}
	ast.Inspect(n, visit)
}

// propagate taints every node that reaches a root.
func (g *graph) propagate() {
	for n := range g.starts {
		g.tainted[n] = true
	}
	for _, r := range roots {
		g.tainted[r] = true
	}
	for changed := true; changed; {
		changed = false
		for n, to := range g.edges {
			if g.tainted[n] {
				continue
			}
			if slices.ContainsFunc(to, func(t string) bool { return g.tainted[t] }) {
				g.tainted[n] = true
				changed = true
			}
		}
	}
}

// testName matches the functions go test runs: tests, fuzz targets (their seeds) and examples.
var testName = regexp.MustCompile(`^(Test|Fuzz|Example)([^a-z].*)?$`)

// split returns the package's tests that need no control plane and the ones that do.
func (g *graph) split(us []*unit) (unitTests, out []string) {
	mainTainted := false
	var all []string
	for _, u := range us {
		for _, f := range u.files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Recv != nil {
					continue
				}
				if fd.Name.Name == "TestMain" {
					mainTainted = mainTainted || g.tainted[u.id+".TestMain"]
					continue
				}
				if !testName.MatchString(fd.Name.Name) {
					continue
				}
				all = append(all, fd.Name.Name)
				if g.tainted[u.id+"."+fd.Name.Name] {
					out = append(out, fd.Name.Name)
				} else {
					unitTests = append(unitTests, fd.Name.Name)
				}
			}
		}
	}
	if mainTainted {
		return nil, all
	}
	slices.Sort(unitTests)
	slices.Sort(out)
	return unitTests, out
}
