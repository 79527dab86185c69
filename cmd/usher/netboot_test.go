package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vmrun"
	"github.com/usher-vdi/usher/internal/vmrun/vmruntest"
)

// netbootMAC is the MAC QEMU gives the first network card of a VM that
// names none: the target's in TestNetBoot.
const netbootMAC = "52:54:00:12:34:56"

// postBasic posts a JSON body with an admin's basic credentials.
func postBasic(t *testing.T, url, user, password, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth(user, password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestNetBoot boots a real Debian (internal/vmrun) from the network as
// PVS boots a target, and updates its image as PVS does. QEMU's iPXE ROM
// fetches usher serve's chain script, then the target's script, the kernel
// and the initramfs of the image version its binding names (read out of
// the version's ext4 filesystem), and the initramfs mounts its root disk
// from usher stream over NBD (server-side write cache); the workload's
// marker comes on the serial console and the boots are in the boot log.
// The target, pinned to a maintenance version, boots it in private mode
// and writes to it (the stream's private layer); the version is promoted
// to production; the target, following production again, boots the new
// version in standard mode twice, and each boot finds the private boot's
// file there and not the first standard boot's: a standard boot's writes
// vanish at the next boot. Version 0's file never changes.
func TestNetBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("boots three VMs (a minute or two)")
	}
	// A boot test: it waits for a VM slot (internal/vmrun), not for the
	// package's other tests.
	t.Parallel()
	img := vmruntest.Image(t)
	dir := t.TempDir()
	store, sum := bootStore(t, img)
	mustImage(t, "version", "golden", "--note", "net boot maintenance", "--store", store)
	// Loopback, no certificates: --auth none opens the maintenance
	// version to any client.
	stream := startRoleAddrs(t, "stream", "--store", store, "--listen", "127.0.0.1:0", "--write-cache", filepath.Join(dir, "wc"),
		"--auth", "none", "--metrics-listen", "127.0.0.1:0", "--log-level", "warn")
	s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", filepath.Join(dir, "data"),
		"--boot-listen", "127.0.0.1:0", "--image-store", store, "--boot-stream", "nbd://"+vmrun.GuestAddr(stream.nbd),
		"--boot-append", strings.Join(vmrun.KernelArgs(nil, 1), " "))
	m := regexp.MustCompile(`boot server listening.* addr=(\S+)`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no boot listener in the log:\n%s", s.stderr.String())
	}
	bootURL := "http://" + vmrun.GuestAddr(m[1]) + "/boot/script.ipxe"
	target := fmt.Sprintf(`{"name":"nb-01","mac":%q,"image":"golden","version":1,"cache":"server-disk"}`, netbootMAC)
	if code, body := postBasic(t, s.url+"/api/v1/admin/targets", "admin", "demo-pass-1", target); code != 201 {
		t.Fatalf("create the target: %d %s", code, body)
	}

	first := vmruntest.Boot(t, vmrun.VMOptions{Name: "nb-private", BootURL: bootURL})
	if first.Marker != "" || first.Wrote != "USHER-WROTE 1 MiB" {
		t.Fatalf("private-mode boot: marker %q, writes %q; want no earlier marker and 1 MiB written\nserve's log:\n%s", first.Marker, first.Wrote, s.stderr.String())
	}
	p := layerCounters(t, stream.metrics, imageexport.LayerPrivate)
	t.Logf("private mode: %d writes (%d MiB) into version 1", p.writes, p.writeMiB)
	if p.writes == 0 {
		t.Error("no private-mode writes reached the version")
	}
	for range 2 { // maintenance -> test -> production
		if code, _, stderr := run(t, "", "image", "promote", "golden", "1", "--store", store); code != 0 {
			t.Fatalf("image promote: %d %s", code, stderr)
		}
	}
	req, _ := http.NewRequest("PUT", s.url+"/api/v1/admin/targets/nb-01", strings.NewReader(
		fmt.Sprintf(`{"mac":%q,"image":"golden","cache":"server-disk"}`, netbootMAC)))
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth("admin", "demo-pass-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("unpin the target: %d", resp.StatusCode)
	}

	// Production is version 1 now, with the private boot's marker; each
	// standard boot writes its own, which vanishes.
	var times []time.Duration
	for i := range 2 {
		r := vmruntest.Boot(t, vmrun.VMOptions{Name: "nb-production", BootURL: bootURL})
		if got, want := r.Marker, "boot="+first.BootID; got != want {
			t.Fatalf("standard boot %d of production found marker %q; want the private boot's %q (from the image)", i+1, got, want)
		}
		times = append(times, r.BootTime.Round(100*time.Millisecond))
	}
	if got := fileSum(t, filepath.Join(store, "golden", "v0.raw")); got != sum {
		t.Errorf("version 0 changed: digest %s, was %s", got, sum)
	}
	code, body := get(t, s.url+"/api/v1/admin/boots?target=nb-01", "admin", "demo-pass-1")
	var boots struct{ Items []site.BootRecord }
	if err := json.Unmarshal(body, &boots); code != 200 || err != nil || len(boots.Items) != 9 {
		t.Fatalf("boot log: %d %s", code, body)
	}
	var steps []string
	for _, r := range boots.Items {
		steps = append(steps, string(r.Step))
		if r.Image != "golden" || r.Version != 1 || r.MAC != netbootMAC || r.Cache != site.CacheServerDisk || r.Error != "" {
			t.Errorf("boot record %+v: want image golden version 1, the target's MAC, server-disk, no error", r)
		}
	}
	if got := strings.Join(steps, ","); got != "initrd,kernel,script,initrd,kernel,script,initrd,kernel,script" {
		t.Errorf("boot log steps (newest first) %s, want initrd,kernel,script three times", got)
	}
	t.Logf("private-mode boot in %v; the promoted version's standard-mode boots in %v",
		first.BootTime.Round(100*time.Millisecond), times)
}
