package blockbench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/loadgen"
)

// num formats a count with thousands separators.
func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// iops formats a rate: whole numbers from 100 on (and 0), one decimal
// below.
func iops(v float64) string {
	if v >= 100 || v == 0 {
		return num(v)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// plain is a table's copy with the thousands separators of its numbers
// taken out, for CSV.
func plain(t loadgen.Table) loadgen.Table {
	out := t
	out.Rows = nil
	for _, r := range t.Rows {
		row := make([]string, len(r))
		for i, c := range r {
			if d := strings.ReplaceAll(c, ",", ""); d != c {
				if _, err := strconv.ParseFloat(d, 64); err == nil {
					c = d
				}
			}
			row[i] = c
		}
		out.Rows = append(out.Rows, row)
	}
	return out
}

// pct formats a reduction as a percentage.
func pct(r float64) string { return strconv.FormatFloat(100*r, 'f', 3, 64) + "%" }

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s" }

// centralTable sets out each pass's central storage I/O.
func (r *HostcacheResult) centralTable() loadgen.Table {
	t := loadgen.Table{
		Title: fmt.Sprintf("Central storage (usher stream, --ram-cache 0): %d hosts × %d VMs, each pass a storm of boots then %s of steady state", r.Hosts, r.VMs, r.Steady),
		Header: []string{"pass", "seconds", "central reads", "central writes", "max read IOPS", "max write IOPS", "max total IOPS",
			"mean read IOPS", "mean write IOPS", "mean total IOPS", "boot: max IOPS", "steady: max IOPS", "steady: mean IOPS",
			"I/Os vs baseline", "max IOPS vs baseline", "VM errors", "wrong reads"},
		Notes: []string{"Central I/O: every read and write the stream served (its writecache_disk meter, which every connection passes); " +
			"max IOPS: the most in one second; vs baseline: how many fewer, as a share of the baseline's."},
	}
	base, hasBase := r.Pass("baseline")
	mean := func(n int64, s float64) string {
		if s <= 0 {
			return "-"
		}
		return iops(float64(n) / s)
	}
	for _, p := range r.Passes {
		vsTot, vsMax := "-", "-"
		if hasBase && p.Name != "baseline" {
			vsTot = pct(reduction(float64(p.Total.Total()), float64(base.Total.Total()))) + " fewer"
			vsMax = pct(reduction(p.Total.MaxTotal, base.Total.MaxTotal)) + " fewer"
		}
		t.Rows = append(t.Rows, []string{p.Name, fmt.Sprintf("%.1f", p.Total.Seconds), num(float64(p.Total.Reads)), num(float64(p.Total.Writes)),
			iops(p.Total.MaxReads), iops(p.Total.MaxWrites), iops(p.Total.MaxTotal),
			mean(p.Total.Reads, p.Total.Seconds), mean(p.Total.Writes, p.Total.Seconds), iops(p.Total.Mean()),
			iops(p.Boot.MaxTotal), iops(p.Steady.MaxTotal), iops(p.Steady.Mean()), vsTot, vsMax,
			num(float64(p.VMs.Boot.Errors + p.VMs.Steady.Errors)), num(float64(p.VMs.Boot.Mismatches + p.VMs.Steady.Mismatches))})
	}
	return t
}

// passesTable describes each pass and what the VMs saw.
func (r *HostcacheResult) passesTable() loadgen.Table {
	t := loadgen.Table{Title: "The passes, as the VMs saw them",
		Header: []string{"pass", "setup", "VM reads", "VM writes", "image reads (store files)", "VM boot mean / max", "boot read p99",
			"steady read p99", "steady start late p99", "client CPU (boot)", "servers' CPU (boot)"},
		Notes: []string{"Boot: from the storm's start to each VM's last boot operation. CPU in cores (1: one core kept busy), during the storm: the load generator's, " +
			"and the servers' together (the stream, and the host caches or the nbdkits)."}}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
	for _, p := range r.Passes {
		t.Rows = append(t.Rows, []string{p.Name, p.Setup, num(float64(p.VMs.Boot.Reads + p.VMs.Steady.Reads)), num(float64(p.VMs.Boot.Writes + p.VMs.Steady.Writes)),
			num(float64(p.Total.ImageReads)), secs(p.VMs.BootMean) + " / " + secs(p.VMs.BootMax), ms(p.VMs.Boot.ReadP99), ms(p.VMs.Steady.ReadP99),
			ms(p.VMs.Steady.LateP99), fmt.Sprintf("%.2f", p.ClientCores), fmt.Sprintf("%.2f", p.ServerCores)})
	}
	return t
}

// seedTable sets seed 003's rows beside this run's.
func (r *HostcacheResult) seedTable() loadgen.Table {
	t := loadgen.Table{Title: "Seed 003 (XenServer 6.1 IntelliCache, published) beside this run: central storage, maximum total IOPS in a second",
		Header: []string{"setup", "baseline (read, write)", "cold", "warm", "persist", "persist vs baseline", "stated"},
		Notes: []string{"Seed 003 measured during a Login VSI medium workload on VMs booted an hour before; this run's passes include the boot storm, " +
			"so its baselines' peaks are the storms'. nbdkit's cache filter keeps its cache in a temporary file that goes with the process: it has no persist pass."}}
	for _, s := range Seed003 {
		t.Rows = append(t.Rows, []string{s.Setup + " (published)", fmt.Sprintf("%s (%s, %s)", num(s.Baseline), num(s.BaselineReads), num(s.BaselineWrites)),
			iops(s.Cold), iops(s.Warm), iops(s.Persist), pct(reduction(s.Persist, s.Baseline)) + " fewer", s.Stated})
	}
	base, ok := r.Pass("baseline")
	if !ok {
		return t
	}
	cell := func(name string) string {
		if p, ok := r.Pass(name); ok {
			return iops(p.Total.MaxTotal)
		}
		return "-"
	}
	baseCell := fmt.Sprintf("%s (%s, %s)", iops(base.Total.MaxTotal), iops(base.Total.MaxReads), iops(base.Total.MaxWrites))
	row := []string{fmt.Sprintf("usher hostcache, this run: %d hosts, %d VMs", r.Hosts, r.Hosts*r.VMs), baseCell, cell("cold"), cell("warm"), cell("persist"), "-", "-"}
	if p, ok := r.Pass("persist"); ok {
		row[5] = pct(reduction(p.Total.MaxTotal, base.Total.MaxTotal)) + " fewer"
		row[6] = fmt.Sprintf("%s → %s I/Os over the pass (%s fewer)", num(float64(base.Total.Total())), num(float64(p.Total.Total())),
			pct(reduction(float64(p.Total.Total()), float64(base.Total.Total()))))
	}
	t.Rows = append(t.Rows, row)
	if _, ok := r.Pass("nbdkit-cold"); ok {
		t.Rows = append(t.Rows, []string{fmt.Sprintf("nbdkit cache filter, this run: %d hosts, %d VMs", r.Hosts, r.Hosts*r.VMs), baseCell,
			cell("nbdkit-cold"), cell("nbdkit-warm"), "no persist", "-", "-"})
	}
	return t
}

// stormTable sets out the boot storms: per host through usher's caches,
// and for every pass, the central reads per distinct block read.
func (r *HostcacheResult) stormTable() loadgen.Table {
	t := loadgen.Table{Title: "The boot storm: reads of the stream per distinct 64 KiB block the VMs read from their image at boot",
		Header: []string{"pass", "host", "VMs", "distinct blocks read at boot", "reads of the stream at boot", "per distinct block", "goal"},
		Notes: []string{"Per host: the host cache's upstream reads (its hostcache_upstream meter, one per block fetched). " +
			"All hosts: the stream's reads at boot over the hosts' distinct blocks summed (a host fetches a block other hosts fetched too)."}}
	for _, p := range r.Passes {
		for _, h := range p.Upstream {
			goal := "-"
			if p.Name == "cold" {
				goal = fmt.Sprintf("≤ %.2f", GoalStormRatio)
			}
			t.Rows = append(t.Rows, []string{p.Name, strconv.Itoa(h.Host), strconv.Itoa(r.VMs), num(float64(h.BootBlocks)), num(float64(h.BootReads)),
				fmt.Sprintf("%.3f", h.Ratio()), goal})
		}
		if n := p.BootBlocks(); n > 0 {
			t.Rows = append(t.Rows, []string{p.Name, "all", strconv.Itoa(r.Hosts * r.VMs), num(float64(n)), num(float64(p.Boot.Reads)),
				fmt.Sprintf("%.3f", float64(p.Boot.Reads)/float64(n)), "-"})
		}
	}
	return t
}

// readsTable is the 4 KiB comparison's medians.
func (r *HostcacheResult) readsTable() (loadgen.Table, bool) {
	if r.Reads == nil {
		return loadgen.Table{}, false
	}
	t := (&NBDResult{Tests: []NBDTest{*r.Reads}}).medians()
	t.Title = "4 KiB random reads over the boot set from a warm host cache: usher hostcache (warm/IMAGE export of host 0) vs nbdkit's cache filter (host 0's), fio nbd engine, medians"
	t.Notes = []string{ceilingNote}
	return t, true
}

// figuresTable is the verdict of each figure.
func (r *HostcacheResult) figuresTable() loadgen.Table {
	t := loadgen.Table{Title: "Figures it must reach (issue 16)", Header: []string{"figure", "goal", "measured", "verdict"}}
	for _, f := range r.Figures {
		t.Rows = append(t.Rows, []string{f.Name, f.Goal, f.Measured, f.Status})
	}
	return t
}

// notes describe the run for the report.
func (r *HostcacheResult) notes() []string {
	w := r.Workload
	l := HostcacheWorkload(r.Scale, 0).layout()
	n := []string{
		fmt.Sprintf("Each VM replays the write-cache bench's documented desktop workload (internal/blockbench: from block-streaming.md and the PVS RAM-cache paper) at scale 1/%d: "+
			"a boot of %d reads (90%% 4 KiB, 6%% 8 KiB, 2%% 16 KiB, 2%% 64 KiB, random over a %.1f MiB boot set every VM shares) with %.1f MB of writes in a %.1f MiB hot region, "+
			"as fast as %d requests in flight per VM are answered, every VM of every host at once; then %s of steady state at %.0f IOPS per VM, %.0f%% writes "+
			"(80%% rewrites of the hot region, 20%% fresh data), reads half of the VM's own written blocks and half of the boot set, on schedule (an open model). "+
			"Image %.1f MiB, its content a pattern every VM checks each read against, byte for byte (or against its own earlier write).",
			r.Scale, w.BootReads/r.Scale, float64(l.bootSet)/float64(mib), float64(w.BootWriteBytes)/float64(r.Scale)/1e6, float64(l.hot)/float64(mib), r.BootDepth, r.Steady,
			w.SteadyIOPS, 100*w.SteadyWrites, float64(r.ImageSize)/float64(mib)),
		"Central storage is one usher stream with its RAM cache off, so every read it serves comes from its disk (here the page cache of the store's files), " +
			"and a server-side write cache for each connection that writes (the baseline's VMs). Its /metrics are read every second.",
		fmt.Sprintf("Hosts: usher hostcache, one per host (--size %d MiB, --block-size 64KiB, writes to local overlays discarded at each boot), serving its VMs over loopback TCP. "+
			"persist is seed 003's third stage, \"Write Cache Persist\": a third Login VSI run on the read cache populated by the cold and warm runs; here the daemons are also "+
			"stopped and started again on their cache directories first, so the cache must come back from disk (the restart read %d blocks of the image store: each daemon reads the version's table of digests, which the stream keeps in memory, and keys its blocks by them).",
			r.CacheSize/mib, r.RestartReads),
		fmt.Sprintf("Yardstick: nbdkit, per host its cache filter (cache-on-read=true, cache-min-block-size=64K, -t %d: usher's NBD server's requests in progress per connection) "+
			"with its nbd plugin in front of the stream, and per VM its cow filter in front of that cache (nbdkit's cow overlay is shared by every connection of a process, so one process per VM keeps each VM's writes its own). "+
			"A VM's I/O thus crosses two nbdkit processes where it crosses one usher hostcache: the passes compare what reaches central storage, not boot times.", nbdkitThreads),
		fmt.Sprintf("The load generator (%s) runs every VM; CPUs: %s.", r.Client, r.CPUs),
	}
	return append(n, r.Notes...)
}

// Report returns the run as a report directory's contents.
func (r *HostcacheResult) Report(command string) (*loadgen.Report, error) {
	rep := loadgen.NewReport("usher bench hostcache: central storage I/O with and without host caches (seed 003, IntelliCache)", command)
	rep.Notes = r.notes()
	central := r.centralTable()
	rep.Tables = []loadgen.Table{r.figuresTable(), central, r.seedTable(), r.stormTable(), r.passesTable()}
	if t, ok := r.readsTable(); ok {
		rep.Tables = append(rep.Tables, t)
	}
	csv := plain(central)
	rep.CSV = &csv
	rep.Headlines = r.headlines()
	var series []loadgen.Series
	for _, p := range r.Passes {
		s := loadgen.Series{Name: p.Name}
		for _, sec := range p.Total.PerSecond {
			s.X, s.Y = append(s.X, sec.At), append(s.Y, sec.Reads+sec.Writes)
		}
		if len(s.X) > 0 {
			series = append(series, s)
		}
	}
	if len(series) > 0 {
		f, err := loadgen.LinePlot("central-iops", "Central storage IOPS, reads and writes, in each pass (lower is better)",
			"seconds into the pass (the boot storm, then the steady state)", "central IOPS (reads + writes)", series...)
		if err != nil {
			return nil, err
		}
		rep.Figures = []loadgen.Figure{f}
	}
	return rep, nil
}

// headlines offers the run's figures to a summary.
func (r *HostcacheResult) headlines() []loadgen.Headline {
	var hs []loadgen.Headline
	base, okB := r.Pass("baseline")
	if p, ok := r.Pass("persist"); ok && okB {
		s := Seed003[0]
		hs = append(hs, loadgen.Headline{
			What: fmt.Sprintf("Central storage IOPS with host caches (persist: restarted daemons, populated caches) vs none, %d hosts × %d VMs, boot storm and steady state", r.Hosts, r.VMs),
			Usher: fmt.Sprintf("%s → %s max IOPS (%s fewer); %s → %s I/Os (%s fewer)", iops(base.Total.MaxTotal), iops(p.Total.MaxTotal),
				pct(reduction(p.Total.MaxTotal, base.Total.MaxTotal)), num(float64(base.Total.Total())), num(float64(p.Total.Total())),
				pct(reduction(float64(p.Total.Total()), float64(base.Total.Total())))),
			Yardstick: fmt.Sprintf("XenServer IntelliCache, %s: %s → %s max IOPS (%s fewer) (published)", s.Setup, num(s.Baseline), iops(s.Persist), pct(reduction(s.Persist, s.Baseline))),
			Client:    r.Client,
		})
	}
	if p, ok := r.Pass("cold"); ok && len(p.Upstream) > 0 {
		worst := 0.0
		for _, h := range p.Upstream {
			worst = max(worst, h.Ratio())
		}
		h := loadgen.Headline{What: fmt.Sprintf("Cold boot storm, %d VMs per host at once: reads of the stream per distinct block read", r.VMs),
			Usher: fmt.Sprintf("%.3f (worst host)", worst), Client: r.Client}
		if k, ok := r.Pass("nbdkit-cold"); ok && k.BootBlocks() > 0 {
			h.Yardstick = fmt.Sprintf("nbdkit cache filter, same run: %.3f (all hosts)", float64(k.Boot.Reads)/float64(k.BootBlocks()))
		}
		hs = append(hs, h)
	}
	if t := r.Reads; t != nil {
		h := loadgen.Headline{What: "4 KiB random reads from a warm host cache (fio, 1 connection)",
			Usher:     fmt.Sprintf("%.0f IOPS, %.1f µs CPU/IO", t.UsherIOPS, t.UsherCPUPerIO*1e6),
			Yardstick: fmt.Sprintf("nbdkit cache filter %.0f IOPS, %.1f µs CPU/IO", t.NbdkitIOPS, t.NbdkitCPUPerIO*1e6),
			Ratio:     t.Verdict, Client: r.FioClient, Ceiling: fmt.Sprintf("%.0f IOPS (nbdkit null)", t.CeilingIOPS)}
		if !benchkit.Ratio(t.Verdict) && t.UsherCPUPerIO > 0 && t.NbdkitCPUPerIO > 0 {
			h.Ratio = fmt.Sprintf("%s; CPU/IO usher / nbdkit %.2f", t.Verdict, t.UsherCPUPerIO/t.NbdkitCPUPerIO)
		}
		hs = append(hs, h)
	}
	return hs
}

// WriteVerdicts prints a line per figure.
func (r *HostcacheResult) WriteVerdicts(out io.Writer) {
	for _, f := range r.Figures {
		if f.Measured == "" {
			fmt.Fprintf(out, "figure: %s (goal %s): %s\n", f.Name, f.Goal, strings.ToUpper(f.Status))
			continue
		}
		fmt.Fprintf(out, "figure: %s: %s (goal %s): %s\n", f.Name, f.Measured, f.Goal, strings.ToUpper(f.Status))
	}
}

// Missed lists the figures measured and missed.
func (r *HostcacheResult) Missed() []string {
	var out []string
	for _, f := range r.Figures {
		if f.Missed() {
			out = append(out, f.Name)
		}
	}
	return out
}
