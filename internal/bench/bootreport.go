package bench

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/usher-vdi/usher/internal/loadgen"
	"github.com/usher-vdi/usher/internal/vmrun"
)

// Verdicts of a boot figure.
const (
	VerdictMet         = "met"
	VerdictNotMet      = "NOT met"
	VerdictNotMeasured = "not measured"
)

// BootFigure is one of the figures, computed from the counts of
// a run and judged against its goal.
type BootFigure struct {
	What     string `json:"what"`
	Mode     string `json:"mode"`
	Measured string `json:"measured"`
	Goal     string `json:"goal"`
	Verdict  string `json:"verdict"`
	// Yardstick is what the figure is set against, measured in the same
	// run or published; Ratio the measurement over it, if any.
	Yardstick string `json:"yardstick,omitempty"`
	Ratio     string `json:"ratio,omitempty"`
}

func verdictOf(ok bool) string {
	if ok {
		return VerdictMet
	}
	return VerdictNotMet
}

// figures computes the figures from the run's counts.
func (r *BootResult) figures() []BootFigure {
	var out []BootFigure
	// The yardstick of boot time: the mean of the local passes' medians.
	var localBoot float64
	var locals []string
	for _, m := range r.Modes {
		if m.Mode == BootLocal {
			med, _ := m.BootSeconds()
			localBoot += med
			locals = append(locals, fmt.Sprintf("%.1f s", med))
		}
	}
	hasLocal := len(locals) > 0
	if hasLocal {
		localBoot /= float64(len(locals))
	}
	localDesc := fmt.Sprintf("%.1f s", localBoot)
	if len(locals) > 1 {
		localDesc = fmt.Sprintf("%.1f s, the mean of %d passes (%s)", localBoot, len(locals), strings.Join(locals, ", "))
	}
	for _, m := range r.Modes {
		switch m.Mode {
		case BootRAM, BootRAMOverflow:
			stream := m.Sum(func(t BootTarget) *LayerIO { return t.Stream })
			ram := m.Sum(func(t BootTarget) *LayerIO { return t.RAM })
			measured := fmt.Sprintf("%d of the guests' %d writes (%d as the devices received them) reached a disk file (overflow files, server-disk caches, the image: their meters); %d reached the stream",
				m.DiskWrites(), m.Guest().Writes, ram.Writes, stream.Writes)
			if m.Disk != nil {
				measured += fmt.Sprintf("; the disk holding the files (%s diskstats, anything else on it included) completed %d writes", r.Device, m.Disk.Writes)
			}
			out = append(out, BootFigure{What: "RAM budget holding the working set: writes that reach any disk", Mode: m.Mode,
				Measured: measured, Goal: "0", Verdict: verdictOf(m.DiskWrites() == 0 && stream.Writes == 0 && ram.Writes > 0),
				Yardstick: "seed 001: RAM cache with overflow took XenDesktop to < 0.1 IOPS per target, 99% fewer (published)"})
		case BootRAMOverflowSmall:
			ram := m.Sum(func(t BootTarget) *LayerIO { return t.RAM })
			of := m.Sum(func(t BootTarget) *LayerIO { return t.Overflow })
			f := BootFigure{What: "RAM budget that does not hold the working set: the guests' writes over the disk writes", Mode: m.Mode,
				Goal: fmt.Sprintf("≥ %.0f×", GoalOverflowFewer), Yardstick: "the guests' writes (QEMU's counters), same run"}
			guest := m.Guest()
			if of.Writes == 0 {
				f.Measured, f.Verdict = fmt.Sprintf("the budget held all %d writes: nothing overflowed (raise --write-mb or lower --small-ram)", guest.Writes), VerdictNotMeasured
			} else {
				x := float64(guest.Writes) / float64(of.Writes)
				f.Measured = fmt.Sprintf("%.1f× (the guests' %d writes, %.0f MiB, %.0f KiB on average, reached the devices as %d writes and %d write-zeroes, and the overflow files as %d writes, %.0f MiB, %.0f KiB on average)",
					x, guest.Writes, mibOf(guest.WriteBytes), avgKiB(guest.WriteBytes, guest.Writes), ram.Writes, ram.Zeros, of.Writes, mibOf(of.WriteBytes), avgKiB(of.WriteBytes, of.Writes))
				if m.Disk != nil && m.Disk.Writes > 0 {
					f.Measured += fmt.Sprintf("; by the disk's diskstats (everything on %s): %.1f×, %d writes", r.Device, float64(guest.Writes)/float64(m.Disk.Writes), m.Disk.Writes)
				}
				f.Verdict, f.Ratio = verdictOf(x >= GoalOverflowFewer), fmt.Sprintf("%.1f× fewer", x)
			}
			out = append(out, f)
		}
	}
	for _, m := range r.Modes {
		if m.Mode == BootLocal || m.StoreReads == nil {
			continue
		}
		f := BootFigure{What: fmt.Sprintf("The stream reads each distinct block once for %d targets booting together (RAM cache)", r.Targets), Mode: m.Mode,
			Goal: fmt.Sprintf("blocks read from the store ≤ %.1f × one target's alone", GoalSharedReads)}
		switch {
		case m.Solo == nil || m.Solo.StoreReads == nil || m.Solo.StoreReads.Reads == 0:
			f.Measured = fmt.Sprintf("%d blocks read from the store for %d reads received; no solo boot to compare with (--solo)", m.StoreReads.Reads, m.StreamReceived.Reads)
			f.Verdict = VerdictNotMeasured
		default:
			x := float64(m.StoreReads.Reads) / float64(m.Solo.StoreReads.Reads)
			f.Measured = fmt.Sprintf("%d blocks (64 KiB) read from the store for %d targets' %d reads, against %d for one target alone through the same mode: %.2f×",
				m.StoreReads.Reads, r.Targets, m.StreamReceived.Reads, m.Solo.StoreReads.Reads, x)
			f.Verdict, f.Ratio = verdictOf(x <= GoalSharedReads), fmt.Sprintf("%.2f×", x)
			f.Yardstick = fmt.Sprintf("one target alone through the same mode, same run: %d blocks", m.Solo.StoreReads.Reads)
		}
		out = append(out, f)
	}
	for _, m := range r.Modes {
		if m.Mode == BootLocal {
			continue
		}
		med, _ := m.BootSeconds()
		f := BootFigure{What: fmt.Sprintf("Boot time through usher over the local raw file, %d VMs at once, same run (median)", r.Targets), Mode: m.Mode,
			Goal: fmt.Sprintf("≤ %.1f×", GoalBootRatio)}
		if !hasLocal || localBoot <= 0 {
			f.Measured, f.Verdict = fmt.Sprintf("%.1f s; the local file was not booted in this run", med), VerdictNotMeasured
		} else {
			x := med / localBoot
			f.Measured = fmt.Sprintf("%.2f× (%.1f s against %s)", x, med, localDesc)
			f.Verdict, f.Ratio = verdictOf(x <= GoalBootRatio), fmt.Sprintf("%.2f×", x)
			f.Yardstick = fmt.Sprintf("the local raw file, %d VMs at once, same run: %s", r.Targets, localDesc)
		}
		out = append(out, f)
	}
	return out
}

