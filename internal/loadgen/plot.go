package loadgen

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Series is one line of a plot.
type Series struct {
	Name string
	X, Y []float64
}

// Figure is a plot, as SVG.
type Figure struct {
	Name  string // file name without extension
	Title string
	SVG   []byte
}

// Size of every figure.
const (
	figureWidth  = 7 * vg.Inch
	figureHeight = 4 * vg.Inch
	legendGap    = 12 // points between the data area and the legend
	titleMargin  = 6  // points at least between the title and each side

	maxLevelTicks = 12 // X values labelled one by one up to this many
	maxMarkers    = 40 // points marked one by one up to this many
)

var palette = []color.RGBA{{0xd6, 0x27, 0x28, 255}, {0x1f, 0x77, 0xb4, 255}, {0x2c, 0xa0, 0x2c, 255},
	{0xff, 0x7f, 0x0e, 255}, {0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255}}

// LinePlot draws series as lines with points, against a shared X axis.
// The legend sits to the right of the data area, never over it; a series
// of one point is drawn as a large marker labelled with its value. Labels
// should name their units: "average latency (ms)".
func LinePlot(name, title, xLabel, yLabel string, series ...Series) (Figure, error) {
	return linePlot(name, title, xLabel, yLabel, false, series)
}

// LogLinePlot is LinePlot with a logarithmic Y axis, for series that
// differ by orders of magnitude (usher beside the LHC test), ticked at 1, 2
// and 5 of each decade (every decade when the range spans more than
// four) and marked "log scale" on its label. Data spanning less than a
// decade is drawn on a linear axis instead, where it reads better.
// Points at or below zero are left out.
func LogLinePlot(name, title, xLabel, yLabel string, series ...Series) (Figure, error) {
	return linePlot(name, title, xLabel, yLabel, true, series)
}

func linePlot(name, title, xLabel, yLabel string, logY bool, series []Series) (Figure, error) {
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1) // of the positive Ys
	for _, s := range series {
		for i, x := range s.X {
			if i >= len(s.Y) {
				break
			}
			xmin, xmax = min(xmin, x), max(xmax, x)
			if y := s.Y[i]; y > 0 {
				ymin, ymax = min(ymin, y), max(ymax, y)
			}
		}
	}
	// A log axis needs a point above zero, and earns its place only
	// across a decade or more.
	logY = logY && ymax > 0 && ymax/ymin >= 10

	p := plot.New()
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = xLabel
	if logY {
		yLabel += " (log scale)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = LogTicks{}
		p.Y.Min, p.Y.Max = floor125(ymin), ceil125(ymax)
	} else {
		p.Y.Min = 0
	}
	if levels := distinct(series); len(levels) <= maxLevelTicks {
		// Few load levels: mark each, as the table's rows are.
		p.X.Tick.Marker = levelTicks(levels)
	}
	if xmin == xmax && xmin > 0 {
		// One load level: centre it rather than spread a unit around it.
		p.X.Min, p.X.Max = 0, 2*xmin
	}
	p.Add(plotter.NewGrid())

	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	for k, s := range series {
		xys := make(plotter.XYs, 0, len(s.X))
		for i := range s.X {
			if i < len(s.Y) && (!logY || s.Y[i] > 0) {
				xys = append(xys, plotter.XY{X: s.X[i], Y: s.Y[i]})
			}
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return Figure{}, fmt.Errorf("plot %s: %w", name, err)
		}
		c := palette[k%len(palette)]
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(2.5)
		if len(xys) > maxMarkers {
			// A long series (windows of a run) reads as a line; markers
			// would smear it.
			points.Radius = vg.Points(0.5)
		}
		p.Add(line, points)
		if len(xys) == 1 {
			// A line of one point is invisible: a large marker with its value.
			points.Radius = vg.Points(5)
			labels, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: []string{formatPoint(xys[0].Y)}})
			if err != nil {
				return Figure{}, fmt.Errorf("plot %s: %w", name, err)
			}
			labels.Offset = vg.Point{X: vg.Points(8), Y: vg.Points(-4)}
			for i := range labels.TextStyle {
				labels.TextStyle[i].Color = c
			}
			p.Add(labels)
		}
		legend.Add(s.Name, line, points)
	}

	cv := vgsvg.New(figureWidth, figureHeight)
	dc := draw.New(cv)
	legendWidth := legend.Rectangle(dc).Size().X
	if legendWidth > 0 {
		legendWidth += legendGap
	}
	// The Y label is drawn here rather than by the axis, which pads a log
	// axis for the label as if it sat at the linear midpoint of the range,
	// leaving a gap above the data.
	ylabel := p.Y.Label.TextStyle
	ylabel.Rotation, ylabel.XAlign, ylabel.YAlign = math.Pi/2, draw.XCenter, draw.YCenter
	labelWidth := ylabel.Height(yLabel) + p.Y.Label.Padding
	p.Y.Label.Text = ""
	// The title is drawn here too, centred on the whole figure and
	// wrapped to its width: the plot centres it on its own canvas, left
	// of the legend, where a long title ran off both edges of the SVG.
	ts := p.Title.TextStyle
	ts.XAlign, ts.YAlign = draw.XCenter, draw.YTop
	wrapped := balancedWrap(ts, title, figureWidth-2*titleMargin)
	top := vg.Length(0)
	if wrapped != "" {
		top = ts.Height(wrapped) + p.Title.Padding
		dc.FillText(ts, vg.Point{X: dc.Center().X, Y: dc.Max.Y - p.Title.Padding/2}, wrapped)
	}
	pc := draw.Crop(dc, labelWidth, -legendWidth, 0, -top)
	p.Draw(pc)
	da := p.DataCanvas(pc)
	dc.FillText(ylabel, vg.Point{X: dc.Min.X + labelWidth/2, Y: da.Center().Y}, yLabel)
	if legendWidth > 0 {
		legend.Draw(draw.Crop(dc, figureWidth-legendWidth+legendGap, 0, 0, -top))
	}
	var buf bytes.Buffer
	if _, err := cv.WriteTo(&buf); err != nil {
		return Figure{}, fmt.Errorf("plot %s: %w", name, err)
	}
	return Figure{Name: name, Title: title, SVG: buf.Bytes()}, nil
}

