package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/block/nbd"
	usherboot "github.com/usher-vdi/usher/internal/boot"
	"github.com/usher-vdi/usher/internal/boot/boothttp"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vmrun"
	"github.com/usher-vdi/usher/internal/vmrun/vmruntest"
)

// TestNetBootDeviceCache boots the boot tests' Debian from the network
// with its write cache on the machine itself, as PVS's "cache in device
// RAM" and "cache in device RAM with overflow on hard disk" do: QEMU's
// iPXE fetches usher serve's script, kernel and initramfs, which is the
// image's followed by usher's overlay (a statically linked usher built
// from this code, --boot-agent); the overlay's init-premount script
// starts usher target in the guest, in front of usher stream, and the
// guest's root disk is attached through it. One target keeps its writes
// in a RAM budget that holds them; the other's budget does not, and its
// writes overflow to a second virtio disk (usher.overflow=/dev/vda). The
// stream receives no write, the image does not change, the overflow
// disk does.
func TestNetBootDeviceCache(t *testing.T) {
	if testing.Short() {
		t.Skip("boots two VMs (a minute or two)")
	}
	// A boot test: it waits for a VM slot (internal/vmrun), not for the
	// package's other tests.
	t.Parallel()
	img := vmruntest.Image(t)
	staticBuilds.Lock() // beside TestBuildScript's, not at once (the same packages)
	agent := vmruntest.Agent(t)
	staticBuilds.Unlock()
	store, sum := bootStore(t, img)
	dir := t.TempDir()
	stream := startRoleAddrs(t, "stream", "--store", store, "--listen", "127.0.0.1:0", "--write-cache", filepath.Join(dir, "wc"),
		"--metrics-listen", "127.0.0.1:0", "--log-level", "warn")
	const writeMB = 48
	s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", filepath.Join(dir, "data"),
		"--boot-listen", "127.0.0.1:0", "--image-store", store, "--boot-stream", "nbd://"+vmrun.GuestAddr(stream.nbd),
		"--boot-agent", agent, "--boot-append", strings.Join(append(vmrun.KernelArgs(nil, writeMB), "usher.overflow=/dev/vda"), " "))
	m := regexp.MustCompile(`boot server listening.* addr=(\S+)`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no boot listener in the log:\n%s", s.stderr.String())
	}
	bootURL := "http://" + vmrun.GuestAddr(m[1]) + "/boot/script.ipxe"
	if !strings.Contains(s.stderr.String(), "boot agent: ram and ram-overflow targets run it") {
		t.Errorf("serve does not log its boot agent:\n%s", s.stderr.String())
	}

	for _, tc := range []struct {
		name, mac string
		cache     site.CacheMode
		ram       string
		overflow  bool // the budget does not hold the writes
	}{
		{"dev-ram", "52:54:00:00:02:01", site.CacheRAM, "128MiB", false},
		{"dev-overflow", "52:54:00:00:02:02", site.CacheRAMOverflow, "16MiB", true},
	} {
		t.Run(string(tc.cache), func(t *testing.T) {
			target := fmt.Sprintf(`{"name":%q,"mac":%q,"image":"golden","cache":%q,"ram":%q}`, tc.name, tc.mac, tc.cache, tc.ram)
			if code, body := postBasic(t, s.url+"/api/v1/admin/targets", "admin", "demo-pass-1", target); code != 201 {
				t.Fatalf("create the target: %d %s", code, body)
			}
			// The local disk: blank, as a machine's overflow disk is to
			// the cache (whatever it held is overwritten).
			disk := filepath.Join(t.TempDir(), "local-disk.raw")
			if err := os.WriteFile(disk, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(disk, 256<<20); err != nil {
				t.Fatal(err)
			}
			before := streamWrites(t, stream.metrics)
			r := vmruntest.Boot(t, vmrun.VMOptions{Name: tc.name, BootURL: bootURL, MAC: tc.mac, ExtraDisk: disk, MemoryMB: 768})
			logBoot(t, r)
			checkFirstBoot(t, r, writeMB)
			if !strings.Contains(r.Serial, "usher: device-side write cache: "+string(tc.cache)) {
				t.Errorf("the initramfs did not start the device's cache:\n%s", r.Serial)
			}
			if got := streamWrites(t, stream.metrics) - before; got != 0 {
				t.Errorf("the stream received %d writes; want none, the device keeps them", got)
			}
			used := nonZeroMiB(t, disk)
			t.Logf("%s (%s RAM): the overflow disk holds %d MiB of the guest's %d MiB", tc.cache, tc.ram, used, writeMB)
			if tc.overflow && used < writeMB/2 {
				t.Errorf("the overflow disk holds %d MiB; want most of the %d MiB past the %s budget", used, writeMB, tc.ram)
			}
			if !tc.overflow && used != 0 {
				t.Errorf("the disk holds %d MiB; a RAM cache leaves it alone", used)
			}
			code, body := get(t, s.url+"/api/v1/admin/boots?target="+tc.name, "admin", "demo-pass-1")
			var boots struct{ Items []site.BootRecord }
			if err := json.Unmarshal(body, &boots); code != 200 || err != nil || len(boots.Items) != 3 {
				t.Fatalf("boot log: %d %s", code, body)
			}
			for _, b := range boots.Items {
				if b.Cache != tc.cache || b.Error != "" {
					t.Errorf("boot record %+v", b)
				}
			}
		})
	}
	if got := fileSum(t, filepath.Join(store, "golden", "v0.raw")); got != sum {
		t.Errorf("the image's version 0 changed under the boots: digest %s, was %s", got, sum)
	}
}

