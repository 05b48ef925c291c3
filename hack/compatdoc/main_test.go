package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunWritesEveryRowBetweenTheMarkers(t *testing.T) {
	dir := t.TempDir()
	src, doc := filepath.Join(dir, "differences.yaml"), filepath.Join(dir, "compatibility.md")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(src, `deliberate:
  - match: '^events/RayService Warning/FailedToUpdate(Gateway|HTTPRoute)$'
    samples: '^scenario/incremental-upgrade/'
    only: kuberay
    transient: true
    reason: >-
      KubeRay updates
      from its cache.
  - match: '^pod/\S+ spec\.containers\[[^]]+\]\.args\[0\]$'
    rewrite: {from: 'a', to: 'b'}
    reason: Manta's own script.
pending:
  - match: '^x$'
    random: true
    value: 'exists$'
    reason: left to explain
`)
	write(doc, "# Page\n\nbefore\n"+begin+"\nstale text\n"+end+"\nafter\n")
	if err := run(src, doc); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		"before\n" + begin + "\n",
		"\nDeliberate (2):\n",
		"| `^events/RayService Warning/FailedToUpdate(Gateway\\|HTTPRoute)$` | `^scenario/incremental-upgrade/` | KubeRay only | yes: timing or a transient failure | KubeRay updates from its cache. |\n",
		", Manta's value with `a` read as `b` | all | both, with other values | no: a run without it fails | Manta's own script. |\n",
		"\nPending: seen, not yet explained or fixed (1):\n",
		"| `^x$`, values matching `exists$` | all | both, with other values | yes: KubeRay's random choice | left to explain |\n",
		end + "\nafter\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("page lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "stale text") {
		t.Errorf("the old table is still there:\n%s", got)
	}
	// A second run changes nothing: make verify's diff is then empty.
	if err := run(src, doc); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(doc); string(again) != got {
		t.Errorf("second run changed the page")
	}
}

func TestRunRefusesUnknownFieldsAndMissingMarkers(t *testing.T) {
	dir := t.TempDir()
	src, doc := filepath.Join(dir, "differences.yaml"), filepath.Join(dir, "compatibility.md")
	if err := os.WriteFile(doc, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("deliberate:\n  - match: x\n    reason: y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(src, doc); err == nil || !strings.Contains(err.Error(), "markers") {
		t.Errorf("page without markers: err = %v", err)
	}
	if err := os.WriteFile(src, []byte("deliberate:\n  - match: x\n    scope: y\n    reason: z\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(src, doc); err == nil || !strings.Contains(err.Error(), "scope") {
		t.Errorf("unknown field: err = %v", err)
	}
}
