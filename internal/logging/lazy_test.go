package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	uzap "go.uber.org/zap"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// lines logs the same things through log and returns each line's fields, without the timestamp.
func lines(t *testing.T, buf *bytes.Buffer, log logr.Logger) []map[string]any {
	t.Helper()
	buf.Reset()
	derived := log.WithName("ctrl").WithValues("controller", "raycluster", "namespace", "ns").WithValues("name", "c1")
	derived.Info("reconciled", "pods", 4)
	derived.V(1).Info("hidden at the default level")
	derived.WithName("status").Error(errors.New("conflict"), "status write", "attempt", 2)
	log.Info("plain")
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		delete(m, "ts")
		// The stack's first frame must be the logging call, not the lazy sink; deeper frames differ by call site.
		if st, ok := m["stacktrace"].(string); ok {
			if !strings.HasPrefix(st, "github.com/manta-dev/manta/internal/logging.lines\n") {
				t.Errorf("stack trace does not start at the logging call:\n%s", st)
			}
			delete(m, "stacktrace")
		}
		out = append(out, m)
	}
	return out
}

// TestLazySameLines: a lazy logger writes the lines the zap logger it wraps writes, the caller included (so the
// extra frame is skipped), with the values of every WithValues before the line's own.
func TestLazySameLines(t *testing.T) {
	var buf bytes.Buffer
	base := zap.New(zap.WriteTo(&buf), zap.RawZapOpts(uzap.AddCaller()))
	want := lines(t, &buf, base)
	got := lines(t, &buf, Lazy(base))
	if len(want) != 3 {
		t.Fatalf("zap wrote %d lines, want 3: %v", len(want), want)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lazy logger lines differ:\n got %v\nwant %v", got, want)
	}
	if c, _ := got[0]["caller"].(string); !strings.HasPrefix(c, "logging/lazy_test.go:") {
		t.Errorf("caller %q, want this test file", c)
	}
	if got[0]["name"] != "c1" || got[0]["pods"] != float64(4) || got[1]["logger"] != "ctrl.status" {
		t.Errorf("fields lost: %v", got)
	}
}

// TestLazyDefersEncoding: WithValues on a lazy logger does not touch the wrapped sink (zap encodes values into a
// buffer there), and values recorded by two loggers derived from one parent do not leak into each other.
func TestLazyDefersEncoding(t *testing.T) {
	rec := &recordingSink{}
	log := Lazy(logr.New(rec))
	parent := log.WithValues("a", 1)
	x, y := parent.WithValues("x", 1), parent.WithValues("y", 2)
	if rec.withValues != 0 {
		t.Fatalf("WithValues reached the wrapped sink %d times", rec.withValues)
	}
	x.Info("x")
	y.Info("y")
	if want := []any{"a", 1, "x", 1}; !reflect.DeepEqual(rec.lines[0], want) {
		t.Errorf("x logged %v, want %v", rec.lines[0], want)
	}
	if want := []any{"a", 1, "y", 2}; !reflect.DeepEqual(rec.lines[1], want) {
		t.Errorf("y logged %v, want %v", rec.lines[1], want)
	}
	if n := testing.AllocsPerRun(100, func() { _ = parent.WithValues("reconcileID", "abc") }); n > 3 {
		t.Errorf("WithValues allocates %.0f times, want at most 3", n)
	}
}

// TestLazyValuesChain: values recorded over several WithValues, with WithName and V between them, reach each line
// oldest first, the caller's slice may be reused once WithValues returns, and a WithValues costs the same however
// many values its parent holds (controller-runtime adds three times to a parent with three pairs per reconcile).
func TestLazyValuesChain(t *testing.T) {
	rec := &recordingSink{}
	log := Lazy(logr.New(rec))
	kv := []any{"controller", "raycluster", "controllerGroup", "ray.io", "controllerKind", "RayCluster"}
	parent := log.WithValues(kv...)
	kv[1] = "changed"
	child := parent.WithName("x").WithValues("RayCluster", "ns/c1").V(0).WithValues("namespace", "ns", "name", "c1").WithValues()
	child.WithName("y").Info("line", "n", 1)
	want := []any{"controller", "raycluster", "controllerGroup", "ray.io", "controllerKind", "RayCluster",
		"RayCluster", "ns/c1", "namespace", "ns", "name", "c1", "n", 1}
	if !reflect.DeepEqual(rec.lines[0], want) {
		t.Errorf("logged %v, want %v", rec.lines[0], want)
	}
	parent.Info("parent")
	if want := []any{"controller", "raycluster", "controllerGroup", "ray.io", "controllerKind", "RayCluster"}; !reflect.DeepEqual(rec.lines[1], want) {
		t.Errorf("the parent logged %v, its own values alone expected", rec.lines[1])
	}

	bytesPerOp := func(l logr.Logger) uint64 {
		const n = 1000
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			_ = l.WithValues("reconcileID", "abc")
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	deep := child
	for range 20 {
		deep = deep.WithValues("k", "v")
	}
	if shallow, deep := bytesPerOp(log), bytesPerOp(deep); deep > shallow+16 {
		t.Errorf("WithValues allocates %d bytes under 25 recorded pairs, %d under none: it copies the parent's", deep, shallow)
	}
}

type recordingSink struct {
	withValues int
	lines      [][]any
}

func (r *recordingSink) Init(logr.RuntimeInfo)              {}
func (r *recordingSink) Enabled(int) bool                   { return true }
func (r *recordingSink) Info(_ int, _ string, kv ...any)    { r.lines = append(r.lines, kv) }
func (r *recordingSink) Error(_ error, _ string, kv ...any) { r.lines = append(r.lines, kv) }
func (r *recordingSink) WithValues(...any) logr.LogSink     { r.withValues++; return r }
func (r *recordingSink) WithName(string) logr.LogSink       { return r }
