package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/blockbench"
)

func TestParseLayers(t *testing.T) {
	text := `# HELP usher_block_ops_total I/O operations by layer.
usher_block_ops_total{layer="upstream",op="read"} 145
usher_block_ops_total{layer="upstream",op="write"} 0
usher_block_ops_total{layer="overflow",op="write"} 17
usher_block_bytes_total{layer="overflow",op="write"} 1.7825792e+07
usher_block_bytes_total{layer="upstream",op="read"} 5.5e+06
usher_block_ops_total{layer="overflow",op="zero"} 2
usher_block_bytes_total{layer="overflow",op="zero"} 131072
usher_nbd_connections 1
`
	got, err := parseLayers(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if want := (LayerIO{Reads: 145, ReadBytes: 5_500_000}); got["upstream"] != want {
		t.Errorf("upstream %+v, want %+v", got["upstream"], want)
	}
	if want := (LayerIO{Writes: 17, WriteBytes: 17 << 20, Zeros: 2, ZeroBytes: 128 << 10}); got["overflow"] != want {
		t.Errorf("overflow %+v, want %+v", got["overflow"], want)
	}
	if _, err := parseLayers(strings.NewReader(`usher_block_ops_total{layer="x",op="read"} many` + "\n")); err == nil {
		t.Error("a bad value: no error")
	}
}

func TestParseBlockStats(t *testing.T) {
	raw := `[{"device":"virtio0","stats":{"rd_operations":153,"wr_operations":62,"rd_bytes":5767168,"wr_bytes":55484416,"flush_operations":9}}]`
	got, err := parseBlockStats([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if want := (LayerIO{Reads: 153, Writes: 62, ReadBytes: 5767168, WriteBytes: 55484416}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := parseBlockStats([]byte(`[]`)); err == nil {
		t.Error("no device: no error")
	}
}

// bootRun is a result as RunBoot makes it, with counts chosen for the
// figures' arithmetic.
func bootRun(overflowWrites int64, boot float64) *BootResult {
	l := func(r, w int64) *LayerIO {
		return &LayerIO{Reads: r, Writes: w, ReadBytes: r << 16, WriteBytes: w << 20}
	}
	target := func(name string, boot float64, stream, ram, of *LayerIO) BootTarget {
		return BootTarget{Name: name, BootSeconds: boot, DoneSeconds: boot + 3, Guest: LayerIO{Reads: 153, Writes: 60, WriteBytes: 40 << 20},
			Stream: stream, RAM: ram, Overflow: of}
	}
	solo := func(mode string) *BootMode {
		return &BootMode{Mode: mode, StoreReads: l(138, 0), StreamReceived: l(161, 0),
			Targets: []BootTarget{target("solo-1", 20, l(145, 0), l(145, 34), l(0, overflowWrites/2))}}
	}
	r := &BootResult{Targets: 2, WriteMB: 24, Device: "vda", Seed001: blockbench.Seed001,
		Modes: []BootMode{
			{Mode: BootLocal, Seconds: 40, Targets: []BootTarget{target("local-1", 20, nil, nil, nil), target("local-2", 22, nil, nil, nil)}},
			{Mode: BootRAM, Seconds: 40, Solo: solo(BootRAM), StoreReads: l(138, 0), StreamReceived: l(300, 0), Private: l(0, 0), Disk: &blockbench.DiskStats{Writes: 3},
				Targets: []BootTarget{target("ram-1", boot, l(150, 0), l(150, 40), nil), target("ram-2", boot, l(150, 0), l(150, 40), nil)}},
			{Mode: BootRAMOverflowSmall, Seconds: 40, Solo: solo(BootRAMOverflowSmall), StoreReads: l(150, 0), StreamReceived: l(300, 0), Private: l(0, 0),
				Targets: []BootTarget{target("s-1", boot, l(150, 0), l(150, 40), l(0, overflowWrites/2)), target("s-2", boot, l(150, 0), l(150, 40), l(0, overflowWrites/2))}},
		},
	}
	r.Figures = r.figures()
	return r
}

func figure(t *testing.T, r *BootResult, mode, what string) BootFigure {
	t.Helper()
	for _, f := range r.Figures {
		if f.Mode == mode && strings.Contains(f.What, what) {
			return f
		}
	}
	t.Fatalf("no figure %q of %s in %+v", what, mode, r.Figures)
	return BootFigure{}
}

func TestBootFigures(t *testing.T) {
	r := bootRun(20, 23) // 120 guest writes, 20 overflow writes: 6×; boots 23 s against 21 s
	for _, tc := range []struct{ mode, what, verdict, measured string }{
		{BootRAM, "reach any disk", VerdictMet, "0 of the guests' 120 writes"},
		{BootRAMOverflowSmall, "does not hold", VerdictMet, "6.0×"},
		{BootRAM, "distinct block", VerdictMet, "1.00×"},
		{BootRAMOverflowSmall, "distinct block", VerdictMet, "1.09×"},
		{BootRAM, "Boot time", VerdictMet, "1.10×"},
	} {
		f := figure(t, r, tc.mode, tc.what)
		if f.Verdict != tc.verdict || !strings.Contains(f.Measured, tc.measured) {
			t.Errorf("%s %q: %s, %q; want %s, %q", tc.mode, tc.what, f.Verdict, f.Measured, tc.verdict, tc.measured)
		}
	}
	if m := r.Missed(); len(m) != 0 {
		t.Errorf("missed %v", m)
	}

	r = bootRun(40, 30) // 3×; 30 s against 21 s
	if f := figure(t, r, BootRAMOverflowSmall, "does not hold"); f.Verdict != VerdictNotMet {
		t.Errorf("3× fewer: %s", f.Verdict)
	}
	if f := figure(t, r, BootRAM, "Boot time"); f.Verdict != VerdictNotMet || !strings.Contains(f.Measured, "1.43×") {
		t.Errorf("30 s against 21 s: %s %q", f.Verdict, f.Measured)
	}
	if got := len(r.Missed()); got != 3 {
		t.Errorf("%d missed, want 3 (overflow, two boot times): %v", got, r.Missed())
	}
	// A second local pass at the end: the yardstick is the passes' mean.
	r.Modes = append(r.Modes, BootMode{Mode: BootLocal, Targets: []BootTarget{{BootSeconds: 29}, {BootSeconds: 29}}})
	r.Figures = r.figures()
	if f := figure(t, r, BootRAM, "Boot time"); f.Verdict != VerdictMet || !strings.Contains(f.Measured, "1.20× (30.0 s against 25.0 s, the mean of 2 passes (21.0 s, 29.0 s))") {
		t.Errorf("30 s against 21 s and 29 s: %s %q", f.Verdict, f.Measured)
	}

	r = bootRun(0, 23) // nothing overflowed: not measured, not missed
	if f := figure(t, r, BootRAMOverflowSmall, "does not hold"); f.Verdict != VerdictNotMeasured {
		t.Errorf("no overflow: %s", f.Verdict)
	}
	r.Modes[1].Solo = nil
	r.Figures = r.figures()
	if f := figure(t, r, BootRAM, "distinct block"); f.Verdict != VerdictNotMeasured {
		t.Errorf("no solo boot: %s", f.Verdict)
	}
}

func TestBootReport(t *testing.T) {
	r := bootRun(20, 23)
	rep, err := r.Report("usher bench boot --targets 2")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"The issue's figures", "Seed 001", "XenDesktop", "ram-overflow-small, 1 target alone", "ram-overflow-small", "| met"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, b.String())
		}
	}
	if len(rep.Headlines) != len(r.Figures) || len(rep.Figures) != 1 {
		t.Errorf("%d headlines for %d figures, %d plots", len(rep.Headlines), len(r.Figures), len(rep.Figures))
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back BootResult
	if err := json.Unmarshal(js, &back); err != nil || len(back.Modes) != 3 || back.Modes[2].Solo == nil || len(back.Figures) != len(r.Figures) {
		t.Fatalf("result.json round trip: %v, %+v", err, back)
	}
}
