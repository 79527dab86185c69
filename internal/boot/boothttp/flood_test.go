package boothttp_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/boot"
	"github.com/usher-vdi/usher/internal/boot/boothttp"
	"github.com/usher-vdi/usher/internal/site"
)

// clock is a fake clock for the boot server's limits.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// answer is what a source sees of one request.
type answer struct {
	status      int
	contentType string
	body        string
}

// from returns a GET of the fixture's server from the loopback address
// ip (127.0.0.2, ...): one source.
func (f *fixture) from(ip string) func(path string) answer {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	f.t.Cleanup(c.CloseIdleConnections)
	return func(path string) answer {
		f.t.Helper()
		resp, err := c.Get(f.srv.URL + path)
		if err != nil {
			f.t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			f.t.Fatal(err)
		}
		return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
	}
}

const kioskMAC = "52:54:00:00:01:01"

// realBoot boots kiosk-01 as its firmware does, and fails unless every
// step is served.
func realBoot(t *testing.T, get func(string) answer) {
	t.Helper()
	for _, p := range []string{"/boot/ipxe?mac=" + kioskMAC, boot.TargetPath(kioskMAC, 0) + "kernel", boot.TargetPath(kioskMAC, 0) + "initrd"} {
		if a := get(p); a.status != 200 {
			t.Fatalf("real boot: %s: %d %s", p, a.status, a.body)
		}
	}
}

// recordsFrom counts a target's boot records by source address.
func recordsFrom(recs []site.BootRecord) map[string]int {
	out := map[string]int{}
	for _, r := range recs {
		host, _, _ := net.SplitHostPort(r.Remote)
		out[host]++
	}
	return out
}

// TestBootFloodKeepsRealBoots replays the flood: 400 anonymous requests
// for a known MAC from one source (repeats of its script, and kernels of
// versions it does not boot) between a real boot and another. Both real
// boots stay in the target's boot log, the flood leaves a few records,
// and the repeats of the script are one record.
func TestBootFloodKeepsRealBoots(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f, _ := newFixtureWith(t, func(c *boothttp.Config) { c.Now = clk.Now })
	f.setTargets(site.Target{Name: "kiosk-01", MAC: kioskMAC, Image: "kiosk", Cache: site.CacheServerDisk})
	target, flood, later := f.from("127.0.0.2"), f.from("127.0.0.1"), f.from("127.0.0.3")

	realBoot(t, target)
	for i := range 400 {
		path := "/boot/ipxe?mac=" + kioskMAC
		if i%2 == 1 {
			path = boot.TargetPath(kioskMAC, 1+i) + "kernel"
		}
		flood(path)
	}
	realBoot(t, later)

	recs := f.boots("kiosk-01")
	by := recordsFrom(recs)
	if by["127.0.0.2"] != 3 || by["127.0.0.3"] != 3 {
		t.Fatalf("the real boots' records: %d before the flood, %d after, want 3 each (%d records in all)", by["127.0.0.2"], by["127.0.0.3"], len(recs))
	}
	if n := by["127.0.0.1"]; n > 1+boothttp.DefaultMissBurst {
		t.Errorf("the flood left %d records, want at most %d", n, 1+boothttp.DefaultMissBurst)
	}
	scripts := 0
	for _, r := range recs {
		if strings.HasPrefix(r.Remote, "127.0.0.1:") && r.Step == site.BootScript {
			scripts++
		}
	}
	if scripts != 1 {
		t.Errorf("200 identical script requests of one source: %d records, want 1", scripts)
	}

	// After the window, the same source's boot is a record again.
	clk.Add(boothttp.DefaultRecordWindow + time.Second)
	realBoot(t, target)
	if by := recordsFrom(f.boots("kiosk-01")); by["127.0.0.2"] != 6 {
		t.Errorf("the target's boot after the window: %d records of its source, want 6", by["127.0.0.2"])
	}
	// The flood's next script after the window is a record, and the log
	// counts the repeats the last one stood for.
	if a := flood("/boot/ipxe?mac=" + kioskMAC); a.status != 200 {
		t.Fatalf("the flood's source after the window: %+v", a)
	}
	if !strings.Contains(f.logged(), "boot records coalesced") || !strings.Contains(f.logged(), "repeats=") {
		t.Errorf("the log does not count the coalesced repeats:\n%.2000s", f.logged())
	}
}

// TestRebootsAreRecorded: a machine that boots whole (script, kernel,
// initrd) and boots again within the window, as a quick reboot or a
// target moved from private mode to production does, has both boots in
// its log; a repeated step without a whole boot in between is still one
// record.
func TestRebootsAreRecorded(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f, _ := newFixtureWith(t, func(c *boothttp.Config) { c.Now = clk.Now })
	f.setTargets(site.Target{Name: "kiosk-01", MAC: kioskMAC, Image: "kiosk", Cache: site.CacheServerDisk})
	target := f.from("127.0.0.2")
	realBoot(t, target)
	clk.Add(10 * time.Second)
	realBoot(t, target)
	if n := recordsFrom(f.boots("kiosk-01"))["127.0.0.2"]; n != 6 {
		t.Fatalf("two whole boots within the window: %d records, want 6", n)
	}
	// The initrd fetched again and again, no script or kernel between:
	// one record more, not one per fetch.
	for range 20 {
		if a := target(boot.TargetPath(kioskMAC, 0) + "initrd"); a.status != 200 {
			t.Fatalf("initrd: %+v", a)
		}
	}
	if n := recordsFrom(f.boots("kiosk-01"))["127.0.0.2"]; n != 7 {
		t.Fatalf("20 more initrd fetches: %d records, want 7", n)
	}
}

