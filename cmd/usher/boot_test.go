package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/vmrun"
	"github.com/usher-vdi/usher/internal/vmrun/vmruntest"
)

// The boot tests boot a real Debian (internal/vmrun: built once per
// machine, about two minutes, then cached) under QEMU with its root disk
// on usher, through each write cache, and check what the guest's
// workload reports on the serial console (USHER-MARKER: whether an
// earlier boot's file is there) against what each mode promises. Each
// boot takes 15 to 30 s under software emulation; the VMs run two at a
// time (one per CPU).

// role is a long-running usher command started by startRoleAddrs.
type role struct {
	nbd, metrics string // its addresses
	stop         func() // stops it and waits
	log          *syncBuffer
}

// startRoleAddrs runs a long-running usher command in-process, like
// startRoleStop, and returns the addresses it reports for its NBD
// endpoint and, with --metrics-listen, its metrics. Its log is kept in
// the test's output when the test fails.
func startRoleAddrs(t *testing.T, args ...string) *role {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 4)
	stderr := &syncBuffer{}
	m := &Main{Stdin: strings.NewReader(""), Stdout: &syncBuffer{}, Stderr: stderr, Getenv: func(string) string { return "" },
		Listening: func(n, a string) { addrs <- [2]string{n, a} }}
	done := make(chan int, 1)
	go func() { done <- m.Run(ctx, args) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("usher %s did not stop", args[0])
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("usher %s's log:\n%s", args[0], stderr)
		}
	})
	r := &role{stop: stop, log: stderr}
	wantMetrics := slices.Contains(args, "--metrics-listen")
	for r.nbd == "" || wantMetrics && r.metrics == "" {
		select {
		case a := <-addrs:
			switch a[0] {
			case "nbd":
				r.nbd = a[1]
			case "metrics":
				r.metrics = a[1]
			}
		case code := <-done:
			t.Fatalf("usher %s exited with %d: %s", args[0], code, stderr)
		case <-time.After(30 * time.Second):
			t.Fatalf("usher %s did not listen", args[0])
		}
	}
	return r
}

// bootStore imports the boot image into a new store as "golden" and
// returns the store and the digest of the version 0 file, which no boot
// may change.
func bootStore(t *testing.T, img *vmrun.BootImage) (store, sum string) {
	t.Helper()
	store = filepath.Join(t.TempDir(), "store")
	importBootImage(t, img, "golden", store)
	return store, fileSum(t, filepath.Join(store, "golden", "v0.raw"))
}

// imported holds the boot image's imports, one per image name, made once
// per test binary: an import under the race detector takes about 30 s
// (4 s without), a sparse copy of its store a second or two.
var imported struct {
	mu     sync.Mutex // held through an import, so that the boot tests wait for one
	dir    string
	stores map[string]string // image name -> its imported store
}

// importBootImage makes store a new image store holding img's disk as
// version 0 of the image name, as "usher image import" makes it: a copy
// of the binary's one import of it.
func importBootImage(t *testing.T, img *vmrun.BootImage, name, store string) {
	t.Helper()
	imported.mu.Lock()
	defer imported.mu.Unlock()
	tmpl, ok := imported.stores[name]
	if !ok {
		if imported.dir == "" {
			dir, err := os.MkdirTemp("", "usher-boot-stores-")
			if err != nil {
				t.Fatal(err)
			}
			imported.dir = dir
			imported.stores = map[string]string{}
		}
		tmpl = filepath.Join(imported.dir, name)
		start := time.Now()
		mustImage(t, "import", name, img.Disk, "--store", tmpl)
		t.Logf("usher image import of the %s boot image: %v (once; the other boot tests copy it)", img.Key, time.Since(start).Round(time.Millisecond))
		imported.stores[name] = tmpl
	}
	if out, err := exec.Command("cp", "-a", "--sparse=always", tmpl, store).CombinedOutput(); err != nil {
		t.Fatalf("copying the imported store: %v: %s", err, out)
	}
}

// removeBootImports removes the binary's imports, once its tests are done.
func removeBootImports() {
	imported.mu.Lock()
	defer imported.mu.Unlock()
	if imported.dir != "" {
		os.RemoveAll(imported.dir)
	}
}

// fileSum returns the SHA-256 of a file.
func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// layerIO is one layer's counters from a metrics endpoint.
type layerIO struct{ reads, writes, readMiB, writeMiB int64 }

func layerCounters(t *testing.T, metrics, layer string) layerIO {
	t.Helper()
	return layerIO{
		reads: blockOps(t, metrics, layer, "read"), writes: blockOps(t, metrics, layer, "write"),
		readMiB: blockBytes(t, metrics, layer, "read") >> 20, writeMiB: blockBytes(t, metrics, layer, "write") >> 20,
	}
}

// blockBytes reads usher_block_bytes_total{layer,op} from a metrics
// endpoint: 0 for a layer that has seen no I/O.
func blockBytes(t *testing.T, addr, layer, op string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	want := `usher_block_bytes_total{layer="` + layer + `",op="` + op + `"} `
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(f)
		}
	}
	return 0
}

