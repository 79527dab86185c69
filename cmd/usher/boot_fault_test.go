package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/vmrun"
	"github.com/usher-vdi/usher/internal/vmrun/vmruntest"
)

// TestBootStreamRestart: the stream goes away under a target whose guest
// is booting, and comes back at the same address some seconds later. The
// target's reads wait for it (usher target --reconnect-wait) and it
// dials again: the guest boots to the end and sees no I/O error.
func TestBootStreamRestart(t *testing.T) {
	t.Parallel()
	img := vmruntest.Image(t)
	store, _ := bootStore(t, img)
	dir := t.TempDir()
	addr := "127.0.0.1:" + freePort(t) // the stream comes back at the same address
	streamArgs := []string{"stream", "--store", store, "--listen", addr, "--log-level", "warn"}
	stream := startRoleAddrs(t, streamArgs...)
	target := startRoleAddrs(t, "target", "--upstream", "nbd://"+addr+"/golden", "--cache", "ram", "--ram", "256MiB",
		"--listen", "unix:"+filepath.Join(dir, "target.sock"), "--metrics-listen", "127.0.0.1:0")

	// Down before the guest's first read of its disk, which waits; up
	// again a few seconds later.
	stream.stop()
	vm := vmruntest.Start(t, vmrun.VMOptions{Name: "restart", Image: img, Disk: "nbd+unix:///?socket=" + target.nbd, WriteMB: 4})
	for deadline := time.Now().Add(3 * time.Minute); blockOps(t, target.metrics, "upstream", "read") == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) || vm.Exited() {
			t.Fatal("the guest did not read its disk")
		}
	}
	time.Sleep(3 * time.Second) // time passing is the test: the stream stays down a while under the guest's waiting read
	startRoleAddrs(t, streamArgs...)
	r, err := vm.Result(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	logBoot(t, r)
	checkFirstBoot(t, r, 4)
	if strings.Contains(r.Serial, "I/O error") {
		t.Errorf("the guest saw I/O errors while the stream restarted:\n%s", r.Serial)
	}
	if errs := blockOps(t, target.metrics, "upstream", "error"); errs != 0 {
		t.Errorf("%d upstream reads failed", errs)
	}
	if log := target.log.String(); !strings.Contains(log, "upstream reconnected") {
		t.Errorf("the target's log does not say it reconnected:\n%s", log)
	}
}

// TestBootOverflowFull: a device-RAM write cache with a small overflow
// file that the guest's writes fill. The guest gets an I/O error for
// the writes that do not fit (its workload says USHER-WRITE-ERROR) and
// still shuts down; the target counts the refused writes, keeps serving,
// and the image is unchanged.
func TestBootOverflowFull(t *testing.T) {
	t.Parallel()
	img := vmruntest.Image(t)
	store, sum := bootStore(t, img)
	dir := t.TempDir()
	stream := startRoleAddrs(t, "stream", "--store", store, "--listen", "127.0.0.1:0", "--log-level", "warn")
	target := startRoleAddrs(t, "target", "--upstream", "nbd://"+stream.nbd+"/golden", "--cache", "ram-overflow",
		"--ram", "8MiB", "--overflow", filepath.Join(dir, "overflow.bin"), "--overflow-size", "16MiB",
		"--listen", "unix:"+filepath.Join(dir, "target.sock"), "--metrics-listen", "127.0.0.1:0", "--log-level", "error")
	r := vmruntest.Boot(t, vmrun.VMOptions{Name: "overflow-full", Image: img, Disk: "nbd+unix:///?socket=" + target.nbd, WriteMB: 64})
	logBoot(t, r)
	if !strings.HasPrefix(r.Wrote, vmrun.MarkerWriteError) {
		t.Errorf("the workload's writes past the cache's 24 MiB: %q; want %s", r.Wrote, vmrun.MarkerWriteError)
	}
	refused := metricValue(t, target.metrics, "usher_target_writes_refused_total")
	errs := blockOps(t, target.metrics, "writecache_ram", "error")
	of := layerCounters(t, target.metrics, "overflow")
	t.Logf("refused writes %v, write-cache errors %d, overflow %d writes (%d MiB)", refused, errs, of.writes, of.writeMiB)
	if refused == 0 || errs == 0 {
		t.Errorf("refused writes %v, write-cache errors %d; want them counted", refused, errs)
	}
	// The target still serves its device.
	if out := runTool(t, "qemu-io", "-f", "raw", "nbd+unix:///?socket="+target.nbd, "-c", "read 0 1M"); !strings.Contains(out, "read 1048576/1048576") {
		t.Errorf("a read through the full target: %s", out)
	}
	if got := fileSum(t, filepath.Join(store, "golden", "v0.raw")); got != sum {
		t.Errorf("version 0 changed: digest %s, was %s", got, sum)
	}
}
