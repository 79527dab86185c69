package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
	"github.com/usher-vdi/usher/internal/block/nbd"
)

// startRole runs a long-running usher command in-process and returns the
// address it reports for name ("nbd"), stopping it when the test ends.
func startRole(t *testing.T, name string, args ...string) string {
	t.Helper()
	addr, _, _ := startRoleStop(t, name, args...)
	return addr
}

// startRoleStop is startRole that also returns a function stopping the
// command early, and its standard error.
func startRoleStop(t *testing.T, name string, args ...string) (addr string, stop func(), stderr *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 4)
	stderr = &syncBuffer{}
	m := &Main{Stdin: strings.NewReader(""), Stdout: &syncBuffer{}, Stderr: stderr, Getenv: func(string) string { return "" },
		Listening: func(n, a string) {
			if n == name {
				addrs <- a
			}
		}}
	done := make(chan int, 1)
	go func() { done <- m.Run(ctx, args) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("usher %s did not stop", args[0])
			}
		})
	}
	t.Cleanup(stop)
	select {
	case a := <-addrs:
		return a, stop, stderr
	case code := <-done:
		t.Fatalf("usher %s exited with %d: %s", args[0], code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("usher %s did not listen", args[0])
	}
	return "", stop, stderr
}

func needTool(t *testing.T, tool, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("%s not installed (Debian package %s)", tool, pkg)
	}
}

func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestStreamAndTarget imports an image, streams it, and puts a device-side
// RAM-with-overflow write cache in front of it, checking with qemu's own
// tools that the image arrives intact and that the target's writes stay in
// its cache.
func TestStreamAndTarget(t *testing.T) {
	needTool(t, "qemu-img", "qemu-utils")
	needTool(t, "qemu-io", "qemu-utils")
	dir := t.TempDir()
	raw := filepath.Join(dir, "base.raw")
	img := bytes.Repeat([]byte("usher-image-0123"), 4<<20/16) // 4 MiB
	if err := os.WriteFile(raw, img, 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "store")
	if code, out, stderr := run(t, "", "image", "import", "golden", raw, "--store", store); code != 0 {
		t.Fatalf("image import: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, _ := run(t, "", "image", "list", "--store", store); code != 0 || !strings.Contains(out, "golden") {
		t.Fatalf("image list: exit %d\n%s", code, out)
	}

	addr := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0", "--write-cache", filepath.Join(dir, "wc"))
	uri := "nbd://" + addr + "/golden"
	if out := runTool(t, "qemu-img", "info", uri); !strings.Contains(out, "4 MiB") {
		t.Fatalf("qemu-img info: %s", out)
	}
	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", uri, raw)

	// The target makes the missing directories of its overflow file
	// (0700) and of its socket.
	sock := filepath.Join(dir, "run", "t.sock")
	overflowDir := filepath.Join(dir, "cache", "usher")
	startRole(t, "nbd", "target", "--upstream", uri, "--cache", "ram-overflow", "--ram", "1MiB",
		"--overflow", filepath.Join(overflowDir, "overflow.bin"), "--listen", "unix:"+sock)
	if fi, err := os.Stat(overflowDir); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Fatalf("overflow directory mode %v, want 0700", fi.Mode().Perm())
	}
	local := "nbd+unix:///?socket=" + sock
	out := runTool(t, "qemu-io", "-f", "raw", local,
		"-c", "read -P 0x75 0 1", // 'u', the image's first byte, through the cache
		"-c", "write -P 0x77 1M 2M", "-c", "read -P 0x77 1M 2M")
	if strings.Contains(out, "Pattern verification failed") {
		t.Fatalf("through the target: %s", out)
	}
	// The target's writes stayed in its cache: the stream still serves the image.
	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", uri, raw)

	// A target's errors say what is wrong once.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", "nbd://" + addr + "/nope", "--cache", "ram"}, "usher target: upstream: nbd handshake with " + addr + `: no export named "nope"`},
		{[]string{"--upstream", uri, "--cache", "ram-overflow"}, "usher target: --cache ram-overflow needs --overflow FILE"},
		{[]string{"--upstream", uri, "--cache", "ram-overflow", "--overflow", raw + "/x.bin"}, "usher target: --overflow: mkdir " + raw + ": not a directory"},
	} {
		args := append(append([]string{"target"}, tc.args...), "--listen", "unix:"+filepath.Join(dir, "t2.sock"), "--log-level", "error")
		if code, _, stderr := run(t, "", args...); code == 0 || !strings.HasPrefix(stderr, tc.want+"\n") {
			t.Errorf("usher %s: exit %d, %q; want %q", strings.Join(args, " "), code, stderr, tc.want)
		}
	}
}

