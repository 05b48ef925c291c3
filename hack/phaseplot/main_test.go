package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestReadPlotTable: the runs a tsv names become one bar of segments each (one per step, in phase order, all bars
// starting after the longest label) and one table row each; a line without a tab or with a note that is not a
// summary is refused with its line number.
func TestReadPlotTable(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "runs.tsv")
	data := "cold\tRayJob finished in 1m25s: job run 1m0s (slowest), scheduling 1s, image pull 9s, container start 1s, Ray start 10s, job submission 4s\n" +
		"\nwarm\tRayJob finished in 1m10s: job run 1m0s (slowest), scheduling 0s, image pull 0s, container start 1s, Ray start 9s\n" +
		"cold, pre-pulled\tRayJob finished in 1m24s: job run 1m0s (slowest), scheduling 1s, image pull 8s, container start 1s, Ray start 10s, job submission 4s\n"
	if err := os.WriteFile(in, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, err := read(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || runs[0].label != "cold" || len(runs[0].steps) != 6 || runs[1].total.String() != "1m10s" || runs[2].label != "cold, pre-pulled" {
		t.Fatalf("runs = %+v", runs)
	}
	svg := plot("RayJob sample", runs)
	if n := strings.Count(svg, "<rect "); n != 6+5+6+7 { // the segments, then the legend's seven swatches
		t.Errorf("%d rects in the SVG, want 24:\n%s", n, svg)
	}
	// Each bar's first segment is its scheduling step, and each starts at the same x, past the longest label.
	starts := regexp.MustCompile(`<rect x="([0-9.]+)" y="[0-9]+" width="[0-9.]+" height="26" fill="[^"]+"><title>scheduling `).FindAllStringSubmatch(svg, -1)
	if len(starts) != 3 {
		t.Fatalf("%d bars start with scheduling, want 3:\n%s", len(starts), svg)
	}
	for _, m := range starts {
		x, err := strconv.ParseFloat(m[1], 64)
		if err != nil || m[1] != starts[0][1] || x < 10+float64(labelWidth*len("cold, pre-pulled")) {
			t.Errorf("bars start at %q, want one x past the label \"cold, pre-pulled\" (from x=10):\n%s", starts, svg)
			break
		}
	}
	if i, j := strings.Index(svg, "<title>scheduling 1s"), strings.Index(svg, "<title>job run 1m0s"); i < 0 || j < i {
		t.Errorf("the cold bar's segments are not in phase order:\n%s", svg)
	}
	var b bytes.Buffer
	table(&b, runs)
	for _, want := range []string{"| cold | 1m25s | 1s | 9s | 1s | 10s | 4s | – | 1m0s |", "| warm | 1m10s | 0s | 0s | 1s | 9s | – | – | 1m0s |",
		"| cold, pre-pulled | 1m24s | 1s | 8s | 1s | 10s | 4s | – | 1m0s |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	for i, bad := range []string{"cold RayJob finished in 3s: scheduling 3s\n", "cold\tnot a summary\n"} {
		p := filepath.Join(dir, "bad.tsv")
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := read(p); err == nil || !strings.Contains(err.Error(), ":1:") {
			t.Errorf("bad input %d: %v", i, err)
		}
	}
}
