package hack

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every controller writes its object's status through one reconcile.StatusWriter
// (internal/controller/shared/reconcile's rules): a direct Status().Update or Status().Patch elsewhere in the
// operator's code would bypass the writer the operator chose (metadata-only, counted by optimize) and the rules the
// package states.
func TestStatusWritesGoThroughTheWriter(t *testing.T) {
	direct := regexp.MustCompile(`\.Status\(\)\.(Update|Patch)\(`)
	for _, root := range []string{"../internal", "../cmd"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			if inReconcile(path) || strings.Contains(filepath.ToSlash(path), "/testutil/") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(src), "\n") {
				if direct.MatchString(line) && !strings.HasPrefix(strings.TrimSpace(line), "//") {
					t.Errorf("%s:%d writes a status directly; use the controller's reconcile.StatusWriter", path, i+1)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Every controller reads the time from its Options.Clock only (internal/controller/shared/reconcile's rules): a
// time.Now elsewhere in a controller package would not move when a test steps the fake clock, and a deadline or backoff
// read from it would disagree with the timestamps the controller writes.
func TestControllersReadOnlyTheirClock(t *testing.T) {
	forbidInControllers(t, `\btime\.(Now|Since|Until)\b|\bmetav1\.Now\(\)|clock\.RealClock\{\}`,
		"reads the real time; use the controller's Options.Clock (reconcile.Clock)")
}

// A controller records events only through a reconcile.Result (Finish records them by the package's rules), in its
// deletion path as in a live reconcile, and writes its finalizers only with reconcile.AddFinalizer and
// RemoveFinalizer (one conflict rule, metadata only).
func TestControllersShareTheEventAndFinalizerPaths(t *testing.T) {
	forbidInControllers(t, `\.[Rr]ecorder\.Eventf\(`, "records an event directly; ask the run's reconcile.Result (Eventf, StatusEventf)")
	forbidInControllers(t, `controllerutil\.(Add|Remove)Finalizer\b|\.Patch\([^)]*Finalizer|reconcile\.(Add|Remove)Finalizer\(`,
		"writes a finalizer itself; give reconcile.Lifecycle its Finalizer and Finalize")
}

// Every controller of a kind reconciles through reconcile.Lifecycle, which alone reads the object, checks
// spec.managedBy, takes a deleted object through its Finalize and writes the status: its Reconcile is the skeleton's.
func TestKindControllersRunTheSkeleton(t *testing.T) {
	for _, kind := range []string{"raycluster", "rayjob", "rayservice", "raycronjob", "imagepulljob"} {
		src, err := os.ReadFile(filepath.Join("../internal/controller", kind, "controller.go"))
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(`(?m)^func \(r \*Reconciler\) Reconcile\(ctx context\.Context, req ctrl\.Request\) \(ctrl\.Result, error\) \{\n\treturn r\.life\.Reconcile\(ctx, req\)\n\}`)
		if !re.Match(src) {
			t.Errorf("%s: Reconcile is not reconcile.Lifecycle's (return r.life.Reconcile(ctx, req))", kind)
		}
	}
	forbidInControllers(t, `ptr\.Deref\(\w+\.Spec\.ManagedBy`, "checks spec.managedBy itself; reconcile.Lifecycle does (its ManagedBy)")
}

// A controller creates and updates its child objects only through reconcile.EnsureOwned (PlanOwned, WriteOwned):
// one place decides what an object another controller holds, a name already taken, a drifted or an immutable field
// mean. The exceptions are not such children.
func TestChildrenGoThroughEnsureOwned(t *testing.T) {
	allowed := map[string][]string{
		// Pods: generated names, created in batches under reconcile.Expectations.
		"raycluster/pods.go":         {"PodCreator.Create(ctx, pod)", "r.client.Create(ctx, pod)"},
		"imagepulljob/controller.go": {"r.client.Create(ctx, p)"},
		// An owner reference from a Certificate on the Secret cert-manager issued: not the cluster's child.
		"raycluster/tls.go": {"r.client.Update(ctx, sec)"},
		// The work queue's event handlers.
		"raycluster/queue.go": {"h.Create(ctx, e", "h.Update(ctx, e"},
	}
	re := regexp.MustCompile(`\.(Create|Update)\(ctx\b`)
	err := filepath.WalkDir("../internal/controller", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || inReconcile(path) {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(filepath.ToSlash(path), "../internal/controller/")
	lines:
		for i, line := range strings.Split(string(src), "\n") {
			if !re.MatchString(line) || strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			for _, ok := range allowed[rel] {
				if strings.Contains(line, ok) {
					continue lines
				}
			}
			t.Errorf("%s:%d creates or updates a child directly; use reconcile.EnsureOwned (or PlanOwned and WriteOwned)", path, i+1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// inReconcile is whether path is in the package that implements these rules (under internal/controller/shared
// with the other shared controller machinery): it is the one place allowed to do what it asks the controllers not to.
func inReconcile(path string) bool {
	return filepath.ToSlash(filepath.Dir(path)) == "../internal/controller/shared/reconcile"
}

// forbidInControllers reports every line of the controllers' code (tests aside) that matches pattern.
func forbidInControllers(t *testing.T, pattern, why string) {
	t.Helper()
	re := regexp.MustCompile(pattern)
	err := filepath.WalkDir("../internal/controller", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || inReconcile(path) {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if re.MatchString(line) && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Errorf("%s:%d %s", path, i+1, why)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
