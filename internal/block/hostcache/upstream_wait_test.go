package hostcache_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block/hostcache"
)

// TestUpstreamWait: with Wait, a read while upstream is down waits for it
// to come back and succeeds (a device booting from it sees a pause, not
// an I/O error); one that waits past Wait fails with ErrUpstreamDown.
func TestUpstreamWait(t *testing.T) {
	content := randomContent(4 * bs)
	mem := upstream(t, content)
	first := newConn(mem)
	var reachable atomic.Bool
	u := hostcache.NewUpstream(first, func(context.Context) (hostcache.Conn, error) {
		if !reachable.Load() {
			return nil, errors.New("connection refused")
		}
		return newConn(mem), nil
	}, hostcache.UpstreamOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Wait: 5 * time.Second})
	defer u.Close()
	first.kill()

	// Down: the read waits, and succeeds once upstream is back.
	errc := make(chan error, 1)
	p := make([]byte, bs)
	go func() { errc <- u.ReadAt(context.Background(), p, bs) }()
	select {
	case err := <-errc:
		t.Fatalf("a read while upstream is down returned at once: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	reachable.Store(true)
	if err := <-errc; err != nil || !bytes.Equal(p, content[bs:2*bs]) {
		t.Fatalf("a read that waited for upstream: %v", err)
	}
	if u.Reconnects() != 1 || u.Failures() != 1 {
		t.Fatalf("%d reconnects, %d failures", u.Reconnects(), u.Failures())
	}

	// Down for longer than Wait: the read fails with ErrUpstreamDown.
	lost := newConn(mem)
	short := hostcache.NewUpstream(lost, func(context.Context) (hostcache.Conn, error) {
		return nil, errors.New("connection refused")
	}, hostcache.UpstreamOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Wait: 200 * time.Millisecond})
	defer short.Close()
	lost.kill()
	start := time.Now()
	err := short.ReadAt(context.Background(), p, 0)
	if waited := time.Since(start); !errors.Is(err, hostcache.ErrUpstreamDown) || waited < 150*time.Millisecond || waited > 3*time.Second {
		t.Fatalf("a read while upstream stays down: %v after %v; want ErrUpstreamDown after about 200ms", err, waited)
	}
}