// TestBootThroughUsher boots the image through usher's write caches,
// each boot a first boot of the production version: the server's disk
// (usher stream --write-cache, QEMU's NBD client on the export), and the
// device's RAM with overflow to a file and the device's disk (usher
// target, which here runs on the host as the device's proxy in front of
// the stream, QEMU's NBD client on its local socket). Each boot finds no
// earlier boot's file, its writes reach its cache layer and never the
// image. One boot per layer: that a standard boot's writes vanish at the
// next boot is TestNetBoot's (two standard boots of one target), the
// device's RAM alone and RAM with overflow inside the target's initramfs
// are TestNetBootDeviceCache's, and the boot from a local file that the
// times compare with is internal/vmrun's TestBootLocalDisk.
func TestBootThroughUsher(t *testing.T) {
	t.Parallel()
	img := vmruntest.Image(t)
	store, sum := bootStore(t, img)
	dir := t.TempDir()
	stream := startRoleAddrs(t, "stream", "--store", store, "--listen", "127.0.0.1:0", "--write-cache", filepath.Join(dir, "wc"),
		"--metrics-listen", "127.0.0.1:0", "--log-level", "warn")
	upstream, streamMetrics := "nbd://"+stream.nbd+"/golden", stream.metrics
	const writeMB = 24

	t.Run("server disk", func(t *testing.T) {
		t.Parallel()
		before := layerCounters(t, streamMetrics, imageexport.LayerWriteDisk)
		r := vmruntest.Boot(t, vmrun.VMOptions{Name: "server-disk", Image: img, Disk: upstream, WriteMB: writeMB})
		logBoot(t, r)
		checkFirstBoot(t, r, writeMB)
		d := layerCounters(t, streamMetrics, imageexport.LayerWriteDisk)
		t.Logf("server-disk write cache %d writes (%d MiB)", d.writes-before.writes, d.writeMiB-before.writeMiB)
		if d.writes == before.writes || d.writeMiB-before.writeMiB < writeMB {
			t.Errorf("%d writes (%d MiB) reached the server-disk write cache; want the guest's %d MiB", d.writes-before.writes, d.writeMiB-before.writeMiB, writeMB)
		}
	})
	for _, tc := range []struct {
		mode, layer string
		args        []string
		minMiB      int64 // of the guest's writes that reach layer
	}{
		// A RAM budget below the guest's writes: the rest overflows.
		{"ram-overflow", "overflow", []string{"--ram", "8MiB", "--overflow", "OVERFLOW"}, writeMB - 8},
		{"disk", "writecache_device_disk", []string{"--overflow", "OVERFLOW"}, writeMB},
	} {
		t.Run("device "+tc.mode, func(t *testing.T) {
			t.Parallel()
			tdir := t.TempDir()
			args := []string{"target", "--upstream", upstream, "--cache", tc.mode, "--listen", "unix:" + filepath.Join(tdir, "target.sock"),
				"--metrics-listen", "127.0.0.1:0", "--log-level", "warn"}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "OVERFLOW", filepath.Join(tdir, "cache.bin")))
			}
			target := startRoleAddrs(t, args...)
			metrics := target.metrics
			r := vmruntest.Boot(t, vmrun.VMOptions{Name: tc.mode, Image: img, Disk: "nbd+unix:///?socket=" + target.nbd, WriteMB: writeMB})
			logBoot(t, r)
			checkFirstBoot(t, r, writeMB)
			up := layerCounters(t, metrics, "upstream")
			layer := layerCounters(t, metrics, tc.layer)
			t.Logf("%s: upstream %d reads (%d MiB), %s %d writes (%d MiB)", tc.mode, up.reads, up.readMiB, tc.layer, layer.writes, layer.writeMiB)
			if tc.layer == "overflow" {
				ram := layerCounters(t, metrics, "writecache_ram")
				t.Logf("%s: the guest's %d writes (%d MiB) reached the overflow file as %d writes (%d MiB)", tc.mode, ram.writes, ram.writeMiB, layer.writes, layer.writeMiB)
			}
			if up.reads == 0 || up.writes != 0 {
				t.Errorf("upstream: %d reads, %d writes; want reads and no writes", up.reads, up.writes)
			}
			if layer.writes == 0 || layer.writeMiB < tc.minMiB {
				t.Errorf("%s: %d writes, %d MiB; want at least %d MiB of the guest's %d", tc.layer, layer.writes, layer.writeMiB, tc.minMiB, writeMB)
			}
			target.stop()
		})
	}
	t.Cleanup(func() {
		if got := fileSum(t, filepath.Join(store, "golden", "v0.raw")); got != sum {
			t.Errorf("the image's version 0 changed under the boots: digest %s, was %s", got, sum)
		}
		if p := layerCounters(t, streamMetrics, imageexport.LayerPrivate); p.writes != 0 {
			t.Errorf("%d writes reached the image (private layer)", p.writes)
		}
	})
}

func logBoot(t *testing.T, r vmrun.Result) {
	t.Helper()
	t.Logf("booted in %v, powered off after %v; %s", r.BootTime.Round(time.Millisecond), r.Total.Round(time.Millisecond), r.Wrote)
}

// checkFirstBoot checks that a boot found no earlier boot's marker and
// wrote its data.
func checkFirstBoot(t *testing.T, r vmrun.Result, writeMB int) {
	t.Helper()
	if r.Marker != "" {
		t.Errorf("a first boot found an earlier boot's marker %q", r.Marker)
	}
	if want := "USHER-WROTE " + strconv.Itoa(writeMB) + " MiB"; r.Wrote != want {
		t.Errorf("the workload's writes: %q, want %q", r.Wrote, want)
	}
}