// TestBlockStatusThroughCaches checks with nbdinfo --map and qemu-img
// map that a sparse image's holes show through the
// server-disk write cache and through a target's RAM cache (whose
// upstream is asked with NBD_CMD_BLOCK_STATUS), and that blocks written
// into a hole are reported as data.
func TestBlockStatusThroughCaches(t *testing.T) {
	needTool(t, "nbdinfo", "libnbd-bin")
	needTool(t, "qemu-img", "qemu-utils")
	needTool(t, "qemu-io", "qemu-utils")
	dir := t.TempDir()
	raw := filepath.Join(dir, "sparse.raw")
	f, err := os.Create(raw)
	if err != nil {
		t.Fatal(err)
	}
	// Data in [0, 1M) and [3M, 4M), a hole between.
	f.WriteAt(bytes.Repeat([]byte{0xaa}, 1<<20), 0)
	f.WriteAt(bytes.Repeat([]byte{0xbb}, 1<<20), 3<<20)
	f.Close()
	store := filepath.Join(dir, "store")
	if code, out, stderr := run(t, "", "image", "import", "sparse", raw, "--store", store); code != 0 {
		t.Fatalf("image import: exit %d\n%s%s", code, out, stderr)
	}
	addr := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0", "--write-cache", filepath.Join(dir, "wc"))
	uri := "nbd://" + addr + "/sparse"
	base := "0 1048576 0 data|1048576 2097152 3 hole,zero|3145728 1048576 0 data"
	if got := nbdinfoMap(t, uri); got != base {
		t.Fatalf("nbdinfo --map of the write-cache export:\n%s\nwant\n%s", got, base)
	}
	// Written into the hole on one connection (its own write cache),
	// the blocks are data to that connection.
	ctx := context.Background()
	c, err := nbd.DialURI(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteAt(ctx, bytes.Repeat([]byte{0x77}, 64<<10), 1536<<10, 0); err != nil {
		t.Fatal(err)
	}
	ext, err := c.Extents(ctx, 1<<20, 2<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	hz := block.Hole | block.Zeroed
	if want := []block.Extent{{Length: 512 << 10, Flags: hz}, {Length: 64 << 10}, {Length: 1472 << 10, Flags: hz}}; !reflect.DeepEqual(ext, want) {
		t.Fatalf("block status of the written hole %v, want %v", ext, want)
	}

	sock := filepath.Join(dir, "t.sock")
	startRole(t, "nbd", "target", "--upstream", uri, "--cache", "ram-overflow", "--ram", "1MiB",
		"--overflow", filepath.Join(dir, "overflow.bin"), "--listen", "unix:"+sock)
	local := "nbd+unix:///?socket=" + sock
	if got := nbdinfoMap(t, local); got != base {
		t.Fatalf("nbdinfo --map through the target:\n%s\nwant\n%s", got, base)
	}
	runTool(t, "qemu-io", "-f", "raw", local, "-c", "write -P 0x77 1536k 64k")
	written := "0 1048576 0 data|1048576 524288 3 hole,zero|1572864 65536 0 data|1638400 1507328 3 hole,zero|3145728 1048576 0 data"
	if got := nbdinfoMap(t, local); got != written {
		t.Fatalf("nbdinfo --map through the target after a write:\n%s\nwant\n%s", got, written)
	}
	js := runTool(t, "qemu-img", "map", "--output=json", "-f", "raw", local)
	var m []struct {
		Start, Length int64
		Data, Zero    bool
	}
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatalf("qemu-img map: %v\n%s", err, js)
	}
	var data []string
	for _, e := range m {
		if e.Data {
			data = append(data, fmt.Sprintf("%d+%d", e.Start, e.Length))
		}
	}
	if got, want := strings.Join(data, " "), "0+1048576 1572864+65536 3145728+1048576"; got != want {
		t.Fatalf("qemu-img map data ranges %q, want %q\n%s", got, want, js)
	}
}

// nbdinfoMap runs nbdinfo --map and returns its lines with single
// spaces, joined by "|".
func nbdinfoMap(t *testing.T, uri string) string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(runTool(t, "nbdinfo", "--map", uri)), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "|")
}

// TestStreamTLS runs usher stream with --tls require and reaches it over
// TLS from nbdinfo (libnbd, GnuTLS) and from usher target (--tls-ca),
// while a plaintext client is refused.
func TestStreamTLS(t *testing.T) {
	needTool(t, "nbdinfo", "libnbd-bin")
	needTool(t, "qemu-img", "qemu-utils")
	dir := t.TempDir()
	certs := blocktest.WriteCerts(t)
	raw := filepath.Join(dir, "base.raw")
	if err := os.WriteFile(raw, bytes.Repeat([]byte("usher-tls-image!"), 1<<20/16), 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "store")
	if code, out, stderr := run(t, "", "image", "import", "golden", raw, "--store", store); code != 0 {
		t.Fatalf("image import: exit %d\n%s%s", code, out, stderr)
	}
	if code, _, stderr := run(t, "", "stream", "--store", store, "--tls", "require"); code == 0 || !strings.Contains(stderr, "--tls-cert") {
		t.Fatalf("--tls require without a certificate: exit %d: %s", code, stderr)
	}
	addr := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0", "--tls", "require",
		"--tls-cert", filepath.Join(certs.Dir, "server-cert.pem"), "--tls-key", filepath.Join(certs.Dir, "server-key.pem"))
	out := runTool(t, "nbdinfo", "nbds://"+addr+"/golden?tls-certificates="+certs.Dir)
	if !strings.Contains(out, "with TLS") || !strings.Contains(out, "export-size: 1048576") {
		t.Fatalf("nbdinfo over TLS:\n%s", out)
	}
	if out, err := exec.Command("nbdinfo", "nbd://"+addr+"/golden").CombinedOutput(); err == nil {
		t.Fatalf("a plaintext client got in:\n%s", out)
	}
	sock := filepath.Join(dir, "t.sock")
	startRole(t, "nbd", "target", "--upstream", "nbds://"+addr+"/golden", "--tls-ca", filepath.Join(certs.Dir, "ca-cert.pem"),
		"--cache", "ram", "--ram", "1MiB", "--listen", "unix:"+sock)
	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", "nbd+unix:///?socket="+sock, raw)
}
