package blockbench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/usher-vdi/usher/internal/loadgen"
)

// Seed001Row is one row of the PVS RAM-cache paper's Table 1: 95th-percentile IOPS of
// 500 users and the disks they need, disk cache against RAM cache with
// overflow.
type Seed001Row struct {
	Platform   string `json:"platform"`
	Hypervisor string `json:"hypervisor"`
	DiskIOPS   int    `json:"disk_cache_p95_iops"`
	DiskDisks  int    `json:"disk_cache_disks"`
	RAMIOPS    int    `json:"ram_overflow_p95_iops"`
	RAMDisks   int    `json:"ram_overflow_disks"`
	Saving     int    `json:"saving_percent"`
}

// Seed001 is the PVS RAM-cache paper's table (ESG Lab, Citrix PVS 7.1).
var Seed001 = []Seed001Row{
	{"XenDesktop", "Hyper-V", 7455, 41, 133, 3, 93},
	{"XenDesktop", "vSphere", 4968, 28, 73, 3, 89},
	{"XenApp", "Hyper-V", 6788, 38, 1538, 9, 77},
	{"XenApp", "vSphere", 5850, 33, 4268, 24, 27},
}

// Goals for the write-cache experiment.
const (
	GoalReduction  = 0.99 // ram-overflow vs server-disk, budget holds the working set
	GoalCoalescing = 50   // 4 KiB writes received per disk write when it overflows
)

