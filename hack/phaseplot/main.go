// Command phaseplot draws the start phases of runs side by side: it reads lines "<label><TAB><summary>", where the
// summary is the note of a StartPhases event (internal/controller/startphases), and writes an SVG of one bar per
// run, each step a segment in phase order, and prints the same figures as a Markdown table.
//
//	go run ./hack/phaseplot -in runs.tsv -svg docs/start-phases-rayjob.svg
//
// test/real writes runs.tsv for the sample RayJob cold, warm and cold pre-pulled when MANTA_START_PHASES_OUT names it.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"html"
	"io"
	"os"
	"strings"
	"time"

	"github.com/manta-dev/manta/internal/controller/startphases"
)

type run struct {
	label string
	total time.Duration
	steps []startphases.StepTime
}

func main() {
	in := flag.String("in", "", "runs, one \"<label>\\t<StartPhases event note>\" a line (required)")
	svg := flag.String("svg", "", "where to write the SVG (required)")
	title := flag.String("title", "Start phases", "the plot's title")
	flag.Parse()
	if *in == "" || *svg == "" {
		fmt.Fprintln(os.Stderr, "phaseplot: -in and -svg are required")
		os.Exit(2)
	}
	runs, err := read(*in)
	if err == nil {
		err = os.WriteFile(*svg, []byte(plot(*title, runs)), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "phaseplot:", err)
		os.Exit(1)
	}
	table(os.Stdout, runs)
}

func read(path string) ([]run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var runs []run
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		label, note, ok := strings.Cut(line, "\t")
		if !ok {
			return nil, fmt.Errorf("%s:%d: no tab between the label and the summary", path, n)
		}
		total, steps, err := startphases.ParseSummary(note)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		runs = append(runs, run{label, total, steps})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("%s: no runs", path)
	}
	return runs, nil
}

// colors, one per phase's step.
var colors = map[startphases.Phase]string{
	startphases.Scheduled: "#9e9e9e", startphases.ImagePulled: "#e4572e", startphases.ContainersStarted: "#f3a712",
	startphases.RayReady: "#29335c", startphases.Submitted: "#669bbc", startphases.Running: "#a8c686", startphases.Finished: "#4e8d48",
}

// labelWidth is a generous width of one character of a label at 12 px, so that labels such as "cold, pre-pulled"
// end before the bars begin.
const labelWidth = 7

// plot draws one bar per run on a common scale of seconds, the bars starting after the longest label.
func plot(title string, runs []run) string {
	const right, barH, gap, top = 740, 26, 14, 40
	longest, left := time.Second, 90
	for _, r := range runs {
		longest = max(longest, r.total)
		left = max(left, 20+labelWidth*len([]rune(r.label)))
	}
	scale := float64(right-left) / longest.Seconds()
	height := top + len(runs)*(barH+gap) + 70
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="760" height="%d" font-family="sans-serif" font-size="12">`+"\n", height)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	for i, r := range runs {
		y := top + i*(barH+gap)
		fmt.Fprintf(&b, `<text x="10" y="%d">%s</text>`+"\n", y+barH/2+4, html.EscapeString(r.label))
		x := float64(left)
		for _, s := range r.steps {
			w := s.Duration.Seconds() * scale
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %s</title></rect>`+"\n",
				x, y, w, barH, colors[s.Phase], s.Phase.Step(), s.Duration)
			if w > 34 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="white" text-anchor="middle">%s</text>`+"\n", x+w/2, y+barH/2+4, s.Duration)
			}
			x += w
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", min(x+4, float64(right)-30), y-3, r.total)
	}
	ly := top + len(runs)*(barH+gap) + 10
	for i, p := range startphases.Phases {
		x := 10 + (i%4)*185
		y := ly + (i/4)*20
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, y, colors[p], x+16, y+10, p.Step())
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// table prints the runs as a Markdown table: a column per step.
func table(w io.Writer, runs []run) {
	fmt.Fprint(w, "| run | total |")
	for _, p := range startphases.Phases {
		fmt.Fprintf(w, " %s |", p.Step())
	}
	fmt.Fprint(w, "\n|---|---|")
	for range startphases.Phases {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, r := range runs {
		fmt.Fprintf(w, "| %s | %s |", r.label, r.total)
		for _, p := range startphases.Phases {
			cell := "–"
			for _, s := range r.steps {
				if s.Phase == p {
					cell = s.Duration.String()
				}
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
}
