package imageexport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/digest"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/block/nbd"
)

// digestSize is not a multiple of digest.BlockSize: the last block is
// short.
const digestSize = 17*digest.BlockSize + 12345

// digestStore returns a store holding image "img": version 0 in
// production, version 1 in test with a few blocks changed.
func digestStore(t *testing.T) *image.Store {
	t.Helper()
	ctx := context.Background()
	content := make([]byte, digestSize)
	for i := range content {
		content[i] = byte(i/digest.BlockSize + i%253)
	}
	st := storeWith(t, content, true)
	d, err := st.OpenVersion(ctx, "img", 1, true)
	must(t, err)
	must(t, d.WriteAt(ctx, []byte("v1"), 3*digest.BlockSize+7, 0))
	must(t, d.WriteAt(ctx, []byte("v1 at the end"), digestSize-13, 0))
	must(t, d.Flush(ctx))
	must(t, d.Close())
	_, err = st.Promote(ctx, "img", 1)
	must(t, err)
	return st
}

// readTable reads the whole export c and parses it as a table.
func readTable(t *testing.T, c *nbd.Client) (*digest.Table, []byte) {
	t.Helper()
	b := read(t, c, 0, int(c.Size()))
	var tab digest.Table
	must(t, tab.UnmarshalBinary(b))
	return &tab, b
}

// storeTable is the store's table of version n, in its wire form.
func storeTable(t *testing.T, st *image.Store, n int) []byte {
	t.Helper()
	tab, err := st.Digests(context.Background(), "img", n)
	must(t, err)
	b, err := tab.MarshalBinary()
	must(t, err)
	return b
}

func TestDigestsExport(t *testing.T) {
	ctx := context.Background()
	st := digestStore(t)
	e := &imageexport.Images{Store: st}
	addr := serve(t, e)

	check := func(name string, n int) *digest.Table {
		t.Helper()
		c := dial(t, addr, name)
		defer c.Close()
		if got, want := c.Description(), imageexport.DigestsDescription("img", n); got != want || want != fmt.Sprintf("img version %d digests", n) {
			t.Fatalf("%s: description %q, want %q", name, got, want)
		}
		if !c.ReadOnly() || !c.CanMultiConn() {
			t.Fatalf("%s: read-only %v, multi-conn %v; want both", name, c.ReadOnly(), c.CanMultiConn())
		}
		info, err := e.Info(ctx, name)
		must(t, err)
		if info.Size != c.Size() || info.Description != c.Description() {
			t.Fatalf("%s: Info says %d bytes, %q; the connection %d, %q", name, info.Size, info.Description, c.Size(), c.Description())
		}
		tab, b := readTable(t, c)
		if !bytes.Equal(b, storeTable(t, st, n)) {
			t.Fatalf("%s: the table served is not the store's of version %d", name, n)
		}
		if tab.Size != digestSize || tab.BlockSize != digest.BlockSize {
			t.Fatalf("%s: a table of %d-byte blocks for %d bytes", name, tab.BlockSize, tab.Size)
		}
		// A second connection reads the table kept in memory.
		c2 := dial(t, addr, name)
		defer c2.Close()
		if !bytes.Equal(read(t, c2, 0, int(c2.Size())), b) {
			t.Fatalf("%s: a second connection reads another table", name)
		}
		return tab
	}
	v0 := check("img@0/digests", 0)
	v1 := check("img@1/digests", 1)
	check(digest.ExportName("img"), 0) // production
	changed := 0
	for i := range v0.Sums {
		if v0.Sums[i] != v1.Sums[i] {
			changed++
		}
	}
	if changed != 2 {
		t.Fatalf("versions 0 and 1 differ in %d blocks, want 2", changed)
	}

	// Promoted, version 1 is what IMAGE/digests serves, and says so.
	_, err := st.Promote(ctx, "img", 1)
	must(t, err)
	check("img/digests", 1)

	// Tables are not listed.
	list, err := e.List(ctx)
	must(t, err)
	for _, x := range list {
		if _, ok := digest.ParseExportName(x.Name); ok {
			t.Fatalf("List has %q", x.Name)
		}
	}

	// A maintenance version has no table.
	v2, err := st.NewVersion(ctx, "img", "")
	must(t, err)
	name := digest.ExportName(imageexport.Name("img", v2.Number))
	if _, err := e.Info(ctx, name); !errors.Is(err, nbd.ErrUnknownExport) || !strings.Contains(err.Error(), "img@2 is in maintenance: it has no digests until it is promoted") {
		t.Fatalf("Info %s: %v, want ErrUnknownExport saying it is in maintenance", name, err)
	}
	for _, name := range []string{name, "nope/digests", "img@9/digests", "img@1/digests/digests", "img@x/digests", "/digests"} {
		if _, err := nbd.Dial(ctx, "tcp", addr, name); !errors.Is(err, nbd.ErrUnknownExport) {
			t.Errorf("open %s: %v, want ErrUnknownExport", name, err)
		}
	}
}