// TestNetBootDeviceCacheRefused: with no boot agent (--boot-agent none),
// a ram-overflow target's script is refused with the answer every MAC
// not served gets, saying why in serve's log and the boot log; its
// server-disk neighbour boots.
func TestNetBootDeviceCacheRefused(t *testing.T) {
	dir := t.TempDir()
	// The demo's kiosk-02 is ram-overflow, pinned to version 1: an image
	// with a version 1 past maintenance (which would boot in private
	// mode, with no write cache) makes its binding resolve.
	images := filepath.Join(dir, "images")
	ext := filepath.Join(dir, "disk")
	if err := os.WriteFile(ext, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	mustImage(t, "import", "kiosk", ext, "--store", images)
	mustImage(t, "version", "kiosk", "--store", images)
	mustImage(t, "promote", "kiosk", "1", "--store", images)
	s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", filepath.Join(dir, "data"),
		"--boot-listen", "127.0.0.1:0", "--image-store", images, "--boot-stream", "nbd://10.0.2.2:10809",
		"--boot-agent", "none")
	m := regexp.MustCompile(`boot server listening.* addr=(\S+)`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no boot listener in the log:\n%s", s.stderr.String())
	}
	if !strings.Contains(s.stderr.String(), "no boot agent: ram and ram-overflow targets are refused") {
		t.Errorf("serve does not say that it refuses device caches:\n%s", s.stderr.String())
	}
	code, body := get(t, "http://"+m[1]+"/boot/ipxe?mac=52:54:00:00:01:02", "", "")
	want := "target kiosk-02: cache ram-overflow keeps its writes on the device, which needs the boot agent of usher serve"
	if code != 404 || string(body) != usherboot.RefusalScript(boothttp.NotServed) {
		t.Fatalf("kiosk-02's script: %d\n%s", code, body)
	}
	if !strings.Contains(s.stderr.String(), "boot refused") || !strings.Contains(s.stderr.String(), want) {
		t.Errorf("serve's log lacks the refusal:\n%s", s.stderr.String())
	}
	code, body = get(t, s.url+"/api/v1/admin/boots?target=kiosk-02", "admin", "demo-pass-1")
	var boots struct{ Items []site.BootRecord }
	if err := json.Unmarshal(body, &boots); code != 200 || err != nil || len(boots.Items) != 1 ||
		boots.Items[0].Step != site.BootScript || !strings.Contains(boots.Items[0].Error, want) {
		t.Fatalf("boot log: %d %s", code, body)
	}
	if code, body := get(t, "http://"+m[1]+"/boot/ipxe?mac=52:54:00:00:01:01", "", ""); code != 200 || !strings.Contains(string(body), "nbdroot=10.0.2.2:10809/kiosk@0") {
		t.Errorf("kiosk-01 (server-disk): %d\n%s", code, body)
	}
}