// TestBootRecordsPerSourceAreBounded: a source whose requests all differ
// (no coalescing) and which no lookup budget stops writes RecordBurst
// records at once, then one per RecordEvery; another source's boot is
// recorded.
func TestBootRecordsPerSourceAreBounded(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f, _ := newFixtureWith(t, func(c *boothttp.Config) { c.Now = clk.Now; c.MissBurst = 1000 })
	f.setTargets(site.Target{Name: "kiosk-01", MAC: kioskMAC, Image: "kiosk", Cache: site.CacheServerDisk})
	flood := f.from("127.0.0.1")
	for i := range 400 {
		flood(boot.TargetPath(kioskMAC, 1+i) + "kernel")
	}
	if n := recordsFrom(f.boots("kiosk-01"))["127.0.0.1"]; n != boothttp.DefaultRecordBurst {
		t.Fatalf("400 different refusals of one source: %d records, want %d", n, boothttp.DefaultRecordBurst)
	}
	clk.Add(boothttp.DefaultRecordEvery)
	flood(boot.TargetPath(kioskMAC, 999) + "kernel")
	flood(boot.TargetPath(kioskMAC, 998) + "kernel")
	if n := recordsFrom(f.boots("kiosk-01"))["127.0.0.1"]; n != boothttp.DefaultRecordBurst+1 {
		t.Fatalf("one RecordEvery later: %d records, want %d", n, boothttp.DefaultRecordBurst+1)
	}
	realBoot(t, f.from("127.0.0.2"))
	if n := recordsFrom(f.boots("kiosk-01"))["127.0.0.2"]; n != 3 {
		t.Fatalf("another source's boot: %d records, want 3", n)
	}
}

// TestUnknownAndKnownMACsAlike: to a stranger, an unknown MAC and a
// known target whose boot is refused get the same answer, naming
// nothing; a source that has asked for many MACs it is not served gets
// that answer for a known, bootable MAC too, while the target itself
// boots; the budget refills with time.
func TestUnknownAndKnownMACsAlike(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f, _ := newFixtureWith(t, func(c *boothttp.Config) { c.Now = clk.Now })
	f.setTargets(
		site.Target{Name: "kiosk-01", MAC: kioskMAC, Image: "kiosk", Cache: site.CacheServerDisk},
		site.Target{Name: "lost-01", MAC: "52:54:00:00:02:01", Image: "gone", Cache: site.CacheServerDisk},
		site.Target{Name: "pc-01", MAC: "52:54:00:00:02:02", Image: "kiosk", Cache: site.CacheRAM}, // no agent
	)
	stranger := f.from("127.0.0.1")
	unknown := stranger("/boot/ipxe?mac=52:54:00:99:00:01")
	if unknown.status != 404 {
		t.Fatalf("unknown MAC: %+v", unknown)
	}
	for _, path := range []string{
		"/boot/ipxe?mac=52:54:00:99:00:02",
		"/boot/ipxe?mac=52:54:00:00:02:01",      // image missing
		"/boot/ipxe?mac=52:54:00:00:02:02",      // no boot agent
		boot.TargetPath(kioskMAC, 7) + "kernel", // a version it does not boot
		boot.TargetPath("52:54:00:99:00:03", 0) + "initrd",
	} {
		if a := stranger(path); a != unknown {
			t.Errorf("%s: %+v; an unknown MAC's answer is %+v", path, a, unknown)
		}
	}
	for _, name := range []string{"kiosk", "gone", "lost-01", "pc-01", "52:54:00", "52-54-00"} {
		if strings.Contains(unknown.body, name) {
			t.Errorf("the answer names %q: %s", name, unknown.body)
		}
	}

	// Probing on: past its budget the stranger cannot tell the MAC that
	// boots from the others.
	for i := range boothttp.DefaultMissBurst {
		stranger(fmt.Sprintf("/boot/ipxe?mac=52:54:00:98:00:%02x", i))
	}
	if a := stranger("/boot/ipxe?mac=" + kioskMAC); a != unknown {
		t.Errorf("a prober's request for the MAC that boots: %+v, want the unknown MAC's answer", a)
	}
	realBoot(t, f.from("127.0.0.2"))
	clk.Add(boothttp.DefaultMissEvery)
	if a := stranger("/boot/ipxe?mac=" + kioskMAC); a.status != 200 {
		t.Errorf("the prober's budget does not refill: %+v", a)
	}
}