func TestDigestsExportNeedsAuth(t *testing.T) {
	ctx := context.Background()
	e := &imageexport.Images{Store: digestStore(t), RequireAuth: true}
	addr := serve(t, e)
	for _, name := range []string{"img/digests", "img@1/digests"} {
		if _, err := e.Info(ctx, name); !errors.Is(err, nbd.ErrUnauthenticated) {
			t.Errorf("Info %s unauthenticated: %v, want ErrUnauthenticated", name, err)
		}
		if _, _, err := e.Open(ctx, name, t.Name()); !errors.Is(err, nbd.ErrUnauthenticated) {
			t.Errorf("Open %s unauthenticated: %v, want ErrUnauthenticated", name, err)
		}
		if _, err := nbd.Dial(ctx, "tcp", addr, name); err == nil || !strings.Contains(err.Error(), "needs authentication") {
			t.Errorf("dial %s unauthenticated: %v, want a refusal saying it needs authentication", name, err)
		}
	}
}

// Third-party clients open a table's export by its NBD URI, whose path
// holds the '/' of its name.
func TestDigestsExportThirdPartyClients(t *testing.T) {
	st := digestStore(t)
	addr := serve(t, &imageexport.Images{Store: st})
	want := storeTable(t, st, 1)
	uri := "nbd://" + addr + "/img@1/digests"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("nbdinfo", func(t *testing.T) {
		if _, err := exec.LookPath("nbdinfo"); err != nil {
			t.Skip("nbdinfo is not installed")
		}
		out, err := exec.CommandContext(ctx, "nbdinfo", "--json", uri).Output()
		if err != nil {
			t.Fatalf("nbdinfo: %v", err)
		}
		var info struct {
			Exports []struct {
				Name        string `json:"export-name"`
				Description string `json:"description"`
				Size        int64  `json:"export-size"`
				ReadOnly    bool   `json:"is_read_only"`
			} `json:"exports"`
		}
		must(t, json.Unmarshal(out, &info))
		if len(info.Exports) != 1 {
			t.Fatalf("nbdinfo: %s", out)
		}
		x := info.Exports[0]
		if x.Name != "img@1/digests" || x.Description != "img version 1 digests" || x.Size != int64(len(want)) || !x.ReadOnly {
			t.Fatalf("nbdinfo: %+v, want img@1/digests, %q, %d bytes, read-only", x, "img version 1 digests", len(want))
		}
	})
	t.Run("qemu-img", func(t *testing.T) {
		if _, err := exec.LookPath("qemu-img"); err != nil {
			t.Skip("qemu-img is not installed")
		}
		out := filepath.Join(t.TempDir(), "digests")
		if b, err := exec.CommandContext(ctx, "qemu-img", "convert", "-f", "raw", "-O", "raw", uri, out).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img convert: %v: %s", err, b)
		}
		got, err := os.ReadFile(out)
		must(t, err)
		// QEMU rounds a disk up to whole 512-byte sectors, reading zeros
		// past the end of the export.
		if len(got) != (len(want)+511)/512*512 || !bytes.Equal(got[:len(want)], want) || !block.IsZero(got[len(want):]) {
			t.Fatalf("qemu-img read %d bytes that are not the table's %d, padded with zeros to a sector", len(got), len(want))
		}
	})
}
