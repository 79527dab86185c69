package targetrole_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/nbdserve"
	"github.com/usher-vdi/usher/internal/streamrole"
	"github.com/usher-vdi/usher/internal/targetrole"
)

var quiet = slog.New(slog.DiscardHandler)

func content() []byte {
	p := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// startStream runs usher stream's stack over a store holding "img"
// (content) and returns its address.
func startStream(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	raw := filepath.Join(dir, "img.raw")
	if err := os.WriteFile(raw, content(), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := image.Create(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Import(context.Background(), "img", raw); err != nil {
		t.Fatal(err)
	}
	s, err := streamrole.Open(context.Background(), streamrole.Config{Store: st, Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		s.Close()
	})
	return s.Addr()
}

func TestOpenRefusesABadConfig(t *testing.T) {
	addr := startStream(t)
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	up := "nbd://" + addr + "/img"
	for _, tc := range []struct {
		name  string
		cfg   targetrole.Config
		want  string
		field string // the FieldError's, if one
	}{
		{"no upstream", targetrole.Config{}, "no upstream", ""},
		{"unknown cache", targetrole.Config{Upstream: up, Cache: targetrole.CacheConfig{Mode: "tape"}}, `cache "tape" is not ram, ram-overflow or disk`, ""},
		{"overflow without a file", targetrole.Config{Upstream: up, Cache: targetrole.CacheConfig{Mode: targetrole.ModeRAMOverflow}}, "needs a Path", ""},
		{"persist in RAM", targetrole.Config{Upstream: up, Cache: targetrole.CacheConfig{Mode: targetrole.ModeRAM, Persist: true}}, "Persist needs the disk cache", ""},
		{"unknown export", targetrole.Config{Upstream: "nbd://" + addr + "/nope", Cache: targetrole.CacheConfig{Mode: targetrole.ModeRAM}}, `upstream: nbd handshake with ` + addr + `: no export named "nope"`, ""},
		{"cache file unmakeable", targetrole.Config{Upstream: up, Cache: targetrole.CacheConfig{Mode: targetrole.ModeDisk, Path: filepath.Join(notDir, "c")}}, "not a directory", "Cache.Path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Listen, tc.cfg.Logger = "unix:"+filepath.Join(t.TempDir(), "t.sock"), quiet
			tg, err := targetrole.Open(context.Background(), tc.cfg)
			if err == nil {
				tg.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			var fe *nbdserve.FieldError
			if tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field) {
				t.Fatalf("error %v is not one of %s", err, tc.field)
			}
		})
	}
}

// TestTargetServes: in each mode, a target serves the upstream's image
// with the device's writes over it, on its local endpoint, and writes
// the ready file once it listens.
func TestTargetServes(t *testing.T) {
	addr := startStream(t)
	ctx := context.Background()
	for _, mode := range []string{targetrole.ModeRAM, targetrole.ModeRAMOverflow, targetrole.ModeDisk} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			cfg := targetrole.Config{Upstream: "nbd://" + addr + "/img", Listen: "unix:" + filepath.Join(dir, "run", "t.sock"),
				Cache: targetrole.CacheConfig{Mode: mode, RAM: 256 << 10}, Ready: filepath.Join(dir, "ready"), Logger: quiet}
			if mode != targetrole.ModeRAM {
				cfg.Cache.Path = filepath.Join(dir, "cache", "c.bin")
			}
			tg, err := targetrole.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			if b, err := os.ReadFile(cfg.Ready); err != nil || strings.TrimSpace(string(b)) != tg.Addr() {
				t.Fatalf("ready file: %q, %v (listening on %s)", b, err, tg.Addr())
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- tg.Run(rctx) }()
			for _, export := range []string{"", "img"} {
				c, err := nbd.Dial(ctx, "unix", strings.TrimPrefix(tg.Addr(), "unix:"), export)
				if err != nil {
					t.Fatal(err)
				}
				want := content()
				copy(want[8192:], "the device's write")
				if err := c.WriteAt(ctx, []byte("the device's write"), 8192, 0); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(want))
				if err := c.ReadAt(ctx, got, 0); err != nil {
					t.Fatal(err)
				}
				c.Close()
				if !bytes.Equal(got, want) {
					t.Fatalf("export %q: the target serves other bytes than the image with its write", export)
				}
			}
			if got := tg.Cache().Disk != nil; got != (mode != targetrole.ModeRAM) {
				t.Fatalf("a disk counter: %v", got)
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}
		})
	}
}

// TestNewCacheMetersEachLayer: the stack NewCache builds (the one the
// benches measure) meters each layer: reads of the upstream (never a
// write: it is read-only under the cache), the cache's operations, and
// those that reach the overflow file, which goes with the cache.
func TestNewCacheMetersEachLayer(t *testing.T) {
	ctx := context.Background()
	up := block.NewMemory(1 << 20)
	if err := up.WriteAt(ctx, content(), 0, 0); err != nil {
		t.Fatal(err)
	}
	var reg meter.Registry
	of := filepath.Join(t.TempDir(), "of")
	c, err := targetrole.NewCache(up, targetrole.CacheConfig{Mode: targetrole.ModeRAMOverflow, RAM: 64 << 10, Path: of}, &reg)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{7}, 256<<10) // past the RAM budget: overflows
	if err := c.WriteAt(ctx, big, 0, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	if err := c.ReadAt(ctx, got, 512<<10); err != nil {
		t.Fatal(err)
	}
	snap := reg.Snapshot()
	if snap[targetrole.LayerUpstream].Reads == 0 || snap[targetrole.LayerUpstream].Writes != 0 {
		t.Fatalf("upstream layer: %+v", snap[targetrole.LayerUpstream])
	}
	if snap[targetrole.LayerOverflow].Writes == 0 || c.Disk.Writes.Load() == 0 {
		t.Fatalf("nothing reached the overflow file: %+v", snap[targetrole.LayerOverflow])
	}
	if snap[targetrole.LayerCacheRAM].Writes == 0 {
		t.Fatalf("cache layer: %+v", snap[targetrole.LayerCacheRAM])
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(of); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the overflow file outlives its cache: %v", err)
	}
}

// TestCacheKeepsBlockStatus: the Cache that NewCache returns (what the
// target serves) answers block status through its layers, so the
// upstream's holes stay holes under it.
func TestCacheKeepsBlockStatus(t *testing.T) {
	up := block.NewMemory(1 << 20)
	c, err := targetrole.NewCache(up, targetrole.CacheConfig{Mode: targetrole.ModeRAM}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := block.As[block.Extenter](c); !ok {
		t.Fatal("the cache hides its layers' block status")
	}
}
