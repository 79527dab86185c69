package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startRole runs a long-running usher command in-process and returns the
// address it reports for name ("nbd"), stopping it when the test ends.
func startRole(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 4)
	var stderr syncBuffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &syncBuffer{}, Stderr: &stderr, Getenv: func(string) string { return "" },
		Listening: func(n, a string) {
			if n == name {
				addrs <- a
			}
		}}
	done := make(chan int, 1)
	go func() { done <- m.Run(ctx, args) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("usher %s did not stop", args[0])
		}
	})
	select {
	case a := <-addrs:
		return a
	case code := <-done:
		t.Fatalf("usher %s exited with %d: %s", args[0], code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("usher %s did not listen", args[0])
	}
	return ""
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

	sock := filepath.Join(dir, "t.sock")
	startRole(t, "nbd", "target", "--upstream", uri, "--cache", "ram-overflow", "--ram", "1MiB",
		"--overflow", filepath.Join(dir, "overflow.bin"), "--listen", "unix:"+sock)
	local := "nbd+unix:///?socket=" + sock
	out := runTool(t, "qemu-io", "-f", "raw", local,
		"-c", "read -P 0x75 0 1", // 'u', the image's first byte, through the cache
		"-c", "write -P 0x77 1M 2M", "-c", "read -P 0x77 1M 2M")
	if strings.Contains(out, "Pattern verification failed") {
		t.Fatalf("through the target: %s", out)
	}
	// The target's writes stayed in its cache: the stream still serves the image.
	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", uri, raw)
}
