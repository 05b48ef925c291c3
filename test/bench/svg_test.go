package bench

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
)

// lineChartSVG draws one line per series (points as x, y pairs, in order) on axes from 0, with the x values as
// ticks and a legend in order: a plot a browser or GitHub shows without any library.
func lineChartSVG(title, xLabel, yLabel string, order []string, series map[string][][2]float64) string {
	const w, h, left, right, top, bottom = 720.0, 420.0, 80.0, 160.0, 50.0, 60.0
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}
	var xs []float64
	xMax, yMax := 0.0, 0.0
	for _, name := range order {
		for _, p := range series[name] {
			xMax, yMax = max(xMax, p[0]), max(yMax, p[1])
			if !slices.Contains(xs, p[0]) {
				xs = append(xs, p[0])
			}
		}
	}
	xMax, yMax = max(xMax, 1), niceCeil(yMax)
	px := func(x float64) float64 { return left + x/xMax*(w-left-right) }
	py := func(y float64) float64 { return h - bottom - y/yMax*(h-top-bottom) }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&sb, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&sb, `<text x="%.0f" y="24" font-size="15">%s</text>`+"\n", left, html.EscapeString(title))
	// Axes, the y grid (5 steps) and the x ticks (every x measured).
	fmt.Fprintf(&sb, `<path d="M%.1f %.1f V%.1f H%.1f" stroke="black" fill="none"/>`+"\n", left, top, h-bottom, w-right)
	for i := 0; i <= 5; i++ {
		y := yMax * float64(i) / 5
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, py(y), w-right, py(y), left-6, py(y)+4, tickLabel(y))
	}
	slices.Sort(xs)
	for _, x := range xs {
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			px(x), h-bottom, px(x), h-bottom+5, px(x), h-bottom+19, tickLabel(x))
	}
	fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (left+w-right)/2, h-14, html.EscapeString(xLabel))
	fmt.Fprintf(&sb, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (top+h-bottom)/2, html.EscapeString(yLabel))
	for i, name := range order {
		color := colors[i%len(colors)]
		var pts []string
		for _, p := range series[name] {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1])))
			fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(p[0]), py(p[1]), color)
		}
		fmt.Fprintf(&sb, `<polyline points="%s" stroke="%s" stroke-width="2" fill="none"/>`+"\n", strings.Join(pts, " "), color)
		ly := top + 10 + float64(i)*20
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			w-right+15, ly, w-right+35, ly, color, w-right+40, ly+4, html.EscapeString(name))
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten (1 for v <= 0), so the y grid has round labels.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// tickLabel prints a tick value without needless decimals.
func tickLabel(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