// WriteTable prints the result for people.
func (r *WritecacheResult) WriteTable(out io.Writer) error {
	w := r.Workload
	fmt.Fprintf(out, "usher bench writecache: %d targets, scale 1/%d (in-process layers: image store > server RAM cache > write cache)\n", r.Targets, w.Scale)
	fmt.Fprintf(out, "per target: boot %d reads + %.0f MB writes, then %.0f IOPS (%.0f%% writes) for %v; IOPS in full-scale units over %v windows\n\n",
		w.BootReads, float64(w.BootWriteBytes)/1e6, w.SteadyIOPS, w.SteadyWrites*100, w.SteadyDuration, w.Window)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tRAM budget\tops/target\tdisk ops/target\tdisk reads\tdisk writes\t4K writes/disk write\tfailed writes\tmean IOPS\tsteady IOPS\tp95 IOPS\tpeak IOPS\tdisks for 500\timage reads\tsrv cache hits\twall s\t")
	for _, m := range r.Modes {
		budget := "-"
		if m.Budget > 0 {
			budget = fmt.Sprintf("%d MiB", m.Budget*int64(w.Scale)/mib)
		}
		coal := "-"
		if m.Coalescing > 0 {
			coal = fmt.Sprintf("%.0f", m.Coalescing)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.1f\t%d\t%d\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%.1f%%\t%.1f\t\n",
			m.Mode, budget, m.OpsPerTarget, m.DiskOpsPerTarget, m.DiskReads, m.DiskWrites, coal, m.FailedWrites,
			m.MeanIOPS, m.SteadyIOPS, m.P95IOPS, m.PeakIOPS, m.Disks500, m.ImageReads, 100*m.ServerHitRate, m.Seconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\n(RAM budgets at full scale; disks for 500 = ceil(p95 x 500 / 180); the PVS RAM-cache paper recommends at least 3 for RAID 5.)")

	fmt.Fprintln(out, "\nCitrix's PVS RAM-cache paper, 95th percentile IOPS of 500 users (ESG Lab, PVS 7.1), beside usher's per-target p95 x 500:")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "platform\thypervisor\tdisk cache IOPS\tdisks\tRAM+overflow IOPS\tdisks\tsaving\t")
	for _, s := range r.Seed001 {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d%%\t\n", s.Platform, s.Hypervisor, s.DiskIOPS, s.DiskDisks, s.RAMIOPS, s.RAMDisks, s.Saving)
	}
	sd, ok1 := r.Mode(ModeServerDisk)
	ro, ok2 := r.Mode(ModeRAMOverflow)
	if ok1 && ok2 {
		saving := 0.0
		if sd.Disks500 > 0 {
			saving = 100 * (1 - float64(max(ro.Disks500, 3))/float64(max(sd.Disks500, 3)))
		}
		fmt.Fprintf(tw, "usher (server disk vs RAM+overflow)\t%s\t%.0f\t%d\t%.0f\t%d\t%.0f%%\t\n", "in-process",
			sd.P95IOPS*Users, sd.Disks500, ro.P95IOPS*Users, ro.Disks500, saving)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(out, "\ngoals:")
	if ok1 && ok2 {
		fmt.Fprintf(out, "  RAM+overflow (budget holds the working set) vs server-disk cache: %.2f%% fewer disk IOPS at p95, %.2f%% fewer disk ops (goal >= 99%%): %s\n",
			100*r.Reduction, 100*(1-ro.DiskOpsPerTarget/max(sd.DiskOpsPerTarget, 1e-9)), verdict(r.Reduction >= GoalReduction))
	}
	if small, ok := r.Mode(ModeRAMOverflowSmall); ok {
		fmt.Fprintf(out, "  RAM+overflow that overflows: %d 4 KiB writes received, %d disk writes: %.0fx fewer (goal >= %dx): %s\n",
			small.Writes4K, small.DiskWrites, small.Coalescing, GoalCoalescing, verdict(small.DiskWrites > 0 && small.Coalescing >= GoalCoalescing))
	}
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// WriteJSON writes the result as result.json in dir.
func WriteJSON(dir, file string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, file), append(b, '\n'), 0o644)
}

// Report returns the result as a report directory's contents: the modes
// and the PVS RAM-cache paper's table, the goals, the modes table as CSV and a plot of
// each mode's disk IOPS per target over the run.
func (r *WritecacheResult) Report(command string) (*loadgen.Report, error) {
	w := r.Workload
	rep := loadgen.NewReport("usher bench writecache: disk operations under each write-cache mode", command)
	rep.Notes = append(rep.Notes, fmt.Sprintf("%d targets, scale 1/%d (in-process layers: image store > server RAM cache > write cache); "+
		"per target: boot %d reads + %.0f MB writes, then %.0f IOPS (%.0f%% writes) for %v; IOPS in full-scale units over %v windows.",
		r.Targets, w.Scale, w.BootReads, float64(w.BootWriteBytes)/1e6, w.SteadyIOPS, w.SteadyWrites*100, w.SteadyDuration, w.Window))
	modes := loadgen.Table{Title: "Write-cache modes", Header: []string{"mode", "RAM budget", "ops/target", "disk ops/target", "disk reads",
		"disk writes", "4K writes/disk write", "failed writes", "mean IOPS", "steady IOPS", "p95 IOPS", "peak IOPS", "disks for 500",
		"image reads", "srv cache hits", "wall s"},
		Notes: []string{"RAM budgets at full scale; disks for 500 = ceil(p95 x 500 / 180); the PVS RAM-cache paper recommends at least 3 for RAID 5."}}
	for _, m := range r.Modes {
		budget, coal := "-", "-"
		if m.Budget > 0 {
			budget = fmt.Sprintf("%d MiB", m.Budget*int64(w.Scale)/mib)
		}
		if m.Coalescing > 0 {
			coal = fmt.Sprintf("%.0f", m.Coalescing)
		}
		modes.Rows = append(modes.Rows, []string{m.Mode, budget, fmt.Sprintf("%.0f", m.OpsPerTarget), fmt.Sprintf("%.1f", m.DiskOpsPerTarget),
			fmt.Sprint(m.DiskReads), fmt.Sprint(m.DiskWrites), coal, fmt.Sprint(m.FailedWrites), fmt.Sprintf("%.2f", m.MeanIOPS),
			fmt.Sprintf("%.2f", m.SteadyIOPS), fmt.Sprintf("%.2f", m.P95IOPS), fmt.Sprintf("%.2f", m.PeakIOPS), fmt.Sprint(m.Disks500),
			fmt.Sprint(m.ImageReads), fmt.Sprintf("%.1f%%", 100*m.ServerHitRate), fmt.Sprintf("%.1f", m.Seconds)})
	}
	seed := loadgen.Table{Title: "Citrix's PVS RAM-cache paper, 95th percentile IOPS of 500 users (ESG Lab, PVS 7.1), beside usher's per-target p95 x 500",
		Header: []string{"platform", "hypervisor", "disk cache IOPS", "disks", "RAM+overflow IOPS", "disks", "saving"}}
	for _, s := range r.Seed001 {
		seed.Rows = append(seed.Rows, []string{s.Platform, s.Hypervisor, fmt.Sprint(s.DiskIOPS), fmt.Sprint(s.DiskDisks),
			fmt.Sprint(s.RAMIOPS), fmt.Sprint(s.RAMDisks), fmt.Sprintf("%d%%", s.Saving)})
	}
	sd, ok1 := r.Mode(ModeServerDisk)
	ro, ok2 := r.Mode(ModeRAMOverflow)
	if ok1 && ok2 {
		saving := 0.0
		if sd.Disks500 > 0 {
			saving = 100 * (1 - float64(max(ro.Disks500, 3))/float64(max(sd.Disks500, 3)))
		}
		seed.Rows = append(seed.Rows, []string{"usher (server disk vs RAM+overflow)", "in-process", fmt.Sprintf("%.0f", sd.P95IOPS*Users),
			fmt.Sprint(sd.Disks500), fmt.Sprintf("%.0f", ro.P95IOPS*Users), fmt.Sprint(ro.Disks500), fmt.Sprintf("%.0f%%", saving)})
		rep.Notes = append(rep.Notes, fmt.Sprintf("Goal: RAM+overflow (budget holds the working set) vs server-disk cache: %.2f%% fewer disk IOPS at p95 (goal >= 99%%): %s.",
			100*r.Reduction, verdict(r.Reduction >= GoalReduction)))
	}
	if small, ok := r.Mode(ModeRAMOverflowSmall); ok {
		rep.Notes = append(rep.Notes, fmt.Sprintf("Goal: RAM+overflow that overflows: %d 4 KiB writes received, %d disk writes: %.0fx fewer (goal >= %dx): %s.",
			small.Writes4K, small.DiskWrites, small.Coalescing, GoalCoalescing, verdict(small.DiskWrites > 0 && small.Coalescing >= GoalCoalescing)))
	}
	rep.Tables = []loadgen.Table{modes, seed}
	rep.CSV = &modes

	var series []loadgen.Series
	for _, m := range r.Modes {
		s := loadgen.Series{Name: m.Mode}
		for k, v := range m.WindowIOPS {
			s.X, s.Y = append(s.X, (time.Duration(k)*w.Window).Minutes()), append(s.Y, v)
		}
		series = append(series, s)
	}
	f, err := loadgen.LinePlot("disk-iops", "Disk IOPS per target under each write-cache mode (lower is better)",
		fmt.Sprintf("minutes into the run at full scale (boot, then steady state; %v windows)", w.Window),
		"disk IOPS per target (full-scale units)", series...)
	if err != nil {
		return nil, err
	}
	rep.Figures = []loadgen.Figure{f}
	return rep, nil
}

// Report returns the comparison as a report directory's contents: the
// table of medians, every fio run as CSV, and, when nbdkit ran, usher's
// IOPS over nbdkit's round by round.
func (r *NBDResult) Report(command string) (*loadgen.Report, error) {
	rep := loadgen.NewReport("usher bench nbd: usher's NBD server beside nbdkit under fio", command)
	rep.Notes = append(rep.Notes, fmt.Sprintf("fio nbd engine (%s), %s, %s per run, %d interleaved rounds (usher, nbdkit, nbdkit null, ...), medians. CPUs: %s.",
		r.Client, r.Environment, r.Runtime, r.Rounds, r.CPUs), ceilingNote)
	if r.NbdkitNote != "" {
		rep.Notes = append(rep.Notes, r.NbdkitNote)
	}
	medians := r.medians()
	rep.Headlines = r.headlines()
	runs := loadgen.Table{Title: "Every fio run", Header: []string{"test", "server", "round", "iops", "mib_per_second", "fio_cores", "server_us_cpu_per_io"}}
	var ratios []loadgen.Series
	for _, t := range r.Tests {
		usher, nbdkit := map[int]float64{}, map[int]float64{}
		for _, run := range t.Runs {
			runs.Rows = append(runs.Rows, []string{t.Test, run.Server, fmt.Sprint(run.Round), fmt.Sprintf("%.0f", run.IOPS), fmt.Sprintf("%.1f", run.BW/float64(mib)),
				fmt.Sprintf("%.2f", run.ClientCores), fmt.Sprintf("%.2f", run.CPUPerIO*1e6)})
			switch run.Server {
			case "usher":
				usher[run.Round] = run.IOPS
			case "nbdkit":
				nbdkit[run.Round] = run.IOPS
			}
		}
		s := loadgen.Series{Name: t.Test}
		for round := 1; round <= r.Rounds; round++ {
			if u, k := usher[round], nbdkit[round]; u > 0 && k > 0 {
				s.X, s.Y = append(s.X, float64(round)), append(s.Y, u/k)
			}
		}
		if len(s.X) > 0 {
			ratios = append(ratios, s)
		}
	}
	rep.Tables = []loadgen.Table{medians, runs}
	rep.CSV = &runs
	if len(ratios) > 0 {
		f, err := loadgen.LinePlot("usher-over-nbdkit", "usher's IOPS over nbdkit's, round by round (1 is parity)", "round (usher, then nbdkit)",
			"usher IOPS / nbdkit IOPS (ratio)", ratios...)
		if err != nil {
			return nil, err
		}
		rep.Figures = []loadgen.Figure{f}
	}
	return rep, nil
}