// Missed returns the figures measured and not met.
func (r *BootResult) Missed() []string {
	var out []string
	for _, f := range r.Figures {
		if f.Verdict == VerdictNotMet {
			out = append(out, f.Mode+": "+f.What)
		}
	}
	return out
}

func mibOf(b int64) float64 { return float64(b) / (1 << 20) }

func ioCell(l *LayerIO) string {
	if l == nil {
		return "-"
	}
	if l.Zeros > 0 {
		return fmt.Sprintf("%d / %d +%dz", l.Reads, l.Writes, l.Zeros)
	}
	return fmt.Sprintf("%d / %d", l.Reads, l.Writes)
}

// avgKiB is the average size of n operations of b bytes.
func avgKiB(b, n int64) float64 {
	if n == 0 {
		return 0
	}
	return float64(b) / float64(n) / 1024
}

func mibCell(l *LayerIO) string {
	if l == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f / %.1f", mibOf(l.ReadBytes), mibOf(l.WriteBytes))
}

// perTargetSecond divides n operations among a mode's targets and its
// pass's seconds.
func (m BootMode) perTargetSecond(n int64) float64 {
	if m.Seconds <= 0 || len(m.Targets) == 0 {
		return 0
	}
	return float64(n) / float64(len(m.Targets)) / m.Seconds
}

