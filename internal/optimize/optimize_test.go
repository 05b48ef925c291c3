package optimize

import "testing"

func TestParse(t *testing.T) {
	s, err := Parse([]string{"status-coalescing", " pod-watch-pruning", ""})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range All {
		want := m != StatusCoalescing && m != PodWatchPruning
		if s.On(m) != want {
			t.Errorf("%s on = %v, want %v", m, s.On(m), want)
		}
	}
	if _, err := Parse([]string{"no-such"}); err == nil {
		t.Error("an unknown name was accepted")
	}
	var none *Switches
	if !none.On(StatusCoalescing) || none.Count(StatusCoalescing) != 0 {
		t.Error("nil Switches: every mechanism on, none counted")
	}
	none.Acted(StatusCoalescing) // no panic
	s.Acted(TemplateHashCache)
	if s.Count(TemplateHashCache) != 1 {
		t.Errorf("count %d, want 1", s.Count(TemplateHashCache))
	}
}
