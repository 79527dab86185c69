package streamrole_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/nbdserve"
	"github.com/usher-vdi/usher/internal/streamrole"
)

// Content is the image the tests serve: 1 MiB of random bytes.
func Content() []byte {
	p := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// newStore is an image store in a temporary directory holding "img",
// whose production version is Content.
func newStore(t *testing.T) *image.Store {
	t.Helper()
	dir := t.TempDir()
	raw := filepath.Join(dir, "img.raw")
	if err := os.WriteFile(raw, Content(), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := image.Create(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Import(context.Background(), "img", raw); err != nil {
		t.Fatal(err)
	}
	return st
}

var quiet = slog.New(slog.DiscardHandler)

func TestOpenRefusesABadConfig(t *testing.T) {
	st := newStore(t)
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  streamrole.Config
		want string
	}{
		{"no store", streamrole.Config{Listen: "127.0.0.1:0"}, "no image store"},
		{"unknown auth", streamrole.Config{Store: st, Listen: "127.0.0.1:0", Auth: "some"}, `auth "some" is not writes, all or none`},
		{"auth all without client CAs", streamrole.Config{Store: st, Listen: "127.0.0.1:0", Auth: streamrole.AuthAll}, "auth all needs TLS with client CAs"},
		{"off loopback in clear", streamrole.Config{Store: st, Listen: "0.0.0.0:0"}, "0.0.0.0:0 is not a loopback address"},
		{"require TLS without TLS", streamrole.Config{Store: st, Listen: "127.0.0.1:0", RequireTLS: true}, "RequireTLS without TLS"},
		{"negative bound", streamrole.Config{Store: st, Listen: "127.0.0.1:0", MaxInFlight: -1}, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := streamrole.Open(context.Background(), tc.cfg)
			if err == nil {
				s.Close()
				t.Fatalf("opened")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
	t.Run("write cache directory unmakeable", func(t *testing.T) {
		s, err := streamrole.Open(context.Background(), streamrole.Config{Store: st, Listen: "127.0.0.1:0", WriteCacheDir: filepath.Join(notDir, "wc"), Logger: quiet})
		var fe *nbdserve.FieldError
		if err == nil {
			s.Close()
			t.Fatal("opened")
		}
		if !errors.As(err, &fe) || fe.Field != "WriteCacheDir" {
			t.Fatalf("error %v is not one of WriteCacheDir", err)
		}
	})
	t.Run("listen address taken", func(t *testing.T) {
		a, err := streamrole.Open(context.Background(), streamrole.Config{Store: st, Listen: "127.0.0.1:0", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := streamrole.Open(context.Background(), streamrole.Config{Store: st, Listen: a.Addr(), Logger: quiet})
		var fe *nbdserve.FieldError
		if err == nil {
			b.Close()
			t.Fatal("two streams on one address")
		}
		if !errors.As(err, &fe) || fe.Field != "Listen" {
			t.Fatalf("error %v is not one of Listen", err)
		}
	})
}

// TestStreamServes: an opened stream serves the image's production
// version to an NBD client, read-only without a write cache and
// writable (to that connection's cache alone) with one, and stops when
// its context ends.
func TestStreamServes(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	for _, wc := range []bool{false, true} {
		t.Run(map[bool]string{false: "read only", true: "write cache"}[wc], func(t *testing.T) {
			cfg := streamrole.Config{Store: st, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", Logger: quiet}
			if wc {
				cfg.WriteCacheDir = filepath.Join(t.TempDir(), "wc")
			}
			s, err := streamrole.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.MetricsAddr() == "" {
				t.Fatal("no metrics listener")
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.Run(rctx) }()
			c, err := nbd.Dial(ctx, "tcp", s.Addr(), "img")
			if err != nil {
				t.Fatal(err)
			}
			want := Content()
			got := make([]byte, len(want))
			if err := c.ReadAt(ctx, got, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("the stream serves other bytes than the image's")
			}
			werr := c.WriteAt(ctx, []byte("written"), 4096, 0)
			if wc != (werr == nil) {
				t.Fatalf("write with write cache %v: %v", wc, werr)
			}
			if wc {
				if err := c.ReadAt(ctx, got[:7], 4096); err != nil || string(got[:7]) != "written" {
					t.Fatalf("a write read back: %q, %v", got[:7], err)
				}
			}
			c.Close()
			if mf, err := s.Metrics().Gather(); err != nil || len(mf) == 0 {
				t.Fatalf("metrics: %d families, %v", len(mf), err)
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

// TestDefaultListenIsNBDsPort: the default address is NBD's port on
// loopback.
func TestDefaultListenIsNBDsPort(t *testing.T) {
	if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(nbd.DefaultPort)); streamrole.DefaultListen != want {
		t.Fatalf("DefaultListen %s, want %s", streamrole.DefaultListen, want)
	}
}
