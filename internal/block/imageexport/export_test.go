package imageexport_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/ramcache"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func serve(t *testing.T, e *imageexport.Images) string {
	ln, err := nbd.Listen("127.0.0.1:0")
	must(t, err)
	s := &nbd.Server{Exports: e, Logger: slog.New(slog.DiscardHandler)}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close(); e.Close() })
	return ln.Addr().String()
}

func dial(t *testing.T, addr, export string) *nbd.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := nbd.Dial(ctx, "tcp", addr, export)
	must(t, err)
	return c
}

func read(t *testing.T, d block.Device, off int64, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	must(t, d.ReadAt(context.Background(), p, off))
	return p
}

func TestLifeCycle(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.raw")
	base := bytes.Repeat([]byte("base"), (4<<20)/4)
	must(t, os.WriteFile(src, base, 0o644))
	st, err := image.Create(filepath.Join(dir, "store"))
	must(t, err)
	im, err := st.Import(ctx, "win11", src)
	must(t, err)
	if im.Size != 4<<20 || im.Production() != 0 {
		t.Fatalf("imported %+v", im)
	}
	if _, err := st.Import(ctx, "win11", src); !errors.Is(err, image.ErrExists) {
		t.Fatalf("second import: %v", err)
	}
	v1, err := st.NewVersion(ctx, "win11", "patch tuesday")
	must(t, err)
	if _, err := st.NewVersion(ctx, "win11", ""); !errors.Is(err, image.ErrState) {
		t.Fatalf("two maintenance versions: %v", err)
	}

	var reg meter.Registry
	wc := filepath.Join(dir, "wc")
	must(t, os.Mkdir(wc, 0o755))
	e := &imageexport.Images{Store: st, Cache: ramcache.New(64<<20, 0), WriteCacheDir: wc, Meters: &reg, AllowAnonymousWrites: true}
	addr := serve(t, e)

	// Private mode: one writer into the maintenance version.
	w := dial(t, addr, "win11@1")
	if w.ReadOnly() {
		t.Fatal("maintenance version is read-only")
	}
	if _, err := nbd.Dial(ctx, "tcp", addr, "win11@1"); !errors.Is(err, nbd.ErrExportBusy) || !strings.HasSuffix(err.Error(), `: export "win11@1" is busy`) {
		t.Fatalf("second writer: %v, want ErrExportBusy", err)
	}
	must(t, w.WriteAt(ctx, []byte("UPDATED!"), 4096, 0))
	must(t, w.WriteAt(ctx, []byte("xy"), 10, 0))
	if _, err := st.Promote(ctx, "win11", v1.Number); !errors.Is(err, image.ErrBusy) {
		t.Fatalf("promote with the writer attached: %v, want ErrBusy", err)
	}
	must(t, w.Close())
	// The server lets the writer go once it has flushed; until then the
	// version cannot be promoted. The server notices the disconnect on a
	// real TCP socket, which is not durably blocking in a synctest
	// bubble (and nbd.Dial dials only real networks), so this is a
	// bounded poll with a deadline rather than synctest.Wait.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := st.Promote(ctx, "win11", v1.Number) // test
		if err == nil {
			break
		}
		if !errors.Is(err, image.ErrBusy) || time.Now().After(deadline) {
			t.Fatalf("promote after the writer left: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := st.Promote(ctx, "win11", v1.Number); err != nil { // production
		t.Fatal(err)
	}

	want := bytes.Clone(base)
	copy(want[4096:], "UPDATED!")
	copy(want[10:], "xy")

	// Standard mode: two targets on the production version.
	a, b := dial(t, addr, "win11"), dial(t, addr, "win11")
	defer func() { a.Close() }() // the a of the second boot
	defer b.Close()
	if !bytes.Equal(read(t, a, 0, 8192), want[:8192]) {
		t.Fatal("target reads the wrong version")
	}
	must(t, a.WriteAt(ctx, []byte("target a was here"), 0, 0))
	if got := read(t, b, 0, 17); !bytes.Equal(got, want[:17]) {
		t.Fatalf("target b sees %q", got)
	}
	if got := read(t, a, 0, 17); string(got) != "target a was here" {
		t.Fatalf("target a reads %q", got)
	}
	a.Close()
	a = dial(t, addr, "win11") // a new boot: the writes are gone
	if got := read(t, a, 0, 17); !bytes.Equal(got, want[:17]) {
		t.Fatalf("after reconnecting target a sees %q", got)
	}
	// IMAGE is the production version; the one before it is superseded,
	// still there by number, unchanged.
	for name, want := range map[string]string{"win11": "win11 version 1 (production)", "win11@0": "win11 version 0 (superseded)"} {
		if info, err := e.Info(ctx, name); err != nil || info.Description != want {
			t.Fatalf("export %s: %q, %v; want %q", name, info.Description, err, want)
		}
	}
	old := dial(t, addr, "win11@0")
	defer old.Close()
	if !bytes.Equal(read(t, old, 0, 8192), base[:8192]) {
		t.Fatal("version 0 changed")
	}
	if s := reg.Snapshot()[imageexport.LayerImage]; s.Reads == 0 {
		t.Fatal("image layer not metered")
	}

	// Merges keep the content.
	v2, err := st.NewVersion(ctx, "win11", "")
	must(t, err)
	p, err := st.OpenVersion(ctx, "win11", v2.Number, true)
	must(t, err)
	must(t, p.WriteAt(ctx, []byte("v2"), 3<<20, 0))
	copy(want[3<<20:], "v2")
	must(t, p.Flush(ctx))
	p.Close()
	st.Promote(ctx, "win11", v2.Number)
	for _, full := range []bool{false, true} {
		mv, err := st.Merge(ctx, "win11", v2.Number, full)
		must(t, err)
		d, err := st.OpenVersion(ctx, "win11", mv.Number, false)
		must(t, err)
		blocktest.RunReadOnly(t, d)
		if !bytes.Equal(read(t, d, 0, 4<<20), want) {
			t.Fatalf("merge (full %v) content differs", full)
		}
		d.Close()
		if _, blocks, _, err := st.Inspect(ctx, "win11", mv.Number); err != nil || (!full && blocks != 3) {
			t.Fatalf("inspect merged version: %d blocks, %v", blocks, err)
		}
	}
	if _, err := nbd.Dial(ctx, "tcp", addr, "nope"); !errors.Is(err, nbd.ErrUnknownExport) || !strings.HasSuffix(err.Error(), `: no export named "nope"`) {
		t.Fatalf("unknown export: %v", err)
	}
}
