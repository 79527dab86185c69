package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
	"github.com/usher-vdi/usher/internal/block/nbd"
)

// importImage imports a raw image of data as name into a new store.
func importImage(t *testing.T, dir, name string, data []byte) (store, raw string) {
	t.Helper()
	raw = filepath.Join(dir, name+".raw")
	if err := os.WriteFile(raw, data, 0o600); err != nil {
		t.Fatal(err)
	}
	store = filepath.Join(dir, "store")
	if code, out, stderr := run(t, "", "image", "import", name, raw, "--store", store); code != 0 {
		t.Fatalf("image import: exit %d\n%s%s", code, out, stderr)
	}
	return store, raw
}

// TestStreamListensOnLoopbackOnly checks that usher stream refuses to
// listen beyond loopback without --tls require, unless told to.
func TestStreamListensOnLoopbackOnly(t *testing.T) {
	store, _ := importImage(t, t.TempDir(), "golden", make([]byte, 1<<20))
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		code, _, stderr := run(t, "", "stream", "--store", store, "--listen", listen)
		if code == 0 || !strings.Contains(stderr, "is not a loopback address") || !strings.Contains(stderr, "--insecure-listen") {
			t.Errorf("stream --listen %s without TLS: exit %d: %s", listen, code, stderr)
		}
	}
	if addr := startRole(t, "nbd", "stream", "--store", store, "--listen", "0.0.0.0:0", "--insecure-listen"); addr == "" {
		t.Fatal("no address with --insecure-listen")
	}
}

// TestStreamAuthenticatesWriters replays the anonymous write to a
// maintenance version: refused in plaintext and over TLS without a
// client certificate, allowed with one the --tls-client-ca signed.
func TestStreamAuthenticatesWriters(t *testing.T) {
	dir := t.TempDir()
	certs := blocktest.WriteCerts(t)
	store, _ := importImage(t, dir, "golden", make([]byte, 1<<20))
	if code, out, stderr := run(t, "", "image", "version", "golden", "--store", store); code != 0 {
		t.Fatalf("image version: exit %d\n%s%s", code, out, stderr)
	}
	addr := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0",
		"--tls-cert", filepath.Join(certs.Dir, "server-cert.pem"), "--tls-key", filepath.Join(certs.Dir, "server-key.pem"),
		"--tls-client-ca", filepath.Join(certs.Dir, "ca-cert.pem"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	anon := &nbd.Dialer{TLS: &tls.Config{RootCAs: certs.Roots, ServerName: "localhost"}}
	for name, d := range map[string]*nbd.Dialer{"plaintext": {}, "tls without a certificate": anon} {
		c, err := d.Dial(ctx, "tcp", addr, "golden@1")
		if err == nil {
			werr := c.WriteAt(ctx, []byte("pwned"), 0, 0)
			c.Close()
			t.Fatalf("%s: opened the maintenance version (write: %v)", name, werr)
		}
		if !strings.Contains(err.Error(), "needs authentication") {
			t.Errorf("%s: %v", name, err)
		}
		// Reads of a production version stay open to it.
		c, err = d.Dial(ctx, "tcp", addr, "golden")
		if err != nil {
			t.Fatalf("%s: read the production version: %v", name, err)
		}
		c.Close()
	}

	authed := &nbd.Dialer{TLS: &tls.Config{RootCAs: certs.Roots, ServerName: "localhost", Certificates: []tls.Certificate{certs.Client}}}
	c, err := authed.Dial(ctx, "tcp", addr, "golden@1")
	if err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	defer c.Close()
	want := bytes.Repeat([]byte("signed"), 100)
	if err := c.WriteAt(ctx, want, 4096, block.FUA); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if err := c.ReadAt(ctx, got, 4096); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %q, %v", got[:12], err)
	}

	// --auth all: even reads need the certificate.
	addr = startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0", "--auth", "all",
		"--tls-cert", filepath.Join(certs.Dir, "server-cert.pem"), "--tls-key", filepath.Join(certs.Dir, "server-key.pem"),
		"--tls-client-ca", filepath.Join(certs.Dir, "ca-cert.pem"))
	if c, err := anon.Dial(ctx, "tcp", addr, "golden"); err == nil {
		c.Close()
		t.Fatal("--auth all: an anonymous client read the production version")
	}
	c2, err := authed.Dial(ctx, "tcp", addr, "golden")
	if err != nil {
		t.Fatalf("--auth all with a client certificate: %v", err)
	}
	c2.Close()
}

