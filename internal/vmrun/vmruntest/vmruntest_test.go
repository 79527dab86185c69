package vmruntest_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/writecache"
	"github.com/usher-vdi/usher/internal/vmrun"
	"github.com/usher-vdi/usher/internal/vmrun/vmruntest"
)

// TestBootLocalDisk boots the image from its file (a snapshot, so twice
// is two first boots) and checks the workload's lines: the baseline that
// boots through usher are compared with.
func TestBootLocalDisk(t *testing.T) {
	img := vmruntest.Image(t)
	r := vmruntest.Boot(t, vmrun.VMOptions{Name: "local", Image: img, Disk: img.Disk, Snapshot: true, WriteMB: 4})
	t.Logf("boot from a local file: booted in %v, powered off after %v; %s", r.BootTime.Round(time.Millisecond), r.Total.Round(time.Millisecond), r.Wrote)
	if r.Marker != "" || r.BootID == "" {
		t.Errorf("the first boot of the image found a marker:\n%s", r.Serial)
	}
	if r.Wrote != "USHER-WROTE 4 MiB" {
		t.Errorf("the workload's writes: %q", r.Wrote)
	}
	if r.BootTime <= 0 || r.BootTime > r.Total {
		t.Errorf("boot time %v, total %v", r.BootTime, r.Total)
	}
}

// TestVMExitsEarly: a VM that cannot boot (no such disk) ends WaitFor with
// QEMU's complaint, not a hang.
func TestVMExitsEarly(t *testing.T) {
	img := vmruntest.Image(t)
	v := vmruntest.Start(t, vmrun.VMOptions{Name: "broken", Image: img, Disk: t.TempDir() + "/missing.raw"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := v.WaitFor(ctx, vmrun.MarkerBooted)
	if err == nil || !strings.Contains(err.Error(), "missing.raw") {
		t.Fatalf("WaitFor on a VM without its disk: %v; want QEMU's error naming the disk", err)
	}
}

// TestNetworkBoot boots a diskless VM as a network-booted target does:
// QEMU's iPXE fetches a script over HTTP, then the image's kernel and
// initramfs, and the initramfs attaches the root over NBD (nbdroot=). The
// servers are the test's own (net/http, and internal/block/nbd over a RAM
// write cache on the image file), on loopback, reached from the guest at
// vmrun.HostAddr.
func TestNetworkBoot(t *testing.T) {
	img := vmruntest.Image(t)
	file, err := block.OpenFile(img.Disk, true)
	if err != nil {
		t.Fatal(err)
	}
	root := writecache.NewRAM(file, writecache.RAMOptions{Budget: 256 << 20})
	defer root.Close()
	nln, err := nbd.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &nbd.Server{Exports: nbd.Devices{"golden": root}}
	go srv.Serve(nln)
	defer srv.Close()

	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + vmrun.GuestAddr(hln.Addr().String())
	args := vmrun.KernelArgs(vmrun.NBDRootArgs(vmrun.GuestAddr(nln.Addr().String())+"/golden"), 2)
	script := "#!ipxe\nkernel " + base + "/vmlinuz " + strings.Join(args, " ") + "\ninitrd " + base + "/initrd.img\nboot\n"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boot.ipxe", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, script) })
	mux.HandleFunc("GET /vmlinuz", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, img.Kernel) })
	mux.HandleFunc("GET /initrd.img", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, img.Initrd) })
	hs := &http.Server{Handler: mux}
	go hs.Serve(hln)
	defer hs.Close()

	r := vmruntest.Boot(t, vmrun.VMOptions{Name: "netboot", BootURL: base + "/boot.ipxe"})
	t.Logf("network boot (iPXE, HTTP, nbdroot): booted in %v, powered off after %v; %s", r.BootTime.Round(time.Millisecond), r.Total.Round(time.Millisecond), r.Wrote)
	if r.Marker != "" || r.Wrote != "USHER-WROTE 2 MiB" {
		t.Errorf("marker %q, writes %q", r.Marker, r.Wrote)
	}
}
