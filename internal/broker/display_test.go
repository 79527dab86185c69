package broker_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// TestDisplayTarget: the display of a user's live session is at its
// machine's registered control URL, without the control token; another
// user's session, a made-up ID and an ended session are all not found,
// alike; a session whose machine is not registered is unavailable.
func TestDisplayTarget(t *testing.T) {
	h := newHarness(t, 3, 4, nil)
	ctx := context.Background()
	l, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "vdi"})
	if err != nil {
		t.Fatal(err)
	}
	id, machine := l.Session.ID, l.Session.Machine

	t.Run("own live session", func(t *testing.T) {
		c, err := h.b.DisplayTarget(ctx, "u0001", id)
		if err != nil {
			t.Fatal(err)
		}
		want := sitetest.Registration(0, machine).Control
		want.Token = ""
		if c != want {
			t.Fatalf("DisplayTarget: %+v, want %+v (no control token)", c, want)
		}
	})
	t.Run("not found alike", func(t *testing.T) {
		for _, tc := range []struct{ name, user, id string }{
			{"another user's session", "u0002", id},
			{"a made-up ID", "u0001", "no-such-session"},
			{"an unknown user", "nobody", id},
		} {
			_, err := h.b.DisplayTarget(ctx, tc.user, tc.id)
			if site.ErrorCode(err) != site.ENotFound {
				t.Errorf("%s: %v, want %s", tc.name, err, site.ENotFound)
			}
			if want := site.NotFound(site.KindSession, tc.id).Error(); err != nil && err.Error() != want {
				t.Errorf("%s: %q, want the answer of any missing session, %q", tc.name, err, want)
			}
		}
	})
	t.Run("machine not registered", func(t *testing.T) {
		err := h.store.Update(ctx, func(tx site.Tx) error {
			st, err := tx.MachineStatus(ctx, machine)
			if err != nil {
				return err
			}
			st.Registration = site.Unregistered
			return tx.SetMachineStatus(ctx, machine, st)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.register(machine) })
		if _, err := h.b.DisplayTarget(ctx, "u0001", id); site.ErrorCode(err) != site.EUnavailable {
			t.Fatalf("a session on an unregistered machine: %v, want %s", err, site.EUnavailable)
		}
	})
	t.Run("ended session", func(t *testing.T) {
		if err := h.b.Logoff(ctx, "u0001", id); err != nil {
			t.Fatal(err)
		}
		if _, err := h.b.DisplayTarget(ctx, "u0001", id); site.ErrorCode(err) != site.ENotFound {
			t.Fatalf("a logged-off session: %v, want %s", err, site.ENotFound)
		}
	})
}

// cutStore is a site DB that stops answering while down is set.
type cutStore struct {
	site.Store
	down atomic.Bool
}

func (c *cutStore) cut() error {
	if c.down.Load() {
		return site.Errorf(site.EUnavailable, "site DB cut off (test)")
	}
	return nil
}

func (c *cutStore) View(ctx context.Context, fn func(site.Tx) error) error {
	if err := c.cut(); err != nil {
		return err
	}
	return c.Store.View(ctx, fn)
}

func (c *cutStore) Update(ctx context.Context, fn func(site.Tx) error) error {
	if err := c.cut(); err != nil {
		return err
	}
	return c.Store.Update(ctx, fn)
}

func (c *cutStore) Place(ctx context.Context, p site.Placement) (site.Placed, error) {
	if err := c.cut(); err != nil {
		return site.Placed{}, err
	}
	return c.Store.Place(ctx, p)
}

