package hack

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every controller writes its object's status through one reconcile.StatusWriter (internal/reconcile's rules): a
// direct Status().Update or Status().Patch elsewhere in the operator's code would bypass the writer the operator
// chose (metadata-only, counted by optimize) and the rules the package states.
func TestStatusWritesGoThroughTheWriter(t *testing.T) {
	direct := regexp.MustCompile(`\.Status\(\)\.(Update|Patch)\(`)
	for _, root := range []string{"../internal", "../cmd"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			if filepath.ToSlash(filepath.Dir(path)) == "../internal/reconcile" || strings.Contains(filepath.ToSlash(path), "/testutil/") {
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

// Every controller reads the time from its Options.Clock only (internal/reconcile's rules): a time.Now elsewhere in
// a controller package would not move when a test steps the fake clock, and a deadline or backoff read from it would
// disagree with the timestamps the controller writes.
func TestControllersReadOnlyTheirClock(t *testing.T) {
	forbidInControllers(t, `\btime\.(Now|Since|Until)\b|\bmetav1\.Now\(\)|clock\.RealClock\{\}`,
		"reads the real time; use the controller's Options.Clock (reconcile.Clock)")
}

// A controller records events only through a reconcile.Result (Finish records them by the package's rules), in its
// deletion path as in a live reconcile, and writes its finalizers only with reconcile.AddFinalizer and
// RemoveFinalizer (one conflict rule, metadata only).
func TestControllersShareTheEventAndFinalizerPaths(t *testing.T) {
	forbidInControllers(t, `\.[Rr]ecorder\.Eventf\(`, "records an event directly; ask the run's reconcile.Result (Eventf, StatusEventf)")
	forbidInControllers(t, `controllerutil\.(Add|Remove)Finalizer\b|\.Patch\([^)]*Finalizer`,
		"writes a finalizer directly; use reconcile.AddFinalizer / RemoveFinalizer")
}

// forbidInControllers reports every line of the controllers' code (tests aside) that matches pattern.
func forbidInControllers(t *testing.T, pattern, why string) {
	t.Helper()
	re := regexp.MustCompile(pattern)
	err := filepath.WalkDir("../internal/controller", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
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
