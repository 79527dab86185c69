package blockbench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
)

// Seed001Row is one row of seed 001's Table 1: 95th-percentile IOPS of
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

// Seed001 is seed 001's table (ESG Lab, Citrix PVS 7.1).
var Seed001 = []Seed001Row{
	{"XenDesktop", "Hyper-V", 7455, 41, 133, 3, 93},
	{"XenDesktop", "vSphere", 4968, 28, 73, 3, 89},
	{"XenApp", "Hyper-V", 6788, 38, 1538, 9, 77},
	{"XenApp", "vSphere", 5850, 33, 4268, 24, 27},
}

// Goals of issue 6 for the write-cache experiment.
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
	fmt.Fprintln(out, "\n(RAM budgets at full scale; disks for 500 = ceil(p95 x 500 / 180); seed 001 recommends at least 3 for RAID 5.)")

	fmt.Fprintln(out, "\nseed 001, 95th percentile IOPS of 500 users (ESG Lab, PVS 7.1), beside usher's per-target p95 x 500:")
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

	fmt.Fprintln(out, "\ngoals (issue 6):")
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
