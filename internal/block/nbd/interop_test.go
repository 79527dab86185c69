package nbd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
)

// Interoperability with real NBD clients: qemu-img and qemu-io
// (qemu-utils), nbdinfo and nbdcopy (libnbd-bin), fio (fio). Each test
// skips when its tool is missing.

func need(t *testing.T, tool, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("%s not installed (Debian package %s)", tool, pkg)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60e9)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// testImage writes a 16 MiB image: random data in the first 4 MiB and
// at 8 MiB, the rest a hole. It returns its path and content.
func testImage(t *testing.T) (string, []byte) {
	t.Helper()
	data := make([]byte, 16<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 4 << 20 {
		data[i] = byte(r.Uint32())
	}
	for i := 8 << 20; i < 9<<20; i++ {
		data[i] = byte(r.Uint32())
	}
	path := filepath.Join(t.TempDir(), "image.raw")
	f, err := block.CreateFile(path, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	if err := f.WriteAt(ctx, data[:4<<20], 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteAt(ctx, data[8<<20:9<<20], 8<<20, 0); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// serveFile serves a copy of the test image as export "disk".
func serveFile(t *testing.T, readOnly bool) (uri, path string, data []byte) {
	src, data := testImage(t)
	f, err := block.OpenFile(src, readOnly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	addr := startServer(t, Devices{"disk": f})
	return "nbd://" + addr + "/disk", src, data
}

func TestQemuImg(t *testing.T) {
	need(t, "qemu-img", "qemu-utils")
	uri, path, _ := serveFile(t, true)
	t.Run("Info", func(t *testing.T) {
		var info struct {
			VirtualSize int64 `json:"virtual-size"`
		}
		if err := json.Unmarshal([]byte(run(t, "qemu-img", "info", "--output=json", uri)), &info); err != nil {
			t.Fatal(err)
		}
		if info.VirtualSize != 16<<20 {
			t.Fatalf("virtual size %d", info.VirtualSize)
		}
	})
	t.Run("Compare", func(t *testing.T) {
		run(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", path, uri)
	})
	t.Run("Convert", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out.raw")
		run(t, "qemu-img", "convert", "-f", "raw", "-O", "raw", uri, out)
		run(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", path, out)
	})
	t.Run("Map", func(t *testing.T) {
		var m []struct {
			Start, Length int64
			Data, Zero    bool
		}
		if err := json.Unmarshal([]byte(run(t, "qemu-img", "map", "--output=json", "-f", "raw", uri)), &m); err != nil {
			t.Fatal(err)
		}
		want := []struct {
			start, length int64
			data          bool
		}{{0, 4 << 20, true}, {4 << 20, 4 << 20, false}, {8 << 20, 1 << 20, true}, {9 << 20, 7 << 20, false}}
		if len(m) != len(want) {
			t.Fatalf("map %+v, want %+v", m, want)
		}
		for i, w := range want {
			if m[i].Start != w.start || m[i].Length != w.length || m[i].Data != w.data {
				t.Fatalf("map entry %d: %+v, want %+v", i, m[i], w)
			}
		}
	})
	t.Run("UnknownExport", func(t *testing.T) {
		out, err := exec.Command("qemu-img", "info", strings.TrimSuffix(uri, "disk")+"nope").CombinedOutput()
		if err == nil {
			t.Fatalf("qemu-img info of an unknown export succeeded: %s", out)
		}
	})
}

func TestQemuIO(t *testing.T) {
	need(t, "qemu-io", "qemu-utils")
	uri, path, data := serveFile(t, false)
	out := run(t, "qemu-io", "-f", "raw", uri,
		"-c", "write -P 0xab 0 64k",
		"-c", "read -P 0xab 0 64k",
		"-c", "write -P 0xcd 1m 4k",
		"-c", "write -z 2m 64k",
		"-c", "discard 3m 64k",
		"-c", "flush",
		"-c", "read -P 0xcd 1m 4k",
		"-c", "read -P 0 2m 64k",
		"-c", "write -P 0x11 -f 5m 4k",
		"-c", "read -P 0x11 5m 4k")
	if strings.Contains(out, "verification failed") || strings.Contains(out, "error") {
		t.Fatalf("qemu-io:\n%s", out)
	}
	// The bytes landed in the file, byte for byte.
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copy(data[0:], bytes.Repeat([]byte{0xab}, 64<<10))
	copy(data[1<<20:], bytes.Repeat([]byte{0xcd}, 4<<10))
	clear(data[2<<20 : 2<<20+64<<10])
	clear(data[3<<20 : 3<<20+64<<10])
	copy(data[5<<20:], bytes.Repeat([]byte{0x11}, 4<<10))
	if !bytes.Equal(got, data) {
		t.Fatal("file content differs from what qemu-io wrote")
	}
	// Reading past the end is refused.
	if out, err := exec.Command("qemu-io", "-f", "raw", uri, "-c", "read 16m 4k").CombinedOutput(); err == nil && !strings.Contains(string(out), "rror") {
		t.Fatalf("read past the end succeeded: %s", out)
	}
}

func TestNbdinfo(t *testing.T) {
	need(t, "nbdinfo", "libnbd-bin")
	uri, _, _ := serveFile(t, true)
	out := run(t, "nbdinfo", uri)
	for _, want := range []string{"export-size: 16777216", "is_read_only: true", "can_multi_conn: true", "block_size_preferred: 4096", "block_size_maximum: 33554432", "can_fast_zero: true"} {
		if !strings.Contains(out, want) {
			t.Errorf("nbdinfo output lacks %q:\n%s", want, out)
		}
	}
	m := run(t, "nbdinfo", "--map", uri)
	fields := strings.Fields(m)
	// "0 4194304 0 data" then "4194304 4194304 3 hole,zero" ...
	if len(fields) < 8 || fields[0] != "0" || fields[1] != "4194304" || fields[2] != "0" || fields[5] != "4194304" || fields[6] != "3" {
		t.Fatalf("nbdinfo --map:\n%s", m)
	}
	if out := run(t, "nbdinfo", "--list", strings.TrimSuffix(uri, "disk")); !strings.Contains(out, "export=\"disk\"") && !strings.Contains(out, "export: disk") {
		t.Errorf("nbdinfo --list lacks disk:\n%s", out)
	}
}

func TestNbdcopy(t *testing.T) {
	need(t, "nbdcopy", "libnbd-bin")
	uri, path, data := serveFile(t, false)
	out := filepath.Join(t.TempDir(), "copy.raw")
	run(t, "nbdcopy", uri, out)
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("nbdcopy from the server: content differs")
	}
	// And back: a pattern file copied onto the export, 4 connections.
	pattern := bytes.Repeat([]byte("usher nbd "), (16<<20)/10+1)[:16<<20]
	src := filepath.Join(t.TempDir(), "pattern.raw")
	os.WriteFile(src, pattern, 0o644)
	run(t, "nbdcopy", "--connections=4", src, uri)
	got, _ = os.ReadFile(path)
	if !bytes.Equal(got, pattern) {
		t.Fatal("nbdcopy to the server: content differs")
	}
}

func TestFio(t *testing.T) {
	need(t, "fio", "fio")
	if out, _ := exec.Command("fio", "--enghelp=nbd").CombinedOutput(); !strings.Contains(string(out), "uri") {
		t.Skip("fio has no nbd engine")
	}
	uri, _, _ := serveFile(t, false)
	out := run(t, "fio", "--name=verify", "--ioengine=nbd", "--uri="+uri, "--rw=randwrite",
		"--bs=4k", "--iodepth=16", "--size=8m", "--verify=crc32c", "--do_verify=1", "--verify_state_save=0", "--output-format=terse")
	if strings.Contains(out, "verify:") && strings.Contains(out, "bad") {
		t.Fatalf("fio verify failed:\n%s", out)
	}
	out = run(t, "fio", "--name=randread", "--ioengine=nbd", "--uri="+uri, "--rw=randread",
		"--bs=4k", "--iodepth=32", "--size=16m", "--runtime=1", "--time_based", "--output-format=json")
	var res struct {
		Jobs []struct {
			Read struct{ IOPS float64 } `json:"read"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) == 0 || res.Jobs[0].Read.IOPS <= 0 {
		t.Fatalf("fio measured nothing:\n%s", out)
	}
	t.Logf("fio 4k random read, iodepth 32: %s IOPS", fmt.Sprint(int(res.Jobs[0].Read.IOPS)))
}

// wantTestImageExtents are the extents of testImage: data, hole, data,
// hole.
var wantTestImageExtents = []block.Extent{
	{Length: 4 << 20}, {Length: 4 << 20, Flags: block.Hole | block.Zeroed},
	{Length: 1 << 20}, {Length: 7 << 20, Flags: block.Hole | block.Zeroed},
}

// TestClientAgainstQemuNbd runs the client against qemu-nbd, which
// answers reads of holes with NBD_REPLY_TYPE_OFFSET_HOLE chunks and
// block status with base:allocation.
func TestClientAgainstQemuNbd(t *testing.T) {
	need(t, "qemu-nbd", "qemu-utils")
	path, data := testImage(t)
	sock := filepath.Join(t.TempDir(), "qemu.sock")
	cmd := exec.Command("qemu-nbd", "-f", "raw", "-r", "-t", "-x", "disk", "-k", sock, path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// qemu-nbd is a real process on a real socket: poll until it
	// answers, with a deadline, rather than sleep for a guess.
	var c *Client
	for deadline := time.Now().Add(5 * time.Second); ; {
		var err error
		if c, err = DialURI(context.Background(), "nbd+unix:///disk?socket="+sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("qemu-nbd did not answer within 5s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer c.Close()
	if !c.HasBlockStatus() {
		t.Fatal("qemu-nbd offers base:allocation but the client did not negotiate it")
	}
	if got := blocktest.Extents(t, c, 0, c.Size()); !reflect.DeepEqual(got, wantTestImageExtents) {
		t.Fatalf("extents from qemu-nbd %v, want %v", got, wantTestImageExtents)
	}
	got := make([]byte, len(data))
	if err := c.ReadAt(context.Background(), got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("content read from qemu-nbd differs")
	}
	// A read straddling data and a hole.
	p := bytes.Repeat([]byte{0xff}, 1<<20)
	if err := c.ReadAt(context.Background(), p, 4<<20-4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, data[4<<20-4096:5<<20-4096]) {
		t.Fatal("read across data and a hole differs")
	}
}

func TestClientBlockStatusFromUsher(t *testing.T) {
	uri, _, _ := serveFile(t, true)
	c, err := DialURI(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := blocktest.Extents(t, c, 0, c.Size()); !reflect.DeepEqual(got, wantTestImageExtents) {
		t.Fatalf("extents %v, want %v", got, wantTestImageExtents)
	}
	if _, err := c.Extents(context.Background(), 16<<20-10, 20, nil); !errors.Is(err, block.ErrOutOfRange) {
		t.Fatalf("extents past the end: %v, want ErrOutOfRange", err)
	}
}
