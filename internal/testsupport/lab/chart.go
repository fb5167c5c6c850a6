package lab

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

// Dist is one variant's measured latencies, drawn as one box in the chart.
type Dist struct {
	Figure  string `json:"figure"`
	Variant string `json:"variant"`
	Sample  Sample `json:"samplesNs"`
}

// Box is the five numbers a box plot draws: whiskers at p1 and p99, the box
// from p25 to p75, the median inside.
type Box struct {
	P1, P25, P50, P75, P99 time.Duration
}

// BoxOf computes the box of s (zero for an empty sample).
func BoxOf(s Sample) Box {
	return Box{P1: s.Percentile(1), P25: s.Percentile(25), P50: s.P50(), P75: s.Percentile(75), P99: s.P99()}
}

// chart geometry, in SVG user units.
const (
	chartLabelW = 500
	chartPlotW  = 560
	chartRowH   = 26
	chartTop    = 40
	chartBottom = 40
)

// WriteSVG draws one horizontal box plot per distribution (p1–p99 whiskers,
// p25–p75 box, median line) on a shared logarithmic millisecond axis.
// Empty distributions are listed without a box.
func WriteSVG(w io.Writer, title string, ds []Dist) error {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, d := range ds {
		for _, v := range d.Sample {
			if ms := MsOf(v); ms > 0 {
				lo, hi = math.Min(lo, ms), math.Max(hi, ms)
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	lo10, hi10 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if hi10 <= lo10 {
		hi10 = lo10 + 1
	}
	x := func(d time.Duration) float64 {
		ms := math.Max(MsOf(d), math.Pow(10, lo10))
		return chartLabelW + (math.Log10(ms)-lo10)/(hi10-lo10)*chartPlotW
	}
	height := chartTop + chartRowH*len(ds) + chartBottom
	width := chartLabelW + chartPlotW + 20
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="10" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	axisY := chartTop + chartRowH*len(ds)
	for e := lo10; e <= hi10; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if e == hi10 && m > 1 {
				break
			}
			tx := x(time.Duration(v * float64(time.Millisecond)))
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", tx, chartTop-5, tx, axisY, stroke)
			p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", tx, axisY+15, tickLabel(v))
		}
	}
	p(`<text x="%d" y="%d" text-anchor="middle" fill="#555">latency (ms, log scale) · whiskers p1–p99, box p25–p75, line p50</text>`+"\n",
		chartLabelW+chartPlotW/2, axisY+32)
	for i, d := range ds {
		y := chartTop + chartRowH*i
		mid := float64(y) + chartRowH/2
		label := d.Figure + " · " + d.Variant
		if r := []rune(label); len(r) > 72 {
			label = string(r[:71]) + "…"
		}
		p(`<g class="dist">`)
		p(`<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s (n=%d)</text>`,
			chartLabelW-8, mid, html.EscapeString(label), len(d.Sample))
		if len(d.Sample) > 0 {
			b := BoxOf(d.Sample)
			p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, x(b.P1), mid, x(b.P99), mid)
			p(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" stroke="#333"/>`,
				x(b.P25), y+5, math.Max(1, x(b.P75)-x(b.P25)), chartRowH-10, chartColor(d.Variant))
			p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black" stroke-width="2"/>`, x(b.P50), y+3, x(b.P50), y+chartRowH-3)
		}
		p("</g>\n")
	}
	p("</svg>\n")
	return bw.Flush()
}

func tickLabel(ms float64) string {
	if ms >= 1 {
		return fmt.Sprintf("%g", ms)
	}
	return fmt.Sprintf("%.2g", ms)
}

// chartColor picks a fill by the kind of variant: floor, in-process
// baseline, durable.
func chartColor(variant string) string {
	switch {
	case strings.Contains(variant, "floor"):
		return "#d9d9d9"
	case strings.HasPrefix(variant, "in-process"):
		return "#9ecae1"
	default:
		return "#fdae6b"
	}
}
