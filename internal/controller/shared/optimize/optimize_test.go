package optimize

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

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

// TestChartSchemaNamesEveryMechanism: the chart's values schema (hand-written) accepts exactly the mechanisms
// --disable-optimization knows, so a new one cannot be missing from operator.disableOptimizations.
func TestChartSchemaNamesEveryMechanism(t *testing.T) {
	data, err := os.ReadFile("../../../../charts/manta/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Operator struct {
				Properties struct {
					DisableOptimizations struct {
						Items struct {
							Enum []string `json:"enum"`
						} `json:"items"`
					} `json:"disableOptimizations"`
				} `json:"properties"`
			} `json:"operator"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	got := schema.Properties.Operator.Properties.DisableOptimizations.Items.Enum
	var want []string
	for _, m := range All {
		want = append(want, string(m))
	}
	if !slices.Equal(got, want) {
		t.Errorf("values.schema.json operator.disableOptimizations enum %v, want %v (optimize.All)", got, want)
	}
}
