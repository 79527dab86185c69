package hostexport_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/hostexport"
	"github.com/usher-vdi/usher/internal/block/nbd"
)

// serveDevice serves dev as export "img" on a loopback port.
func serveDevice(t *testing.T, dev block.Device) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := &nbd.Server{Exports: nbd.Devices{"img": dev}}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

// TestRedialRefusesAnotherContent: a connection dialled again is taken
// while the upstream serves what the first one did, and refused (with
// what it serves now) once the same name serves another content.
func TestRedialRefusesAnotherContent(t *testing.T) {
	ctx := context.Background()
	a, b := block.NewMemory(imageSize), block.NewMemory(imageSize)
	must(t, a.WriteAt(ctx, content(1), 0, 0))
	must(t, b.WriteAt(ctx, content(2), 0, 0))
	addrs := []string{serveDevice(t, a), serveDevice(t, b)}
	var which atomic.Int32
	dial := func(ctx context.Context) (*nbd.Client, error) {
		return nbd.Dial(ctx, "tcp", addrs[which.Load()], "img")
	}
	first, err := dial(ctx)
	must(t, err)
	defer first.Close()
	for _, fp := range []struct {
		name    string
		fp      hostexport.Fingerprint
		refuses bool // the two contents have the same size and description
	}{{"identity", hostexport.Identity, true}, {"version", hostexport.Version, false}} {
		t.Run(fp.name, func(t *testing.T) {
			want, err := fp.fp(ctx, "img", first)
			must(t, err)
			redial := hostexport.Redial("img", want, fp.fp, dial)
			which.Store(0)
			c, err := redial(ctx)
			if err != nil {
				t.Fatalf("the same upstream dialled again: %v", err)
			}
			c.Close()
			which.Store(1)
			c, err = redial(ctx)
			switch {
			case fp.refuses && err == nil:
				c.Close()
				t.Fatal("another content under the same name was taken")
			case fp.refuses && !strings.Contains(err.Error(), "it now serves"):
				t.Fatalf("refused with %v, not what it serves now", err)
			case !fp.refuses && err != nil:
				t.Fatalf("the same version and size refused: %v", err)
			case !fp.refuses:
				c.Close()
			}
		})
	}
	// A dial that fails is the dial's error.
	boom := errors.New("boom")
	if _, err := hostexport.Redial("img", "x", hostexport.Version, func(context.Context) (*nbd.Client, error) { return nil, boom })(ctx); !errors.Is(err, boom) {
		t.Fatalf("a failed dial: %v", err)
	}
}