// balancedWrap wraps s to width in as few lines as wrapText does, with
// lines as even as they go (no last word alone on its line).
func balancedWrap(style text.Style, s string, width vg.Length) string {
	best := wrapText(style, s, width)
	n := strings.Count(best, "\n")
	if n == 0 {
		return best
	}
	lo, hi := width/vg.Length(n+1), width
	for range 20 {
		mid := (lo + hi) / 2
		if w := wrapText(style, s, mid); strings.Count(w, "\n") == n {
			best, hi = w, mid
		} else {
			lo = mid
		}
	}
	return best
}

// wrapText breaks s at spaces into lines of at most width in style (a
// word longer than width alone on its line), joined with newlines.
func wrapText(style text.Style, s string, width vg.Length) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case style.Width(line+" "+w) <= width:
			line += " " + w
		default:
			lines, line = append(lines, line), w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// LogTicks marks a log axis at 1, 2 and 5 of each decade, labelled, when
// the range spans at most four decades, and otherwise labels each decade
// and marks 2 and 5 as minor ticks, so that any range reads.
type LogTicks struct{}

// Ticks implements plot.Ticker.
func (LogTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	everyStep := math.Log10(hi/lo) <= 4
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		decade := math.Pow(10, e)
		for _, m := range []float64{1, 2, 5} {
			v := m * decade
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || everyStep {
				t.Label = FormatValue(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// floor125 and ceil125 round to the 1-2-5 values around v, so that a
// log axis starts and ends on a labelled tick.
func floor125(v float64) float64 {
	d := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{5, 2, 1} {
		if m*d <= v*(1+1e-9) {
			return m * d
		}
	}
	return d
}

func ceil125(v float64) float64 {
	d := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*d >= v*(1-1e-9) {
			return m * d
		}
	}
	return 10 * d
}

// FormatValue writes a plotted value with three significant digits at
// most and no exponent: "0.005", "14.2", "1200", "35000".
func FormatValue(v float64) string {
	if v == 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// formatPoint writes a point's value for its label, to a tenth below 100
// and to the unit above: "0.42", "14.2", "1012".
func formatPoint(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return FormatValue(v)
}

// distinct returns the X values of every series, sorted, once each.
func distinct(series []Series) []float64 {
	var xs []float64
	for _, s := range series {
		xs = append(xs, s.X...)
	}
	slices.Sort(xs)
	return slices.Compact(xs)
}

// levelTicks labels the X axis at the load levels measured, leaving out
// those too close to the previous label to read (under 4% of the range).
type levelTicks []float64

// Ticks implements plot.Ticker.
func (l levelTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	last := math.Inf(-1)
	for _, x := range l {
		t := plot.Tick{Value: x}
		if x-last >= 0.04*(hi-lo) {
			t.Label, last = FormatValue(x), x
		}
		ticks = append(ticks, t)
	}
	return ticks
}
