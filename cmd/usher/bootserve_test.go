package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	usherboot "github.com/usher-vdi/usher/internal/boot"
	"github.com/usher-vdi/usher/internal/boot/boothttp"
	"github.com/usher-vdi/usher/internal/boot/ext4boot/ext4test"
	"github.com/usher-vdi/usher/internal/site"
)

// TestServeBoot runs usher serve --boot-listen over an image store with
// the demo site's image "kiosk" (a small ext4 disk with a kernel and an
// initramfs in /boot): the demo's kiosk-01 gets its script, kernel and
// initramfs, recorded in the boot log and counted; kiosk-02, pinned to
// a version the image lacks, and an unknown MAC are refused, named in
// the log.
func TestServeBoot(t *testing.T) {
	dir := t.TempDir()
	img := ext4test.Build(t, filepath.Join(dir, "disk"), ext4test.Layout{})
	store := filepath.Join(dir, "images")
	if code, _, stderr := run(t, "", "image", "import", "kiosk", img.Path, "--store", store); code != 0 {
		t.Fatalf("image import: %d %s", code, stderr)
	}
	if code, stdout, stderr := run(t, "", "image", "inspect", "kiosk", "0", "--store", store); code != 0 ||
		!strings.Contains(stdout, "boot/vmlinuz-6.1.0-x") || !strings.Contains(stdout, "boot/initrd.img-6.1.0-x") {
		t.Fatalf("image inspect: %d\n%s%s", code, stdout, stderr)
	}
	s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", filepath.Join(dir, "data"),
		"--boot-listen", "127.0.0.1:0", "--image-store", store, "--boot-stream", "nbd://10.0.2.2:10809", "--boot-append", "console=ttyS0")
	m := regexp.MustCompile(`boot server listening.* addr=(\S+)`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no boot listener in the log:\n%s", s.stderr.String())
	}
	boot := "http://" + m[1]
	if !strings.Contains(s.stdout.String(), boot+"/boot/script.ipxe") {
		t.Errorf("the banner does not show the boot server:\n%s", s.stdout.String())
	}

	code, body := get(t, boot+"/boot/ipxe?mac=52:54:00:00:01:01", "", "")
	if code != 200 || !strings.Contains(string(body), "nbdroot=10.0.2.2:10809/kiosk@0") || !strings.Contains(string(body), "console=ttyS0") {
		t.Fatalf("kiosk-01's script: %d\n%s", code, body)
	}
	// In the order a target asks, so that the boot log's newest is the initrd.
	for _, f := range []struct {
		path string
		want []byte
	}{{"/boot/t/52-54-00-00-01-01/0/kernel", img.Kernel}, {"/boot/t/52-54-00-00-01-01/0/initrd", img.Initrd}} {
		if code, body := get(t, boot+f.path, "", ""); code != 200 || string(body) != string(f.want) {
			t.Fatalf("%s: %d, %d bytes; want the %d bytes of the image's file", f.path, code, len(body), len(f.want))
		}
	}
	notServed := usherboot.RefusalScript(boothttp.NotServed)
	if code, body := get(t, boot+"/boot/ipxe?mac=52:54:00:00:01:02", "", ""); code != 404 || string(body) != notServed {
		t.Fatalf("kiosk-02 (pinned to a version the image lacks): %d %s", code, body)
	}
	if code, body := get(t, boot+"/boot/ipxe?mac=52:54:00:de:ad:01", "", ""); code != 404 || string(body) != notServed {
		t.Fatalf("unknown MAC: %d %s", code, body)
	}
	logs := s.stderr.String()
	for _, want := range []string{"boot refused: unknown MAC", "mac=52:54:00:de:ad:01", "target=kiosk-02"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q", want)
		}
	}

	code, body = get(t, s.url+"/api/v1/admin/boots?target=kiosk-01", "admin", "demo-pass-1")
	var boots struct{ Items []site.BootRecord }
	if err := json.Unmarshal(body, &boots); code != 200 || err != nil || len(boots.Items) != 3 || boots.Items[0].Step != site.BootInitrd {
		t.Fatalf("boot log of kiosk-01: %d %s", code, body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		text := metrics(t, s.url)
		if metricSum(text, "usher_boot_requests_total", `step="script"`, `outcome="served"`) == 1 &&
			metricSum(text, "usher_boot_requests_total", `step="script"`, `outcome="unknown_mac"`) == 1 &&
			metricSum(text, "usher_boot_requests_total", `step="script"`, `outcome="refused"`) == 1 &&
			metricSum(text, "usher_boot_requests_total", `step="initrd"`, `outcome="served"`) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics does not count the boot requests:\n%s", grepLines(text, "usher_boot"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServeBootFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--boot-listen", "127.0.0.1:0"},
		{"--image-store", "x"},
		{"--boot-listen", "0.0.0.0:0", "--image-store", "x", "--boot-stream", "nbd://10.0.2.2:10809"},
	} {
		code, _, stderr := run(t, "", append([]string{"serve", "--data", t.TempDir()}, args...)...)
		if code != 2 || !strings.Contains(stderr, "boot") {
			t.Errorf("serve %v: exit %d, %s", args, code, stderr)
		}
	}
}

func grepLines(text, sub string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
