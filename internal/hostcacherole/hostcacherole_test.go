package hostcacherole_test

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

	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/hostcacherole"
	"github.com/usher-vdi/usher/internal/nbdserve"
	"github.com/usher-vdi/usher/internal/streamrole"
)

var quiet = slog.New(slog.DiscardHandler)

func content() []byte {
	p := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(5, 6))
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
	up := "nbd://" + addr
	vms := map[string]string{"vm1": "img"}
	for _, tc := range []struct {
		name string
		cfg  hostcacherole.Config
		want string
	}{
		{"no upstream", hostcacherole.Config{Dir: t.TempDir(), VMs: vms}, "no upstream"},
		{"no directory", hostcacherole.Config{Upstream: up, VMs: vms}, "no cache directory"},
		{"no VM", hostcacherole.Config{Upstream: up, Dir: t.TempDir()}, "no VM"},
		{"unknown writes", hostcacherole.Config{Upstream: up, Dir: t.TempDir(), VMs: vms, Writes: "away"}, `writes "away" is not local or upstream`},
		{"upstream with an export", hostcacherole.Config{Upstream: up + "/img", Dir: t.TempDir(), VMs: vms}, "without an export"},
		{"unknown image", hostcacherole.Config{Upstream: up, Dir: t.TempDir(), VMs: map[string]string{"vm1": "nope"}}, `no export named "nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Listen, tc.cfg.Logger = "unix:"+filepath.Join(t.TempDir(), "h.sock"), quiet
			h, err := hostcacherole.Open(context.Background(), tc.cfg)
			if err == nil {
				h.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestHostCacheServes: a host cache serves each VM its image from
// upstream, refuses a second daemon on its directory, and stops when
// its context ends.
func TestHostCacheServes(t *testing.T) {
	addr := startStream(t)
	ctx := context.Background()
	dir := t.TempDir()
	cfg := hostcacherole.Config{Upstream: "nbd://" + addr, Dir: filepath.Join(dir, "cache"), Size: 8 << 20,
		VMs: map[string]string{"vm1": "img", "vm2": "img"}, Listen: "unix:" + filepath.Join(dir, "run", "h.sock"),
		MetricsListen: "127.0.0.1:0", Logger: quiet}
	h, err := hostcacherole.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	second := cfg
	second.Listen = "unix:" + filepath.Join(dir, "h2.sock")
	if h2, err := hostcacherole.Open(ctx, second); err == nil {
		h2.Close()
		t.Fatal("a second daemon opened the same directory")
	} else if fe := (*nbdserve.FieldError)(nil); !errors.As(err, &fe) || fe.Field != "Dir" || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("a second daemon: %v", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(rctx) }()
	for _, vm := range []string{"vm1", "vm2"} {
		c, err := nbd.Dial(ctx, "unix", strings.TrimPrefix(h.Addr(), "unix:"), vm)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 1<<20)
		err = c.ReadAt(ctx, got, 0)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content()) {
			t.Fatalf("%s reads other bytes than its image's", vm)
		}
	}
	if st := h.Cache().Stats(); st.Used == 0 {
		t.Fatalf("the cache holds nothing after two boots: %+v", st)
	}
	if h.MetricsAddr() == "" {
		t.Fatal("no metrics listener")
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
}
