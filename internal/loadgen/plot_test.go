package loadgen

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot"
)

var plotsDir = flag.String("plots", "", "write the test figures as SVG into this directory, to look at")

// svgText is a text element of a figure: where it starts and what it says.
type svgText struct {
	X, Y float64
	S    string
}

// svgCircle is a point's marker.
type svgCircle struct{ X, Y, R float64 }

var (
	textRE   = regexp.MustCompile(`<text x="([-0-9.]+)" y="([-0-9.]+)"[^>]*>([^<]*)</text>`)
	circleRE = regexp.MustCompile(`<path d="M([-0-9.]+),([-0-9.]+)A([0-9.]+),`)
)

// mustPlot checks the figure is an SVG, writes it to -plots and returns
// its texts and markers: mustPlot(t)(LinePlot(...)).
func mustPlot(tb testing.TB) func(Figure, error) ([]svgText, []svgCircle) {
	tb.Helper()
	return func(f Figure, err error) ([]svgText, []svgCircle) {
		tb.Helper()
		return readPlot(tb, f, err)
	}
}

func readPlot(tb testing.TB, f Figure, err error) ([]svgText, []svgCircle) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	if !bytes.Contains(f.SVG, []byte("<svg")) {
		tb.Fatalf("%s is not an SVG: %.100s", f.Name, f.SVG)
	}
	if *plotsDir != "" {
		if err := os.WriteFile(filepath.Join(*plotsDir, f.Name+".svg"), f.SVG, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			tb.Fatal(err)
		}
		return v
	}
	var texts []svgText
	for _, m := range textRE.FindAllStringSubmatch(string(f.SVG), -1) {
		texts = append(texts, svgText{num(m[1]), num(m[2]), m[3]})
	}
	var circles []svgCircle
	for _, m := range circleRE.FindAllStringSubmatch(string(f.SVG), -1) {
		r := num(m[3])
		circles = append(circles, svgCircle{num(m[1]) - r, num(m[2]), r})
	}
	return texts, circles
}

func strs(texts []svgText) []string {
	var s []string
	for _, t := range texts {
		s = append(s, t.S)
	}
	return s
}

func find(texts []svgText, s string) (svgText, bool) {
	i := slices.IndexFunc(texts, func(t svgText) bool { return t.S == s })
	if i < 0 {
		return svgText{}, false
	}
	return texts[i], true
}

var levels = []float64{10, 20, 40, 60, 100}

func TestPlotsReadAlone(t *testing.T) {
	texts, _ := mustPlot(t)(LinePlot("alone", "Transactions per second (higher is better)", "concurrent requests",
		"transactions per second", Series{Name: "usher", X: levels, Y: []float64{100, 400, 900, 1400, 2000}}))
	for _, want := range []string{"Transactions per second (higher is better)", "concurrent requests", "transactions per second",
		"usher", "10", "20", "40", "60", "100"} {
		if _, ok := find(texts, want); !ok {
			t.Errorf("no text %q in %q", want, strs(texts))
		}
	}
}

func TestLogAxisLabels(t *testing.T) {
	t.Run("14 to 800 reads at 1, 2 and 5", func(t *testing.T) {
		texts, _ := mustPlot(t)(LogLinePlot("log-14-800", "Average enumeration time (lower is better)", "concurrent requests",
			"average enumeration time (ms)",
			Series{Name: "usher", X: levels, Y: []float64{14, 20, 45, 90, 160}},
			Series{Name: "nginx", X: levels, Y: []float64{30, 60, 200, 400, 800}}))
		for _, want := range []string{"10", "20", "50", "100", "200", "500", "1000", "average enumeration time (ms) (log scale)"} {
			if _, ok := find(texts, want); !ok {
				t.Errorf("no text %q in %q", want, strs(texts))
			}
		}
	})
	t.Run("six decades label each decade", func(t *testing.T) {
		texts, _ := mustPlot(t)(LogLinePlot("log-wide", "Launches per second (higher is better)", "concurrent requests",
			"launches per second",
			Series{Name: "usher", X: levels, Y: []float64{960, 1000, 1030, 1010, 990}},
			Series{Name: "the zones-and-latency test", X: levels, Y: []float64{0.014, 0.02, 0.023, 0.02, 0.018}}))
		for _, want := range []string{"0.01", "0.1", "1", "10", "100", "1000"} {
			if _, ok := find(texts, want); !ok {
				t.Errorf("no text %q in %q", want, strs(texts))
			}
		}
		if _, ok := find(texts, "500"); ok {
			t.Errorf("500 labelled on a six-decade axis: %q", strs(texts))
		}
	})
	t.Run("under a decade is linear", func(t *testing.T) {
		texts, _ := mustPlot(t)(LogLinePlot("log-narrow", "Launches per second (higher is better)", "concurrent requests",
			"launches per second", Series{Name: "usher", X: levels, Y: []float64{900, 950, 1000, 1020, 980}}))
		if _, ok := find(texts, "launches per second"); !ok {
			t.Errorf("no linear Y label in %q", strs(texts))
		}
		if _, ok := find(texts, "0"); !ok {
			t.Errorf("a linear axis from 0 has no 0 in %q", strs(texts))
		}
	})
	t.Run("nothing above zero", func(t *testing.T) {
		mustPlot(t)(LogLinePlot("log-zeros", "t", "x", "y", Series{Name: "zeros", X: []float64{1, 2}, Y: []float64{0, 0}}))
		mustPlot(t)(LogLinePlot("log-empty", "t", "x", "y"))
	})
}