// TestStreamWriteCacheQuota fills the server-disk write caches: a write
// past one connection's bound, or past every connection's, gets ENOSPC,
// and a connection's cache is removed, and its bytes given back, when it
// disconnects.
func TestStreamWriteCacheQuota(t *testing.T) {
	dir := t.TempDir()
	store, _ := importImage(t, dir, "golden", make([]byte, 4<<20))
	wc := filepath.Join(dir, "wc")
	addr := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0", "--write-cache", wc,
		"--write-cache-max-target", "1MiB", "--write-cache-max", "1536KiB")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := nbd.Dial(ctx, "tcp", addr, "golden")
	if err != nil {
		t.Fatal(err)
	}
	mib := bytes.Repeat([]byte{0xa5}, 1<<20)
	if err := a.WriteAt(ctx, mib, 0, 0); err != nil {
		t.Fatalf("write within the bound: %v", err)
	}
	if err := a.WriteAt(ctx, mib[:4096], 1<<20, 0); !errors.Is(err, block.ErrNoSpace) {
		t.Fatalf("write past the connection's bound: %v, want ENOSPC", err)
	}
	// Rewriting blocks already in the cache takes no more room.
	if err := a.WriteAt(ctx, mib[:8192], 0, 0); err != nil {
		t.Fatalf("rewrite: %v", err)
	}
	b, err := nbd.Dial(ctx, "tcp", addr, "golden")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.WriteAt(ctx, mib[:512<<10], 0, 0); err != nil {
		t.Fatalf("second connection within the total: %v", err)
	}
	if err := b.WriteAt(ctx, mib[:4096], 1<<20, 0); !errors.Is(err, block.ErrNoSpace) {
		t.Fatalf("write past the total: %v, want ENOSPC", err)
	}
	a.Close()
	// Once the server has seen a go, its cache is gone and b has room.
	for {
		err := b.WriteAt(ctx, mib[:4096], 1<<20, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, block.ErrNoSpace) || ctx.Err() != nil {
			t.Fatalf("write after the other connection left: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling for the server to close a's cache
	}
	if ents, err := os.ReadDir(wc); err != nil || len(ents) != 1 {
		t.Fatalf("write caches after one connection left: %v %v", ents, err)
	}
}

// TestTargetPersistDiscardsAfterPromotion replays the stale persistent
// cache: a target with --cache disk --persist keeps its writes across a
// restart over the same version, and discards them (saying so) once a
// new version of the same size is promoted, though that version differs
// from the old one only in a block the target wrote; --persist=strict
// refuses to start instead. The stream demands client certificates for
// every export (--auth all), which the target presents.
func TestTargetPersistDiscardsAfterPromotion(t *testing.T) {
	dir := t.TempDir()
	certs := blocktest.WriteCerts(t)
	store, _ := importImage(t, dir, "golden", bytes.Repeat([]byte("usher-image-0123"), 1<<20/16))
	addr := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0", "--auth", "all",
		"--tls-cert", filepath.Join(certs.Dir, "server-cert.pem"), "--tls-key", filepath.Join(certs.Dir, "server-key.pem"),
		"--tls-client-ca", filepath.Join(certs.Dir, "ca-cert.pem"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cache := filepath.Join(dir, "cache", "disk.bin")
	sock := filepath.Join(dir, "t.sock")
	target := func(persist string) []string {
		return []string{"target", "--upstream", "nbds://" + addr + "/golden", "--tls-ca", filepath.Join(certs.Dir, "ca-cert.pem"),
			"--tls-cert", filepath.Join(certs.Dir, "client-cert.pem"), "--tls-key", filepath.Join(certs.Dir, "client-key.pem"),
			"--cache", "disk", "--overflow", cache, persist, "--listen", "unix:" + sock}
	}
	// Block 16 (64 KiB) is not among the blocks the target samples.
	const off = 64 << 10
	readAt := func(what string) string {
		t.Helper()
		c, err := nbd.DialURI(ctx, "nbd+unix:///?socket="+sock)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer c.Close()
		b := make([]byte, 12)
		if err := c.ReadAt(ctx, b, off); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return string(b)
	}

	_, stop, _ := startRoleStop(t, "nbd", target("--persist")...)
	c, err := nbd.DialURI(ctx, "nbd+unix:///?socket="+sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteAt(ctx, []byte("target-wrote"), off, block.FUA); err != nil {
		t.Fatal(err)
	}
	c.Close()
	stop()
	_, stop, _ = startRoleStop(t, "nbd", target("--persist")...)
	if got := readAt("same version"); got != "target-wrote" {
		t.Fatalf("after a restart over the same version: %q, want the target's write", got)
	}
	stop()

	// A new version, written through the stream with the client
	// certificate, promoted to test and production.
	if code, out, stderr := run(t, "", "image", "version", "golden", "--store", store); code != 0 {
		t.Fatalf("image version: exit %d\n%s%s", code, out, stderr)
	}
	d := &nbd.Dialer{TLS: &tls.Config{RootCAs: certs.Roots, ServerName: "localhost", Certificates: []tls.Certificate{certs.Client}}}
	w, err := d.Dial(ctx, "tcp", addr, "golden@1")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteAt(ctx, []byte("version-one!"), off, block.FUA); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for range 2 {
		if code, out, stderr := run(t, "", "image", "promote", "golden", "1", "--store", store); code != 0 {
			t.Fatalf("image promote: exit %d\n%s%s", code, out, stderr)
		}
	}

	// --persist=strict must exit before it listens.
	sctx, scancel := context.WithCancel(ctx)
	var serr syncBuffer
	listened := false
	m := &Main{Stdin: strings.NewReader(""), Stdout: &syncBuffer{}, Stderr: &serr, Getenv: func(string) string { return "" },
		Listening: func(string, string) { listened = true; scancel() }}
	code := m.Run(sctx, append(target("--persist=strict"), "--log-level", "error"))
	scancel()
	if listened || code == 0 || !strings.Contains(serr.String(), "--persist=strict") {
		t.Fatalf("--persist=strict over a new version: listened %v, exit %d: %s", listened, code, serr.String())
	}
	_, _, stderr := startRoleStop(t, "nbd", target("--persist")...)
	if got := readAt("new version"); got != "version-one!" {
		t.Fatalf("after a promotion: %q, want the new version's block", got)
	}
	if !strings.Contains(stderr.String(), "persistent cache discarded") {
		t.Fatalf("no log line about the discarded cache:\n%s", stderr.String())
	}
}

// TestImageVersionHintMatchesTheStream: usher image version names what
// opens the new maintenance version, and it holds: the stream as the
// README starts it (no TLS) refuses the export, and one with --auth none
// lets a client write it.
func TestImageVersionHintMatchesTheStream(t *testing.T) {
	store, _ := importImage(t, t.TempDir(), "golden", make([]byte, 1<<20))
	out := mustImage(t, "version", "golden", "--store", store)
	for _, want := range []string{"export golden@1", "--tls-client-ca", "nbds://HOST:PORT/golden@1 --tls-ca F --tls-cert F --tls-key F", "--auth none"} {
		if !strings.Contains(out, want) {
			t.Errorf("image version's hint lacks %q:\n%s", want, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	readme := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0")
	if c, err := (&nbd.Dialer{}).Dial(ctx, "tcp", readme, "golden@1"); err == nil {
		c.Close()
		t.Fatal("the README's stream opened the maintenance version to an anonymous client")
	} else if !strings.Contains(err.Error(), "needs authentication") {
		t.Errorf("the README's stream: %v", err)
	}
	open := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0", "--auth", "none")
	c, err := (&nbd.Dialer{}).Dial(ctx, "tcp", open, "golden@1")
	if err != nil {
		t.Fatalf("--auth none: %v", err)
	}
	defer c.Close()
	if err := c.WriteAt(ctx, []byte("changed"), 0, block.FUA); err != nil {
		t.Fatalf("--auth none: write: %v", err)
	}
}
