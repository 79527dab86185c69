package broker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// awayLeader is a Delegate whose leader is another broker while away is
// set; it is never asked to broker anything in these tests.
type awayLeader struct {
	broker.Delegate
	away atomic.Bool
}

func (d *awayLeader) Leader() (string, bool) { return "b2", d.away.Load() }

// syncBuffer is a log destination that handlers may write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), substr)
}

// TestRegistrationRefusedForAnotherLeaderLogsOnce: while another broker
// leads the zone, every VDA heartbeat's registration is refused with
// EUnavailable, and only the first refusal is logged at info; once a
// registration is taken again, the next refusal is logged again.
func TestRegistrationRefusedForAnotherLeaderLogsOnce(t *testing.T) {
	var logs syncBuffer
	h := newHarness(t, 3, 4, func(c *broker.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	d := &awayLeader{}
	h.b.SetDelegate(d)
	ctx := context.Background()
	machine := h.cfg.Machines[0].Name
	const refused = "registration refused: another broker leads the zone"

	d.away.Store(true)
	for range 20 {
		err := h.b.Register(ctx, sitetest.Registration(0, machine))
		if site.ErrorCode(err) != site.EUnavailable {
			t.Fatalf("registration while b2 leads the zone: %v, want %s", err, site.EUnavailable)
		}
	}
	if n := logs.count(refused); n != 1 {
		t.Fatalf("20 refused registrations logged %d times at info, want once:\n%s", n, logs.b.String())
	}

	d.away.Store(false)
	if err := h.b.Register(ctx, sitetest.Registration(0, machine)); err != nil {
		t.Fatalf("registration once this broker leads again: %v", err)
	}
	d.away.Store(true)
	for range 5 {
		h.b.Register(ctx, sitetest.Registration(0, machine))
	}
	if n := logs.count(refused); n != 2 {
		t.Fatalf("refusals after registrations were taken again logged %d times in all, want 2:\n%s", n, logs.b.String())
	}
}