// TestServeBootAgentFlag: an agent that needs a dynamic loader, or
// that is no executable, stops usher serve at its start, saying why.
func TestServeBootAgentFlag(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "agent.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for agent, want := range map[string]string{"/bin/sh": "not statically linked", script: "not an ELF executable"} {
		if _, err := os.Stat(agent); err != nil {
			continue
		}
		code, _, stderr := run(t, "", "serve", "--data", t.TempDir(), "--boot-listen", "127.0.0.1:0", "--image-store", filepath.Join(dir, "images"),
			"--boot-stream", "nbd://10.0.2.2:10809", "--boot-agent", agent)
		if code == 0 || !strings.Contains(stderr, want) {
			t.Errorf("--boot-agent %s: exit %d, %s; want %q", agent, code, stderr, want)
		}
	}
	if code, _, stderr := run(t, "", "serve", "--data", t.TempDir(), "--boot-agent", "none"); code != 2 || !strings.Contains(stderr, "--boot-agent") {
		t.Errorf("--boot-agent without --boot-listen: exit %d, %s", code, stderr)
	}
}

// streamWrites sums the write operations of every layer on a metrics
// endpoint.
func streamWrites(t *testing.T, addr string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var n int64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "usher_block_ops_total{") && strings.Contains(line, `op="write"`) {
			f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			n += int64(f)
		}
	}
	return n
}

// nonZeroMiB returns how many MiB of a file hold anything but zeros.
func nonZeroMiB(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf, zero := make([]byte, 4096), make([]byte, 4096)
	var blocks int64
	for {
		_, err := io.ReadFull(f, buf)
		if err == io.EOF {
			break
		}
		if err != nil && err != io.ErrUnexpectedEOF {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, zero) {
			blocks++
		}
	}
	return blocks * 4096 >> 20
}

// TestTargetForTheInitramfs: what the initramfs needs of usher target.
// It writes --ready once it serves (the listener's address), serves its
// cache under the upstream's export name as well as the default one
// (nbd-client's nbdroot= needs a name), and takes a block device as its
// overflow without removing it at exit.
func TestTargetForTheInitramfs(t *testing.T) {
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(disk, bytes.Repeat([]byte{7}, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "store")
	mustImage(t, "import", "golden", disk, "--store", store)
	stream := startRoleAddrs(t, "stream", "--store", store, "--listen", "127.0.0.1:0", "--write-cache", filepath.Join(dir, "wc"))
	ready := filepath.Join(dir, "run", "ready")
	if err := os.MkdirAll(filepath.Dir(ready), 0o755); err != nil {
		t.Fatal(err)
	}
	target := startRoleAddrs(t, "target", "--upstream", "nbd://"+stream.nbd+"/golden@0", "--cache", "ram", "--ram", "8MiB",
		"--listen", "127.0.0.1:0", "--ready", ready)
	b, err := os.ReadFile(ready)
	if err != nil || strings.TrimSpace(string(b)) != target.nbd {
		t.Fatalf("the ready file: %q (%v); want the address %s", b, err, target.nbd)
	}
	for _, export := range []string{"golden@0", ""} {
		c, err := (&nbd.Dialer{}).DialURI(t.Context(), "nbd://"+target.nbd+"/"+export)
		if err != nil {
			t.Fatalf("export %q: %v", export, err)
		}
		if c.Size() != 4<<20 {
			t.Errorf("export %q: %d bytes", export, c.Size())
		}
		c.Close()
	}
	target.stop()

	// A loop device stands in for the machine's local disk.
	losetup, err := exec.LookPath("losetup")
	if os.Geteuid() != 0 || err != nil {
		t.Log("no loop device (needs root and losetup): the block-device overflow is not tried")
		return
	}
	backing := filepath.Join(dir, "local-disk")
	if err := os.WriteFile(backing, make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(losetup, "--find", "--show", backing).CombinedOutput()
	if err != nil {
		t.Logf("no loop device here (%v %s): the block-device overflow is not tried", err, out)
		return
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command(losetup, "--detach", dev).Run() })
	target = startRoleAddrs(t, "target", "--upstream", "nbd://"+stream.nbd+"/golden@0", "--cache", "ram-overflow", "--ram", "1MiB",
		"--overflow", dev, "--listen", "127.0.0.1:0")
	target.stop()
	if _, err := os.Stat(dev); err != nil {
		t.Errorf("the overflow device %s is gone after usher target: %v", dev, err)
	}
}
