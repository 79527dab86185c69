package benchkit

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses, as a process may set.
	line := "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 30 7 3 20 0 1 0 100 0 0\n"
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != 17 || st.user != 2500*time.Millisecond || st.sys != 300*time.Millisecond || st.cuser != 70*time.Millisecond || st.csys != 30*time.Millisecond {
		t.Fatalf("got %+v", st)
	}
	for _, bad := range []string{"", "1 (x) S 2", "1 (x) S a 3 4 5 6 7 8 9 10 11 12 13 14 15"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func busy(t *testing.T, script string) *exec.Cmd {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	return exec.Command(sh, "-c", script)
}

// TestRunMeasuresTheClient: a child that spins for a second shows about a
// core of CPU; one that sleeps shows almost none.
func TestRunMeasuresTheClient(t *testing.T) {
	ctx := context.Background()
	_, spin, err := Run(ctx, busy(t, `end=$(( $(date +%s) + 2 )); while [ $(date +%s) -lt $end ]; do :; done`))
	if err != nil {
		t.Fatal(err)
	}
	if spin.Cores() < 0.1 { // about 1 alone; well above 0 on a loaded machine
		t.Errorf("a spinning child used %.2f cores over %v", spin.Cores(), spin.Wall)
	}
	_, idle, err := Run(ctx, busy(t, "sleep 1"))
	if err != nil {
		t.Fatal(err)
	}
	if idle.Cores() > 0.1 {
		t.Errorf("a sleeping child used %.2f cores", idle.Cores())
	}
}

func TestRunKillsOnCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := Run(ctx, busy(t, "sleep 30 & sleep 30; wait"))
	if err == nil {
		t.Fatal("a killed client reported success")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancel took %v", d)
	}
}

// TestTreeCPU: the CPU of a parent and its spinning child counts; a
// sibling tree does not.
func TestTreeCPU(t *testing.T) {
	cmd := busy(t, `(while :; do :; done) & wait`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		exec.Command("pkill", "-KILL", "-P", strconv.Itoa(cmd.Process.Pid)).Run()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	m := TreeCPU(cmd.Process.Pid)
	start, err := m()
	if err != nil {
		t.Fatal(err)
	}
	// The child spins once the tree's CPU time grows.
	a := start
	for deadline := time.Now().Add(20 * time.Second); a.Sub(start).CPU() < 20*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("the tree used %v of CPU in 20s: the child does not spin", a.Sub(start).CPU())
		}
		time.Sleep(10 * time.Millisecond) // a poll interval
		if a, err = m(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second) // the window the tree's use is measured over
	b, err := m()
	if err != nil {
		t.Fatal(err)
	}
	if u := b.Sub(a); u.Cores() < 0.1 {
		t.Errorf("a tree with a spinning child used %.2f cores over %v", u.Cores(), u.Wall)
	}
	if _, err := TreeCPU(1 << 30)(); err == nil {
		t.Error("a missing process: no error")
	}
}

// TestPinServer: pinned, every thread runs on the server CPUs and
// GOMAXPROCS matches; restored, both come back.
func TestPinServer(t *testing.T) {
	p := PlanCPUs()
	if !p.Pinned() {
		t.Skip("one CPU: nothing to pin")
	}
	before := allowed(t)
	restore, err := p.PinServer()
	if err != nil {
		t.Fatal(err)
	}
	for tid, list := range allowedByTask(t) {
		if list != CPUList(p.Server) {
			t.Errorf("thread %s allowed on %s, want %s", tid, list, CPUList(p.Server))
		}
	}
	restore()
	if got := allowed(t); got != before {
		t.Errorf("after restore: %s, want %s", got, before)
	}
}

func allowed(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	return field(string(b), "Cpus_allowed_list:")
}

func allowedByTask(t *testing.T) map[string]string {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		m[e.Name()] = field(string(b), "Cpus_allowed_list:")
	}
	return m
}

func field(status, name string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, name); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		usher, yard Step
		need        float64
		want        string
	}{
		{Step{Rate: 800, Ceiling: 2000}, Step{Rate: 1000, Ceiling: 2000}, 1, "0.80"},
		{Step{Rate: 800}, Step{Rate: 1000}, 1, "0.80"}, // uncalibrated: a ratio, as before
		{Step{Rate: 1900, Ceiling: 2000}, Step{Rate: 1950, Ceiling: 2000}, 1, "client-bound"},
		{Step{Rate: 1000, Ceiling: 2000}, Step{Rate: 1850, Ceiling: 2000}, 1, "client-bound (yardstick)"},
		{Step{Rate: 1850, Ceiling: 2000}, Step{Rate: 1000, Ceiling: 2000}, 1, "client-bound (usher)"},
		{Step{Rate: 1000, Ceiling: 1400}, Step{Rate: 900, Ceiling: 1400}, Headroom, "client-bound (ceiling < 1.5×)"},
		{Step{Rate: 1000, Ceiling: 1600}, Step{Rate: 900, Ceiling: 1600}, Headroom, "1.11"},
		{Step{Rate: 1000}, Step{}, 1, "-"},
	} {
		if got := Compare(tc.usher, tc.yard, tc.need); got != tc.want {
			t.Errorf("Compare(%+v, %+v, %v) = %q, want %q", tc.usher, tc.yard, tc.need, got, tc.want)
		}
		if Ratio(tc.want) != (tc.want[0] >= '0' && tc.want[0] <= '9') {
			t.Errorf("Ratio(%q) wrong", tc.want)
		}
	}
}

func TestCPUPerOp(t *testing.T) {
	s := Step{Rate: 1000, Server: Usage{Wall: 2 * time.Second, User: time.Second}}
	if got := s.CPUPerOp(); got < 499e-6 || got > 501e-6 {
		t.Fatalf("CPUPerOp = %v, want 500 µs", got)
	}
}
