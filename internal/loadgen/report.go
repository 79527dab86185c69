package loadgen

import (
	"bytes"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Table is a table for people: Markdown on a terminal, HTML in a report.
type Table struct {
	Title  string     `json:"title"`
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
	Notes  []string   `json:"notes,omitempty"`
}

// WriteMarkdown writes the table as Markdown, columns aligned.
func (t Table) WriteMarkdown(w io.Writer) error {
	width := make([]int, len(t.Header))
	for i, h := range t.Header {
		width[i] = len(h)
	}
	for _, row := range t.Rows {
		for i, c := range row {
			if i < len(width) {
				width[i] = max(width[i], len(c))
			}
		}
	}
	var b strings.Builder
	if t.Title != "" {
		fmt.Fprintf(&b, "%s\n\n", t.Title)
	}
	line := func(cells []string) {
		b.WriteString("|")
		for i := range width {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			fmt.Fprintf(&b, " %-*s |", width[i], c)
		}
		b.WriteString("\n")
	}
	line(t.Header)
	b.WriteString("|")
	for _, n := range width {
		b.WriteString(strings.Repeat("-", n+2) + "|")
	}
	b.WriteString("\n")
	for _, row := range t.Rows {
		line(row)
	}
	for _, n := range t.Notes {
		fmt.Fprintf(&b, "\n%s", n)
	}
	if len(t.Notes) > 0 {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// StepsTable is a result's steps in the seeds' shape: load level,
// requests, transactions/s, latency, errors, and the time to finish for
// fixed work.
func StepsTable(title string, r *Result) Table {
	level := "concurrent"
	if r.Model == Open {
		level = "rate/s"
	}
	t := Table{Title: title, Header: []string{level, "requests", "tx/s", "avg", "p50", "p90", "p99", "max", "errors %"}}
	fixed := r.Executor == "fixed" || r.Executor == "storm"
	if fixed {
		t.Header = append(t.Header, "time to finish")
	}
	open := r.Model == Open
	if open {
		t.Header = append(t.Header, "p99 uncorrected", "dropped", "unsent")
	}
	t.Header = append(t.Header, "errors by kind")
	for _, s := range r.Steps {
		lvl := itoa(s.Concurrency)
		if open {
			lvl = strconv.FormatFloat(s.Rate, 'f', -1, 64)
		}
		row := []string{lvl, strconv.FormatInt(s.Requests, 10), strconv.FormatFloat(s.TPS, 'f', 1, 64),
			FormatMillis(s.Latency.Avg), FormatMillis(s.Latency.P50), FormatMillis(s.Latency.P90),
			FormatMillis(s.Latency.P99), FormatMillis(s.Latency.Max), fmtPct(s.ErrorPct)}
		if fixed {
			ttf := FormatDuration(s.TimeToFinish)
			if s.Incomplete {
				ttf += " (incomplete)"
			}
			row = append(row, ttf)
		}
		if open {
			u := "-"
			if s.Uncorrected != nil {
				u = FormatMillis(s.Uncorrected.P99)
			}
			row = append(row, u, strconv.FormatInt(s.Dropped, 10), strconv.FormatInt(s.Unsent, 10))
		}
		row = append(row, FormatKinds(s.ErrorsByKind))
		t.Rows = append(t.Rows, row)
	}
	return t
}

// PhasesTable is the latency of each phase of each step, for targets
// that time their phases (REST flows); ok is false when there are none.
func PhasesTable(title string, r *Result) (t Table, ok bool) {
	names := r.PhaseNames()
	if len(names) == 0 {
		return Table{}, false
	}
	level := "concurrent"
	if r.Model == Open {
		level = "rate/s"
	}
	t = Table{Title: title, Header: []string{level, "phase", "count", "avg", "p50", "p90", "p99", "max"}}
	for _, s := range r.Steps {
		for _, n := range names {
			l, ok := s.Phases[n]
			if !ok {
				continue
			}
			t.Rows = append(t.Rows, []string{s.Level(), n, strconv.FormatInt(l.Count, 10), FormatMillis(l.Avg),
				FormatMillis(l.P50), FormatMillis(l.P90), FormatMillis(l.P99), FormatMillis(l.Max)})
		}
	}
	return t, true
}

func fmtPct(p float64) string {
	if p == 0 {
		return "0"
	}
	if p < 0.01 {
		return "<0.01"
	}
	return strconv.FormatFloat(p, 'f', 2, 64)
}

// FormatKinds writes errors by kind: "http-503=12 timeout=1".
func FormatKinds(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// Run is a named result in a report.
type Run struct {
	Name   string  `json:"name"`
	Result *Result `json:"result"`
}

// LevelSeries returns the result's transactions/s and average latency (ms)
// against its load level (concurrency, or rate for open models).
func (r *Result) LevelSeries(name string) (tps, avg Series) {
	tps, avg = Series{Name: name}, Series{Name: name}
	for _, s := range r.Steps {
		x := float64(s.Concurrency)
		if r.Model == Open {
			x = s.Rate
		}
		tps.X, tps.Y = append(tps.X, x), append(tps.Y, s.TPS)
		avg.X, avg.Y = append(avg.X, x), append(avg.Y, s.Latency.Avg)
	}
	return tps, avg
}

// LevelFigures plots transactions/s and average latency against the load
// level of each run, as the LHC test's graphs do.
func LevelFigures(runs ...Run) ([]Figure, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	x := "concurrent requests (load level)"
	if runs[0].Result.Model == Open {
		x = "arrival rate (transactions per second)"
	}
	var tps, avg []Series
	for _, r := range runs {
		t, a := r.Result.LevelSeries(r.Name)
		tps, avg = append(tps, t), append(avg, a)
	}
	f1, err := LinePlot("tps", "Transactions per second (higher is better)", x, "transactions per second", tps...)
	if err != nil {
		return nil, err
	}
	f2, err := LinePlot("latency", "Average transaction time (lower is better)", x, "average transaction time (ms)", avg...)
	if err != nil {
		return nil, err
	}
	return []Figure{f1, f2}, nil
}

// Report is everything a run or a bench produced: tables and figures for
// people, results for machines.
type Report struct {
	Title   string            `json:"title"`
	Command string            `json:"command,omitempty"`
	Created time.Time         `json:"created"`
	Host    map[string]string `json:"host"`
	Notes   []string          `json:"notes,omitempty"`
	Tables  []Table           `json:"tables"`
	Figures []Figure          `json:"-"`
	Runs    []Run             `json:"runs"`
	// Headlines are the figures the report offers to a summary, such as
	// the README's Figures table (see Headline).
	Headlines []Headline `json:"headlines,omitempty"`
	// CSV, when set, is what report.csv holds, for experiments whose
	// data are not steps of runs; otherwise it holds a row per step.
	CSV *Table `json:"-"`
}

// Headline is one figure of a report, with what a reader needs to trust
// it: the yardstick measured in the same run, the load generator and its
// ceiling. Every field is display text.
type Headline struct {
	What      string `json:"what"`                // what was measured: "NFuse enumeration, 400 applications, 100 connections"
	Usher     string `json:"usher"`               // usher's figure
	Yardstick string `json:"yardstick,omitempty"` // the yardstick's figure in the same run, or the published one
	Ratio     string `json:"ratio,omitempty"`     // usher over the yardstick, or why there is none ("client-bound")
	Client    string `json:"client,omitempty"`    // the load generator and how it ran
	Ceiling   string `json:"ceiling,omitempty"`   // the client's ceiling in the same run
}

// NewReport starts a report with the host's description. It names the
// TCP congestion control and default queueing discipline too: they
// decide whether the kernel paces each socket itself (bbr without fq),
// which once doubled the kernel's share of an answer, so figures from
// hosts that differ there do not compare.
func NewReport(title, command string) *Report {
	host, _ := os.Hostname()
	return &Report{Title: title, Command: command, Created: time.Now().UTC().Truncate(time.Second),
		Host: map[string]string{"hostname": host, "os": runtime.GOOS + "/" + runtime.GOARCH,
			"cpus": strconv.Itoa(runtime.NumCPU()), "go": runtime.Version(),
			"tcp_congestion_control": procSys("net/ipv4/tcp_congestion_control"), "default_qdisc": procSys("net/core/default_qdisc")}}
}

// procSys reads a kernel setting under /proc/sys, "unknown" when it
// cannot.
func procSys(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// WriteText writes the tables and notes as Markdown.
func (r *Report) WriteText(w io.Writer) error {
	for _, t := range r.Tables {
		if err := t.WriteMarkdown(w); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "%s\n", n)
	}
	return nil
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// CSVHeader is the header row of WriteCSV.
var CSVHeader = []string{"run", "step", "concurrency", "rate", "requests", "ok", "errors", "error_pct", "dropped", "unsent",
	"excluded", "window_s", "tps", "avg_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms", "uncorrected_avg_ms",
	"uncorrected_p99_ms", "time_to_finish_s", "errors_by_kind"}

// WriteCSV writes one row per step of every run, or the CSV table when
// the report has one.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if r.CSV != nil {
		cw.Write(r.CSV.Header)
		cw.WriteAll(r.CSV.Rows)
		return cw.Error()
	}
	cw.Write(CSVHeader)
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, run := range r.Runs {
		for _, s := range run.Result.Steps {
			ua, up := "", ""
			if s.Uncorrected != nil {
				ua, up = f(s.Uncorrected.Avg), f(s.Uncorrected.P99)
			}
			cw.Write([]string{run.Name, itoa(s.Step), itoa(s.Concurrency), f(s.Rate), n(s.Requests), n(s.OK), n(s.Errors),
				f(s.ErrorPct), n(s.Dropped), n(s.Unsent), n(s.Excluded), f(s.Window), f(s.TPS), f(s.Latency.Avg),
				f(s.Latency.P50), f(s.Latency.P90), f(s.Latency.P99), f(s.Latency.Max), ua, up, f(s.TimeToFinish),
				FormatKinds(s.ErrorsByKind)})
		}
	}
	cw.Flush()
	return cw.Error()
}

var htmlReport = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:15px/1.5 system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1rem}th,td{border:1px solid #ccc;padding:.2em .6em;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}caption{text-align:left;font-weight:600;padding:.3em 0}
code,pre{background:#f3f3f3;padding:0 .3em}pre{padding:.5em;overflow-x:auto}img{max-width:100%}
.meta td{text-align:left}.notes{color:#444}
</style></head><body>
<h1>{{.Title}}</h1>
<table class="meta">
{{if .Command}}<tr><td>command</td><td><code>{{.Command}}</code></td></tr>{{end}}
<tr><td>created</td><td>{{.Created.Format "2006-01-02 15:04:05 MST"}}</td></tr>
{{range $k, $v := .Host}}<tr><td>{{$k}}</td><td>{{$v}}</td></tr>{{end}}
</table>
{{range .Tables}}<table><caption>{{.Title}}</caption>
<tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>{{end}}
</table>{{range .Notes}}<p class="notes">{{.}}</p>{{end}}
{{end}}
{{range .Notes}}<p class="notes">{{.}}</p>{{end}}
{{range .Images}}<figure><img alt="{{.Title}}" src="{{.Src}}"><figcaption>{{.Title}}</figcaption></figure>
{{end}}
{{range .Runs}}<h2>{{.Name}}</h2><p><code>{{.Result.Plan}}</code></p>{{end}}
</body></html>
`))

// WriteHTML writes one self-contained page: tables, and figures embedded
// as data URIs; nothing is fetched when it opens.
func (r *Report) WriteHTML(w io.Writer) error {
	type image struct {
		Title string
		Src   template.URL
	}
	data := struct {
		*Report
		Images []image
	}{Report: r}
	for _, f := range r.Figures {
		data.Images = append(data.Images, image{f.Title, template.URL("data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString(f.SVG))})
	}
	return htmlReport.Execute(w, data)
}

// WriteDir writes the report into dir: report.md, report.json,
// report.csv, one SVG per figure and report.html.
func (r *Report) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report directory: %w", err)
	}
	write := func(name string, fn func(io.Writer) error) error {
		var buf bytes.Buffer
		if err := fn(&buf); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		return nil
	}
	for _, f := range r.Figures {
		if err := write(f.Name+".svg", func(w io.Writer) error { _, err := w.Write(f.SVG); return err }); err != nil {
			return err
		}
	}
	for name, fn := range map[string]func(io.Writer) error{
		"report.md": r.WriteText, "report.json": r.WriteJSON, "report.csv": r.WriteCSV, "report.html": r.WriteHTML,
	} {
		if err := write(name, fn); err != nil {
			return err
		}
	}
	return nil
}