// cacheFileWrites returns the writes that reached the mode's write-cache
// files (server-disk caches, overflow files), nil when the mode has none
// metered (local: QEMU's own snapshot overlay). Reads are left out: the
// server-disk cache's meter sees every read of the export, most of them
// passing through to the image.
func (m BootMode) cacheFileWrites() *int64 {
	var n int64
	switch m.Mode {
	case BootLocal:
		return nil
	case BootServerDisk:
		if m.ServerDisk != nil {
			n = m.ServerDisk.Writes + m.ServerDisk.Zeros
		}
	default:
		if of := m.Sum(func(t BootTarget) *LayerIO { return t.Overflow }); of != nil {
			n = of.Writes + of.Zeros
		}
	}
	return &n
}

// Report returns the run as a report: the modes, every target, the
// figures with their verdicts and seed 001's table beside.
func (r *BootResult) Report(command string) (*loadgen.Report, error) {
	rep := loadgen.NewReport(fmt.Sprintf("usher bench boot: %d VMs booting a real Debian at once through each write-cache mode", r.Targets), command)
	modes := loadgen.Table{Title: "Modes: every target's counts summed (reads / writes)",
		Header: []string{"mode", "RAM budget", "boot s median (max)", "done s median (max)", "guest disk r / w", "guest MiB r / w",
			"reached the stream r / w", "stream received r / w", "blocks read from the store", "server disk r / w", "device RAM r / w",
			"overflow r / w", "overflow MiB w", "disk requests r / w (diskstats)", "disk MiB w (diskstats)", "usher CPU s", "pass s",
			"load average start / end", "other VMs running"}}
	var passes []BootMode
	for _, m := range r.Modes {
		if m.Solo != nil {
			solo := *m.Solo
			solo.Mode = m.Mode + ", 1 target alone"
			passes = append(passes, solo)
		}
		passes = append(passes, m)
	}
	for _, m := range passes {
		bm, bx := m.BootSeconds()
		dm, dx := m.DoneSeconds()
		g := m.Guest()
		budget, store, disk, diskMiB, ofMiB := "-", "-", "-", "-", "-"
		if m.Budget > 0 {
			budget = fmt.Sprintf("%d MiB", m.Budget>>20)
		}
		if m.StoreReads != nil {
			store = strconv.FormatInt(m.StoreReads.Reads, 10)
		}
		if m.Disk != nil {
			disk = fmt.Sprintf("%d / %d", m.Disk.Reads, m.Disk.Writes)
			diskMiB = fmt.Sprintf("%.1f", float64(m.Disk.WriteSectors*512)/(1<<20))
		}
		of := m.Sum(func(t BootTarget) *LayerIO { return t.Overflow })
		if of != nil {
			ofMiB = fmt.Sprintf("%.1f", mibOf(of.WriteBytes))
		}
		cpu := m.StreamCPUSeconds
		for _, t := range m.Targets {
			cpu += t.UsherCPUSeconds
		}
		cpuCell := "-"
		if m.Mode != BootLocal {
			cpuCell = fmt.Sprintf("%.1f", cpu)
		}
		modes.Rows = append(modes.Rows, []string{m.Mode, budget, fmt.Sprintf("%.1f (%.1f)", bm, bx), fmt.Sprintf("%.1f (%.1f)", dm, dx),
			ioCell(&g), mibCell(&g), ioCell(m.Sum(func(t BootTarget) *LayerIO { return t.Stream })), ioCell(m.StreamReceived), store,
			ioCell(m.ServerDisk), ioCell(m.Sum(func(t BootTarget) *LayerIO { return t.RAM })), ioCell(of), ofMiB, disk, diskMiB, cpuCell,
			fmt.Sprintf("%.0f", m.Seconds), fmt.Sprintf("%.1f / %.1f", m.Load[0], m.Load[1]), strconv.Itoa(m.OtherVMs)})
	}
	modes.Notes = []string{
		"guest: each VM's virtio disk as QEMU counted it (query-blockstats over its monitor); reached the stream: what each usher target sent the stream (its upstream meter); " +
			"stream received: what usher stream served through its RAM cache (in server-disk mode the guests' reads and writes straight at it); " +
			"blocks read from the store: the stream's reads of the image file under its RAM cache, one 64 KiB block each; server disk: the stream's server-disk write caches; " +
			"device RAM: what reached each usher target's write cache (the guest's I/O as the device received it); overflow: what reached its overflow file. " +
			"+Nz: NBD write-zeroes requests besides the writes (QEMU counts a guest's write-zeroes among its writes, and merges adjacent writes before they leave it).",
		fmt.Sprintf("disk: requests completed by the block device holding the scratch files (%s), from its diskstats around each pass, with a syncfs of it as each guest powers off (before its server-disk cache or overflow file goes) and at the end; everything else on that device counts too, so it bounds the caches' cost from above.", r.Device),
		"load average and other VMs: the machine's 1-minute load average at each pass's start and end, and the QEMU processes of other programs running at its start; on a shared machine they move the boot times.",
	}

	targets := loadgen.Table{Title: "Every target (reads / writes)",
		Header: []string{"mode", "target", "started at s", "boot s", "done s", "guest disk r / w", "reached the stream r / w", "device RAM r / w", "overflow r / w", "usher target CPU s"}}
	for _, m := range passes {
		for _, t := range m.Targets {
			cpu := "-"
			if t.Stream != nil {
				cpu = fmt.Sprintf("%.2f", t.UsherCPUSeconds)
			}
			g := t.Guest
			targets.Rows = append(targets.Rows, []string{m.Mode, t.Name, fmt.Sprintf("%.1f", t.StartSeconds), fmt.Sprintf("%.2f", t.BootSeconds), fmt.Sprintf("%.2f", t.DoneSeconds),
				ioCell(&g), ioCell(t.Stream), ioCell(t.RAM), ioCell(t.Overflow), cpu})
		}
	}

	figs := loadgen.Table{Title: "The issue's figures, computed from this run's counts", Header: []string{"figure", "mode", "measured", "goal", "verdict"}}
	for _, f := range r.Figures {
		figs.Rows = append(figs.Rows, []string{f.What, f.Mode, f.Measured, f.Goal, f.Verdict})
	}

	seed := loadgen.Table{Title: "Seed 001 (the PVS RAM-cache paper, 500 users, 95th percentile IOPS) as published, printed beside, not an input",
		Header: []string{"platform", "hypervisor", "disk cache IOPS", "per user", "disks", "RAM+overflow IOPS", "per user", "disks", "saving"}}
	for _, s := range r.Seed001 {
		seed.Rows = append(seed.Rows, []string{s.Platform, s.Hypervisor, strconv.Itoa(s.DiskIOPS), fmt.Sprintf("%.2f", float64(s.DiskIOPS)/500),
			strconv.Itoa(s.DiskDisks), strconv.Itoa(s.RAMIOPS), fmt.Sprintf("%.2f", float64(s.RAMIOPS)/500), strconv.Itoa(s.RAMDisks), fmt.Sprintf("%d%%", s.Saving)})
	}
	mine := loadgen.Table{Title: "usher, this run: per-target IOPS by mode, averaged over each pass (boot and workload, not a steady state)",
		Header: []string{"mode", "guest IOPS per target", "write-cache file write IOPS per target", "write-cache file writes per target", "saving against server-disk (writes per target)"}}
	var sdWrites *int64
	var sdMode BootMode
	if sd, ok := r.Mode(BootServerDisk); ok {
		sdWrites, sdMode = sd.cacheFileWrites(), sd
	}
	for _, m := range r.Modes {
		g := m.Guest()
		iops, per, saving := "-", "-", "-"
		if w := m.cacheFileWrites(); w != nil && len(m.Targets) > 0 {
			iops = fmt.Sprintf("%.2f", m.perTargetSecond(*w))
			per = fmt.Sprintf("%.1f", float64(*w)/float64(len(m.Targets)))
			if sdWrites != nil && *sdWrites > 0 && m.Mode != BootServerDisk {
				base := float64(*sdWrites) / float64(len(sdMode.Targets))
				saving = fmt.Sprintf("%.0f%%", 100*(1-float64(*w)/float64(len(m.Targets))/base))
			}
		}
		mine.Rows = append(mine.Rows, []string{m.Mode, fmt.Sprintf("%.1f", m.perTargetSecond(g.Reads+g.Writes)), iops, per, saving})
	}
	mine.Notes = []string{"The paper's figures are 95th percentiles of 500 users over a working day; this run's are the averages of a boot and a short scripted workload, and every target does the same work in each mode: " +
		"the saving compares the writes per target (a pass's length moves with the machine's load), not the absolute IOPS."}

	rep.Tables = []loadgen.Table{figs, modes, targets, mine, seed}
	rep.CSV = &targets
	client := fmt.Sprintf("%d QEMU VMs (software emulation, 1 vCPU, %d MiB each) booting at once, sharing the machine's %d CPUs with usher's processes (not pinned: the boot time includes usher's CPU)",
		r.Targets, r.MemoryMB, r.CPUs)
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("Each pass starts its usher processes afresh (a cold RAM cache): usher stream (--write-cache in server-disk mode) and, in the device modes, one usher target per VM standing in for the device, on loopback. "+
			"Each VM boots the boot image %s (a minimal Debian, internal/vmrun) with its root on usher's NBD export (QEMU's NBD client), and runs its workload: "+
			"USHER-BOOTED (the boot time, from QEMU's start), %d MiB of random data written and synced (%s), USHER-DONE, power off. The local mode boots the same image as a raw file (snapshot=on): the yardstick of boot time.", r.Image, r.WriteMB, writeModeText(r.WriteMode)),
		client+".")
	for mode, e := range r.Errors {
		rep.Notes = append(rep.Notes, fmt.Sprintf("Pass %s failed: %s", mode, strings.SplitN(e, "\n", 2)[0]))
	}
	for _, f := range r.Figures {
		rep.Headlines = append(rep.Headlines, loadgen.Headline{What: f.What + " (" + f.Mode + ")",
			Usher: f.Measured + "; goal " + f.Goal + ": " + f.Verdict, Yardstick: f.Yardstick, Ratio: f.Ratio, Client: client})
	}

	var series []loadgen.Series
	for _, m := range r.Modes {
		s := loadgen.Series{Name: m.Mode}
		for i, t := range m.Targets {
			s.X, s.Y = append(s.X, float64(i+1)), append(s.Y, t.BootSeconds)
		}
		series = append(series, s)
	}
	if len(series) > 0 && r.Targets > 1 {
		f, err := loadgen.LinePlot("boot-seconds", "Boot time of each target by mode (lower is better)", "target",
			"seconds from QEMU's start to USHER-BOOTED", series...)
		if err != nil {
			return nil, err
		}
		rep.Figures = []loadgen.Figure{f}
	}
	return rep, nil
}

// writeModeText says how the workload wrote, for the report.
func writeModeText(mode string) string {
	if mode == vmrun.WriteSmall {
		return "as a desktop writes: 4 KiB writes at random offsets of 8 files, each block written twice on average, an fsync every 32 writes; usher.write_mode=small"
	}
	return "one file, dd bs=1M, synced at its end"
}