func TestLegendClearOfTheData(t *testing.T) {
	// The series end at the top right, where a legend in the data area
	// would sit.
	series := []Series{
		{Name: "usher", X: levels, Y: []float64{100, 400, 900, 1400, 2000}},
		{Name: "the LHC test (Citrix)", X: levels, Y: []float64{150, 500, 1000, 1600, 1990}},
	}
	texts, circles := mustPlot(t)(LinePlot("legend", "Transactions per second (higher is better)", "concurrent requests",
		"transactions per second", series...))
	if got, want := len(circles), 2*len(levels)+len(series); got != want {
		t.Fatalf("%d markers, want %d: one per point and one per legend entry", got, want)
	}
	// The legend's markers lie left of its names; a point under the
	// legend would be another marker in its box.
	left, bottom := 1e9, 1e9
	for _, s := range series {
		l, ok := find(texts, s.Name)
		if !ok {
			t.Fatalf("no legend entry %q in %q", s.Name, strs(texts))
		}
		left, bottom = min(left, l.X-30), min(bottom, -l.Y-10) // text y is flipped
	}
	var inLegend int
	var lastX float64
	for _, c := range circles {
		if c.X+c.R >= left && c.Y-c.R >= bottom {
			inLegend++
		} else {
			lastX = max(lastX, c.X)
		}
	}
	if inLegend != len(series) {
		t.Errorf("%d markers in the legend's box (x >= %.1f, y >= %.1f), want its own %d: %v", inLegend, left, bottom, len(series), circles)
	}
	if lastX >= left {
		t.Errorf("the last point at x %.1f reaches the legend at %.1f", lastX, left)
	}
}

func TestOneStepIsVisible(t *testing.T) {
	texts, circles := mustPlot(t)(LinePlot("one-step", "Transactions per second (higher is better)", "concurrent requests",
		"transactions per second", Series{Name: "rest", X: []float64{12}, Y: []float64{1012.4}}))
	big := 0
	for _, c := range circles {
		if c.R >= 4 {
			big++
		}
	}
	if big < 1 {
		t.Errorf("no large marker for the one point: %v", circles)
	}
	for _, want := range []string{"1012", "12"} {
		if _, ok := find(texts, want); !ok {
			t.Errorf("no text %q in %q", want, strs(texts))
		}
	}
}

func TestLogTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string // labelled ticks
	}{
		{10, 1000, "10 20 50 100 200 500 1000"},
		{0.01, 2000, "0.01 0.1 1 10 100 1000"},
		{0.5, 2, "0.5 1 2"},
	} {
		var got []string
		for _, tk := range (LogTicks{}).Ticks(tc.lo, tc.hi) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%v..%v: %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
	for _, tc := range []struct{ v, floor, ceil float64 }{{14, 10, 20}, {800, 500, 1000}, {0.023, 0.02, 0.05}, {100, 100, 100}} {
		if f, c := floor125(tc.v), ceil125(tc.v); f != tc.floor || c != tc.ceil {
			t.Errorf("%v: %v..%v, want %v..%v", tc.v, f, c, tc.floor, tc.ceil)
		}
	}
}

// TestTitleFitsTheFigure: a title wider than the figure (the WAN launch
// bench's) is wrapped into lines that all lie inside the SVG's viewBox;
// it ran off both edges, centred left of the legend.
func TestTitleFitsTheFigure(t *testing.T) {
	const title = "Launches per second over a WAN to the site DB, usher beside the zones-and-latency test (higher is better)"
	f, err := LogLinePlot("long-title", title, "concurrent launches", "launches per second",
		Series{Name: "usher, 10 ms RTT", X: levels, Y: []float64{100, 400, 900, 1400, 2000}},
		Series{Name: "the zones-and-latency test, Citrix, 10 ms RTT", X: levels, Y: []float64{1, 4, 9, 14, 20}})
	texts, _ := readPlot(t, f, err)
	m := regexp.MustCompile(`viewBox="0 0 ([0-9.]+) ([0-9.]+)"`).FindSubmatch(f.SVG)
	if m == nil {
		t.Fatalf("no viewBox in %.200s", f.SVG)
	}
	width, _ := strconv.ParseFloat(string(m[1]), 64)
	style := plot.New().Title.TextStyle
	var lines []string
	for _, tx := range texts {
		if len(tx.S) < 10 || !strings.Contains(title, tx.S) {
			continue
		}
		lines = append(lines, tx.S)
		if w := float64(style.Width(tx.S).Points()); tx.X < 0 || tx.X+w > width {
			t.Errorf("title line %q spans x %.1f to %.1f, outside the viewBox's 0 to %.0f", tx.S, tx.X, tx.X+w, width)
		}
	}
	if got := strings.Join(lines, " "); got != title {
		t.Errorf("the title's lines read %q, want %q", got, title)
	}
	if len(lines) < 2 {
		t.Errorf("a title wider than the figure is on %d line(s)", len(lines))
	}
}
