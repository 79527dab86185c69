package boothttp_test

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/usher-vdi/usher/internal/boot"
	"github.com/usher-vdi/usher/internal/boot/boothttp"
	"github.com/usher-vdi/usher/internal/boot/initramfs"
	"github.com/usher-vdi/usher/internal/site"
)

// TestDeviceCacheOverlay: a ram-overflow target's script attaches its
// root through the agent on its loopback, and its initramfs is the
// image's followed by the overlay (at a multiple of 4 bytes), whole or
// in ranges across the seam; a server-disk target's is the image's.
func TestDeviceCacheOverlay(t *testing.T) {
	overlay, err := initramfs.Overlay([]byte("agent bytes"), boot.DeviceListen)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	f, img := newFixtureWith(t, func(c *boothttp.Config) {
		c.Overlay = func() ([]byte, error) { calls.Add(1); return overlay, nil }
	})
	f.setTargets(site.Target{Name: "pc-01", MAC: "52:54:00:00:01:03", Image: "kiosk", Cache: site.CacheRAMOverflow, RAM: "64MiB"},
		site.Target{Name: "kiosk-01", MAC: "52:54:00:00:01:01", Image: "kiosk", Cache: site.CacheServerDisk})

	status, script := f.get("/boot/ipxe?mac=52:54:00:00:01:03")
	if status != 200 || !strings.Contains(script, "nbdroot="+boot.DeviceListen+"/kiosk@0 ") ||
		!strings.Contains(script, "usher.upstream=10.0.2.2:10809/kiosk@0 ") {
		t.Fatalf("script: %d\n%s", status, script)
	}
	want := append(append(append([]byte{}, img.Initrd...), make([]byte, initramfs.Pad(len(img.Initrd)))...), overlay...)
	status, body := f.get("/boot/t/52-54-00-00-01-03/0/initrd")
	if status != 200 || body != string(want) {
		t.Fatalf("initrd: %d, %d bytes; want %d (the image's %d and the overlay's %d)", status, len(body), len(want), len(img.Initrd), len(overlay))
	}
	if _, n, err := initramfs.Read([]byte(body[len(body)-len(overlay):])); err != nil || n != len(overlay) {
		t.Errorf("the overlay at the end does not read: %v", err)
	}
	seam := len(img.Initrd) - 3
	req, _ := http.NewRequest("GET", f.srv.URL+"/boot/t/52-54-00-00-01-03/0/initrd", nil)
	req.Header.Set("Range", "bytes="+strconv.Itoa(seam)+"-"+strconv.Itoa(seam+99))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(part, want[seam:seam+100]) {
		t.Errorf("a range across the seam: %d, %d bytes, equal %v", resp.StatusCode, len(part), bytes.Equal(part, want[seam:seam+100]))
	}
	if _, body := f.get("/boot/t/52-54-00-00-01-01/0/initrd"); body != string(img.Initrd) {
		t.Errorf("a server-disk target's initrd: %d bytes, want the image's %d", len(body), len(img.Initrd))
	}
	if calls.Load() != 2 {
		t.Errorf("Overlay called %d times, want once per device-cache initrd", calls.Load())
	}
}

// TestDeviceCacheRefusedWithoutAgent: with no agent, a ram target's
// script and files are refused with the answer every MAC not served
// gets, saying why in the log and the boot log; a server-disk target
// boots.
func TestDeviceCacheRefusedWithoutAgent(t *testing.T) {
	f, _ := newFixtureWith(t, func(c *boothttp.Config) { c.Script.NoAgent = "usher serve is not statically linked" })
	f.setTargets(site.Target{Name: "pc-01", MAC: "52:54:00:00:01:03", Image: "kiosk", Cache: site.CacheRAM},
		site.Target{Name: "kiosk-01", MAC: "52:54:00:00:01:01", Image: "kiosk", Cache: site.CacheServerDisk})
	for _, path := range []string{"/boot/ipxe?mac=52:54:00:00:01:03", "/boot/t/52-54-00-00-01-03/0/initrd"} {
		status, body := f.get(path)
		if status != 404 || body != boot.RefusalScript(boothttp.NotServed) {
			t.Errorf("%s: %d\n%s", path, status, body)
		}
	}
	if !strings.Contains(f.logged(), "boot refused") || !strings.Contains(f.logged(), "target=pc-01") ||
		!strings.Contains(f.logged(), "usher serve is not statically linked") {
		t.Errorf("log:\n%s", f.logged())
	}
	recs := f.boots("pc-01")
	if len(recs) != 2 || !strings.Contains(recs[0].Error, "boot agent") {
		t.Errorf("boot log: %+v", recs)
	}
	if status, _ := f.get("/boot/ipxe?mac=52:54:00:00:01:01"); status != 200 {
		t.Errorf("a server-disk target: %d", status)
	}
}