// TestDisplayTargetDuringOutage: while the site DB is down, a broker on
// the Local Host Cache resolves displays from its copy: a session made
// before the outage and one made during it.
func TestDisplayTargetDuringOutage(t *testing.T) {
	ctx := context.Background()
	s := sitetest.New(t, sitetest.Options{Config: testSite(3, 4), NoBroker: true})
	// A copy is usable with the site's token key.
	if _, err := site.EnsureSecret(ctx, s.Store, site.SecretTokenKey, func() ([]byte, error) { return []byte(strings.Repeat("k", 32)), nil }); err != nil {
		t.Fatal(err)
	}
	primary := &cutStore{Store: s.Store}
	cache, err := lhc.Open(ctx, lhc.Options{Open: func(context.Context) (site.Store, error) { return primary, nil },
		Dir: t.TempDir(), ProbeInterval: 20 * time.Millisecond, OutageAfter: 100 * time.Millisecond, RecoverAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	// The machines, registered once, stay this broker's however slow the
	// test runs.
	b, err := broker.New(ctx, broker.Config{Store: cache, Control: sitetest.NewControl(), AllowAddressChange: true, HeartbeatTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cache.Attach(b)
	for i, m := range s.Config.Machines {
		if err := b.Register(ctx, sitetest.Registration(i, m.Name)); err != nil {
			t.Fatal(err)
		}
	}
	before, err := b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "vdi"})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := cache.Force(ctx, true); err != nil {
		t.Fatal(err)
	}
	primary.down.Store(true)
	if !cache.InOutage() {
		t.Fatal("not in outage mode once forced")
	}
	during, err := b.Launch(ctx, broker.LaunchRequest{User: "u0002", Resource: "vdi"})
	if err != nil {
		t.Fatalf("launch in the outage: %v", err)
	}
	for _, l := range []*broker.Launch{before, during} {
		c, err := b.DisplayTarget(ctx, l.Session.User, l.Session.ID)
		if err != nil {
			t.Fatalf("display of %s's session in the outage: %v", l.Session.User, err)
		}
		if c.Machine != l.Session.Machine || c.URL != sitetest.Registration(0, l.Session.Machine).Control.URL || c.Token != "" {
			t.Errorf("display of %s's session on %s in the outage: %+v", l.Session.User, l.Session.Machine, c)
		}
	}
	if _, err := b.DisplayTarget(ctx, "u0002", before.Session.ID); site.ErrorCode(err) != site.ENotFound {
		t.Errorf("another user's session in the outage: %v, want %s", err, site.ENotFound)
	}
}

// leaderElsewhere is a Delegate whose leader is another broker, which
// resolves every display to one machine.
type leaderElsewhere struct {
	broker.Delegate
	asked atomic.Int32
}

func (d *leaderElsewhere) Leader() (string, bool) { return "b2", true }

func (d *leaderElsewhere) DisplayTarget(_ context.Context, user, id string) (broker.Control, error) {
	d.asked.Add(1)
	return broker.Control{Machine: "at-the-leader", URL: "https://leader.invalid/"}, nil
}

// TestDisplayTargetGoesToTheLeader: while another broker leads the zone
// (a site-DB outage), displays are resolved there, as launches are; a
// request the leader was delegated is resolved here.
func TestDisplayTargetGoesToTheLeader(t *testing.T) {
	h := newHarness(t, 3, 4, nil)
	ctx := context.Background()
	l, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "vdi"})
	if err != nil {
		t.Fatal(err)
	}
	d := &leaderElsewhere{}
	h.b.SetDelegate(d)
	if c, err := h.b.DisplayTarget(ctx, "u0001", l.Session.ID); err != nil || c.Machine != "at-the-leader" || d.asked.Load() != 1 {
		t.Fatalf("DisplayTarget with the leader elsewhere: %+v, %v (leader asked %d times)", c, err, d.asked.Load())
	}
	c, err := h.b.DisplayTarget(broker.DelegatedContext(ctx), "u0001", l.Session.ID)
	if err != nil || c.Machine != l.Session.Machine || d.asked.Load() != 1 {
		t.Fatalf("DisplayTarget delegated here: %+v, %v (leader asked %d times)", c, err, d.asked.Load())
	}
}
