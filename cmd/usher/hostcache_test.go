package main

import (
	"bufio"
	"fmt"
	"github.com/usher-vdi/usher/internal/block/blocktest"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block/hostexport"
)

// blockOps reads usher_block_ops_total{layer,op} from a metrics endpoint.
func blockOps(t *testing.T, addr, layer, op string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	want := `usher_block_ops_total{layer="` + layer + `",op="` + op + `"} `
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

// TestHostcache: two VMs of one host read an image streamed by usher
// stream through usher hostcache, checked by qemu's tools: the bytes are
// the image's; the second VM's reads cost the stream nothing; a VM's
// writes stay in its overlay and are gone at its next connection; after
// a restart the cache serves the image without the stream; a second
// daemon on the directory is refused.
func TestHostcache(t *testing.T) {
	needTool(t, "qemu-img", "qemu-utils")
	needTool(t, "qemu-io", "qemu-utils")
	dir := t.TempDir()
	raw := filepath.Join(dir, "base.raw")
	img := make([]byte, 4<<20)
	for i := range img {
		img[i] = byte(i*7 + i/4096)
	}
	if err := os.WriteFile(raw, img, 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "store")
	if code, out, stderr := run(t, "", "image", "import", "golden", raw, "--store", store); code != 0 {
		t.Fatalf("image import: exit %d\n%s%s", code, out, stderr)
	}
	addr := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0", "--write-cache", filepath.Join(dir, "wc"))
	cacheDir := filepath.Join(dir, "host")
	sock := filepath.Join(dir, "hc.sock")
	args := []string{"hostcache", "--upstream", "nbd://" + addr, "--dir", cacheDir, "--size", "64MiB",
		"--vm", "vm1=golden", "--vm", "vm2=golden", "--listen", "unix:" + sock, "--metrics-listen", "127.0.0.1:0", "--log-level", "error"}
	metrics, stop, _ := startRoleStop(t, "metrics", args...)
	vm := func(name string) string { return "nbd+unix:///" + name + "?socket=" + sock }

	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", vm("vm1"), raw)
	first := blockOps(t, metrics, hostexport.LayerUpstream, "read")
	if first == 0 {
		t.Fatal("no reads from the stream")
	}
	t.Logf("the first VM's boot: %d reads from the stream", first)
	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", vm("vm2"), raw)
	if got := blockOps(t, metrics, hostexport.LayerUpstream, "read"); got != first {
		t.Errorf("the second VM's reads cost the stream %d reads; want none", got-first)
	}
	out := runTool(t, "qemu-io", "-f", "raw", vm("vm1"), "-c", "write -P 0x5a 1M 64k", "-c", "read -P 0x5a 1M 64k")
	if strings.Contains(out, "Pattern verification failed") {
		t.Fatalf("a VM's write: %s", out)
	}
	// A new connection is a new boot: the write is gone.
	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", vm("vm1"), raw)
	if code, _, stderr := run(t, "", args...); code == 0 || !strings.Contains(stderr, "in use by another process") {
		t.Errorf("a second daemon on the directory: exit %d, %q; want it refused", code, stderr)
	}
	stop()

	metrics, _, _ = startRoleStop(t, "metrics", args...)
	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", vm("vm2"), raw)
	// Reaching the image samples 16 blocks of it; the image itself comes
	// from the cache.
	got := blockOps(t, metrics, hostexport.LayerUpstream, "read")
	t.Logf("after the restart: %d reads from the stream", got)
	if got > 16 {
		t.Errorf("after a restart, %d reads from the stream; want the cache to serve the image", got)
	}
	if code, _, stderr := run(t, "", "hostcache", "--upstream", "nbd://"+addr+"/golden", "--dir", cacheDir, "--vm", "a=b"); code != 2 || !strings.Contains(stderr, "without an export") {
		t.Errorf("--upstream with an export: exit %d, %q", code, stderr)
	}
}

// TestHostcacheWarm: one host records a VM's boot; another host's cache,
// warmed with that trace by usher hostcache warm, boots the VM without
// reading the stream.
func TestHostcacheWarm(t *testing.T) {
	needTool(t, "qemu-img", "qemu-utils")
	dir := t.TempDir()
	raw := filepath.Join(dir, "base.raw")
	img := make([]byte, 4<<20)
	for i := range img {
		img[i] = byte(i*13 + i/65536)
	}
	if err := os.WriteFile(raw, img, 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "store")
	if code, out, stderr := run(t, "", "image", "import", "golden", raw, "--store", store); code != 0 {
		t.Fatalf("image import: exit %d\n%s%s", code, out, stderr)
	}
	addr := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0")
	host := func(name string, extra ...string) (sock, metrics string) {
		sock = filepath.Join(dir, name+".sock")
		args := append([]string{"hostcache", "--upstream", "nbd://" + addr, "--dir", filepath.Join(dir, name), "--size", "64MiB",
			"--vm", "vm1=golden", "--listen", "unix:" + sock, "--metrics-listen", "127.0.0.1:0", "--log-level", "error"}, extra...)
		metrics = startRole(t, "metrics", args...)
		return sock, metrics
	}
	traces := filepath.Join(dir, "traces")
	sock1, _ := host("h1", "--record-boots", traces)
	// A boot that reads the first and the last MiB.
	out := runTool(t, "qemu-io", "-f", "raw", "-r", "nbd+unix:///vm1?socket="+sock1, "-c", "read 0 1M", "-c", "read 3M 1M")
	if strings.Contains(out, "error") {
		t.Fatal(out)
	}
	trace := filepath.Join(traces, "vm1.trace")
	if _, err := os.Stat(trace); err != nil {
		t.Fatal(err)
	}

	sock2, metrics2 := host("h2")
	code, stdout, stderr := run(t, "", "hostcache", "warm", "golden", "--trace", trace, "--connect", "unix:"+sock2, "--rate", "0")
	if code != 0 || !strings.Contains(stdout, "warmed golden: 2.0 MiB") {
		t.Fatalf("warm: exit %d\n%s%s", code, stdout, stderr)
	}
	warmed := blockOps(t, metrics2, hostexport.LayerUpstream, "read")
	runTool(t, "qemu-io", "-f", "raw", "-r", "nbd+unix:///vm1?socket="+sock2, "-c", "read -P 0 0 0", "-c", "read 0 1M", "-c", "read 3M 1M")
	if got := blockOps(t, metrics2, hostexport.LayerUpstream, "read"); got != warmed {
		t.Fatalf("a boot after warming read %d blocks from the stream", got-warmed)
	}
	if code, _, stderr := run(t, "", "hostcache", "warm", "golden", "--trace", raw, "--connect", "unix:"+sock2); code == 0 || !strings.Contains(stderr, "line 1") {
		t.Fatalf("a trace that is not one: exit %d, %q", code, stderr)
	}
}

func TestParseTrace(t *testing.T) {
	rs, err := parseTrace(strings.NewReader("# boot\n4096 4096\n0 4096\n\n100000 10 # late\n8192 100\n"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rs) != "[[0 8292] [100000 10]]" {
		t.Fatalf("%v", rs)
	}
	for _, bad := range []string{"1", "a b", "0 0", "-1 5", "1048576 1", "1048000 1000", "0 1 2"} {
		if _, err := parseTrace(strings.NewReader(bad), 1<<20); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

func FuzzParseTrace(f *testing.F) {
	f.Add("0 4096\n8192 512 # x\n")
	f.Add("# only\n")
	f.Fuzz(func(t *testing.T, s string) {
		const size = 1 << 20
		rs, err := parseTrace(strings.NewReader(s), size)
		if err != nil {
			return
		}
		end := int64(-1)
		for _, r := range rs {
			if r[0] <= end || r[1] <= 0 || r[0]+r[1] > size {
				t.Fatalf("ranges %v are not sorted, disjoint and within the image", rs)
			}
			end = r[0] + r[1]
		}
	})
}

// TestHostcacheKilledMidFill: the daemon, in a process of its own, is
// killed (SIGKILL) while a cold fill runs; started again on the same
// directory, it serves the image byte for byte, keeping blocks it had
// committed; and a usher target in front of it serves it too.
func TestHostcacheKilledMidFill(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a daemon")
	}
	needTool(t, "qemu-img", "qemu-utils")
	dir := t.TempDir()
	raw := filepath.Join(dir, "base.raw")
	img := make([]byte, 32<<20)
	for i := range img {
		img[i] = byte(i*29 + i/65536)
	}
	if err := os.WriteFile(raw, img, 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "store")
	if code, out, stderr := run(t, "", "image", "import", "golden", raw, "--store", store); code != 0 {
		t.Fatalf("image import: exit %d\n%s%s", code, out, stderr)
	}
	addr := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0")
	sock := filepath.Join(dir, "hc.sock")
	metrics := "127.0.0.1:" + freePort(t)
	daemon := func() *exec.Cmd {
		os.Remove(sock)
		args := append(append([]string{}, testSelf[1:]...), "hostcache", "--upstream", "nbd://"+addr, "--dir", filepath.Join(dir, "host"),
			"--size", "64MiB", "--vm", "vm1=golden", "--listen", "unix:"+sock, "--metrics-listen", metrics, "--log-level", "error")
		cmd := exec.Command(testSelf[0], args...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if c, err := net.Dial("unix", sock); err == nil {
				c.Close()
				return cmd
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("the host cache did not start")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	d := daemon()
	// A paced cold fill, killed a third of the way.
	fill := make(chan int, 1)
	go func() {
		code, _, _ := run(t, "", "hostcache", "warm", "golden", "--connect", "unix:"+sock, "--rate", "32MiB", "--chunk", "256KiB")
		fill <- code
	}()
	deadline := time.Now().Add(30 * time.Second)
	for blockOps(t, metrics, hostexport.LayerUpstream, "read") < 150 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	d.Process.Signal(syscall.SIGKILL)
	d.Wait()
	if code := <-fill; code == 0 {
		t.Fatal("the fill finished before the kill")
	}

	d = daemon()
	defer func() { d.Process.Kill(); d.Wait() }()
	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", "nbd+unix:///vm1?socket="+sock, raw)
	recovered := metricValue(t, metrics, "usher_hostcache_recovered_blocks")
	fetched := blockOps(t, metrics, hostexport.LayerUpstream, "read")
	t.Logf("after the kill: %v blocks recovered, %d fetched to complete the image", recovered, fetched)
	if recovered < 100 || fetched > 512-100 {
		t.Fatalf("%v blocks recovered, %d fetched: the cache kept too little across the kill", recovered, fetched)
	}

	// stream → hostcache → usher target → qemu-img.
	tsock := filepath.Join(dir, "target.sock")
	startRole(t, "nbd", "target", "--upstream", "nbd+unix:///vm1?socket="+sock, "--cache", "ram", "--listen", "unix:"+tsock, "--log-level", "error")
	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", "nbd+unix:///?socket="+tsock, raw)
}

// metricValue reads an unlabelled metric from a metrics endpoint.
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s at %s", name, addr)
	return 0
}

// TestHostcacheOverTLS: against a stream that demands TLS and a client
// certificate for every export, the host cache reaches it with nbds://
// and its certificate, digests included; without the certificate it
// refuses to start, saying why.
func TestHostcacheOverTLS(t *testing.T) {
	needTool(t, "qemu-img", "qemu-utils")
	dir := t.TempDir()
	certs := blocktest.WriteCerts(t)
	img := make([]byte, 2<<20)
	for i := range img {
		img[i] = byte(i * 31)
	}
	store, raw := importImage(t, dir, "golden", img)
	pem := func(name string) string { return filepath.Join(certs.Dir, name) }
	addr := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0", "--tls", "require", "--auth", "all",
		"--tls-cert", pem("server-cert.pem"), "--tls-key", pem("server-key.pem"), "--tls-client-ca", pem("ca-cert.pem"))
	sock := filepath.Join(dir, "hc.sock")
	args := []string{"hostcache", "--upstream", "nbds://" + addr, "--tls-ca", pem("ca-cert.pem"), "--tls-server-name", "localhost",
		"--dir", filepath.Join(dir, "host"), "--size", "16MiB", "--vm", "vm1=golden", "--listen", "unix:" + sock, "--log-level", "error"}
	if code, _, stderr := run(t, "", args...); code == 0 || !strings.Contains(stderr, "authentication") {
		t.Fatalf("without a client certificate: exit %d, %q", code, stderr)
	}
	startRole(t, "nbd", append(args, "--tls-cert", pem("client-cert.pem"), "--tls-key", pem("client-key.pem"))...)
	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", "nbd+unix:///vm1?socket="+sock, raw)
}
