package writecache_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/writecache"
)

// TestPersistentOverlayIdentity keeps a persistent overlay over the
// same base and discards it over another, or refuses it with Strict.
func TestPersistentOverlayIdentity(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ov")
	open := func(ident string, strict bool) (*writecache.Overlay, error) {
		return writecache.OpenOverlayWith(block.NewMemory(1<<20), path, writecache.OverlayOptions{Persist: true, Identity: ident, Strict: strict})
	}
	o, err := open("golden v0", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.WriteAt(ctx, make([]byte, 4096), 0, block.FUA); err != nil {
		t.Fatal(err)
	}
	o.Close()
	if o, err = open("golden v0", false); err != nil || o.Discarded != "" || !o.Written(0) {
		t.Fatalf("same base: %v, discarded %q, written %v", err, o.Discarded, o.Written(0))
	}
	o.Close()
	if _, err := open("golden v1", true); !errors.Is(err, writecache.ErrStale) {
		t.Fatalf("strict over another base: %v, want ErrStale", err)
	}
	if o, err = open("golden v1", false); err != nil || o.Discarded == "" || o.Written(0) {
		t.Fatalf("another base: %v, discarded %q, written %v", err, o.Discarded, o.Written(0))
	}
	o.Close()
}

// TestOverlayQuota gives ENOSPC past an overlay's bound and past a
// shared quota, and gives the bytes back at Close.
func TestOverlayQuota(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := writecache.NewQuota(12 << 10)
	a, err := writecache.OpenOverlayWith(block.NewMemory(1<<20), filepath.Join(dir, "a"), writecache.OverlayOptions{Max: 8 << 10, Quota: q})
	if err != nil {
		t.Fatal(err)
	}
	b, err := writecache.OpenOverlayWith(block.NewMemory(1<<20), filepath.Join(dir, "b"), writecache.OverlayOptions{Quota: q})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := make([]byte, 8<<10)
	if err := a.WriteAt(ctx, p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteAt(ctx, p[:1], 8<<10, 0); !errors.Is(err, block.ErrNoSpace) {
		t.Fatalf("past the overlay's bound: %v", err)
	}
	if err := b.Zero(ctx, 0, 4<<10, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteAt(ctx, p[:4096], 4096, 0); !errors.Is(err, block.ErrNoSpace) {
		t.Fatalf("past the quota: %v", err)
	}
	if got := q.Used(); got != 12<<10 {
		t.Fatalf("quota used %d, want %d", got, 12<<10)
	}
	a.Close()
	if got := q.Used(); got != 4<<10 {
		t.Fatalf("quota used after close %d, want %d", got, 4<<10)
	}
	if err := b.WriteAt(ctx, p[:4096], 4096, 0); err != nil {
		t.Fatal(err)
	}
}
