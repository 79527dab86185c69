package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// outcome is what one launch got.
type outcome struct {
	via int // the broker it went through
	l   *broker.Launch
	err error
}

// launchTogether launches resource for user n times at once, launch i
// through brokers[i%len(brokers)], and returns what each got.
func launchTogether(brokers []*broker.Broker, user, resource string, n int) []outcome {
	out := make([]outcome, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			via := i % len(brokers)
			l, err := brokers[via].Launch(context.Background(), broker.LaunchRequest{User: user, Resource: resource, ClientName: "LAPTOP-1"})
			out[i] = outcome{via, l, err}
		})
	}
	close(start)
	wg.Wait()
	return out
}

// liveSessions returns the user's live sessions in the site DB.
func liveSessions(t *testing.T, store site.Store, user string) []site.Session {
	t.Helper()
	ctx := context.Background()
	var live []site.Session
	err := store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Sessions().List(ctx, site.SessionFilter{User: user, Live: true}, site.ListOptions{})
		live = p.Items
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return live
}

// wantOneSession fails the test unless the user holds exactly one live
// session in the site DB, every launch got it with a ticket of its own,
// exactly one of them made it, and its machine counts it once. Launches
// that failed fail the test unless failures allows their error code.
func wantOneSession(t *testing.T, store site.Store, user string, got []outcome, failures ...string) site.Session {
	t.Helper()
	live := liveSessions(t, store, user)
	if len(live) != 1 {
		var what []string
		for _, s := range live {
			what = append(what, fmt.Sprintf("%s on %s (%s)", s.ID, s.Machine, s.State))
		}
		t.Fatalf("%s holds %d live sessions after %d concurrent launches, want 1: %v", user, len(live), len(got), what)
	}
	sess := live[0]
	tickets := map[string]bool{}
	made := 0
	for i, o := range got {
		if o.err != nil {
			code := site.ErrorCode(o.err)
			allowed := false
			for _, f := range failures {
				allowed = allowed || code == f
			}
			if !allowed {
				t.Errorf("launch %d (broker %d) failed: %v", i, o.via, o.err)
			}
			continue
		}
		if o.l.Session.ID != sess.ID || o.l.Session.Machine != sess.Machine {
			t.Errorf("launch %d (broker %d) got session %s on %s, want %s on %s", i, o.via, o.l.Session.ID, o.l.Session.Machine, sess.ID, sess.Machine)
		}
		if o.l.Ticket == "" || tickets[o.l.Ticket] {
			t.Errorf("launch %d got ticket %q: empty or another launch's", i, o.l.Ticket)
		}
		tickets[o.l.Ticket] = true
		if !o.l.Reconnected {
			made++
		}
	}
	if len(tickets) > 0 && made != 1 {
		t.Errorf("%d launches say they made the session, want 1 (the others went back to it)", made)
	}
	wantCounted(t, store, sess.Machine)
	return sess
}

// wantCounted fails the test unless the machine's status counts its live
// sessions and its pending ones, each once.
func wantCounted(t *testing.T, store site.Store, machine string) {
	t.Helper()
	ctx := context.Background()
	err := store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Sessions().List(ctx, site.SessionFilter{Machine: machine, Live: true}, site.ListOptions{})
		if err != nil {
			return err
		}
		pending := 0
		for _, s := range p.Items {
			if s.State == site.SessionPending {
				pending++
			}
		}
		st, err := tx.MachineStatus(ctx, machine)
		if err != nil {
			return err
		}
		if st.Sessions != len(p.Items) || st.LogonsInProgress != pending {
			t.Errorf("machine %s counts %d sessions, %d logging on; it holds %d, %d pending", machine, st.Sessions, st.LogonsInProgress, len(p.Items), pending)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// slowClaims delays every placement that offers a machine to claim, as
// a site DB does whose claims wait for their machines' locks, so that
// concurrent launches overlap: a launch that finds no machine free
// looks for the user's session while another still claims one.
type slowClaims struct {
	site.Store
	delay time.Duration
}

func (s *slowClaims) Place(ctx context.Context, p site.Placement) (site.Placed, error) {
	if len(p.Candidates) > 0 {
		// About time passing: a slow claim, for concurrent launches to
		// overlap; no condition to wait for.
		time.Sleep(s.delay)
	}
	return s.Store.Place(ctx, p)
}

// TestConcurrentLaunchesOfOneUserGiveOneSession: a double click (or two
// tabs) launching one resource many times at once gives one session,
// every launch a ticket for it, whatever the resource's kind and the
// group's reconnection policy, and when only one machine is free.
func TestConcurrentLaunchesOfOneUserGiveOneSession(t *testing.T) {
	const launches = 16
	for _, c := range []struct {
		name, resource string
		// fill launches the resource for this many other users first.
		fill int
	}{
		{"application, reconnect always", "calc", 0},
		{"pooled desktop, disconnected only", "vdi", 0},
		{"assigned desktop", "mine", 0},
		{"the last free pooled desktop", "vdi", 19},
		{"the last free assigned desktop", "mine", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := sitetest.New(t, sitetest.Options{Config: testSite(30, 250), NoBroker: true})
			b, err := broker.New(context.Background(), broker.Config{Store: &slowClaims{Store: s.Store, delay: 5 * time.Millisecond},
				Control: s.Control, AllowAddressChange: true})
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range s.Config.Machines {
				if err := b.Register(context.Background(), sitetest.Registration(i, m.Name)); err != nil {
					t.Fatal(err)
				}
			}
			for i := range c.fill {
				if _, err := b.Launch(context.Background(), broker.LaunchRequest{User: fmt.Sprintf("u%04d", i+2), Resource: c.resource}); err != nil {
					t.Fatal(err)
				}
			}
			got := launchTogether([]*broker.Broker{b}, "u0001", c.resource, launches)
			sess := wantOneSession(t, s.Store, "u0001", got)
			if n := len(s.Control.Prepared(sess.Machine)); n < launches {
				t.Errorf("machine %s was prepared %d times, want once per launch (%d)", sess.Machine, n, launches)
			}
		})
	}

	t.Run("applications sharing a session", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, 3, 250, nil)
		var got []outcome
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, res := range []string{"calc", "secret"} {
			wg.Go(func() {
				o := launchTogether([]*broker.Broker{h.b}, "u0001", res, 8)
				mu.Lock()
				got = append(got, o...)
				mu.Unlock()
			})
		}
		wg.Wait()
		wantOneSession(t, h.store, "u0001", got)
	})
}

// TestConcurrentLaunchesOfOneUserGiveOneSessionOnPostgres: three brokers
// sharing one PostgreSQL site DB, their views of the machines stale,
// take many launches of one resource by one user at once: one session,
// every launch a ticket for it.
func TestConcurrentLaunchesOfOneUserGiveOneSessionOnPostgres(t *testing.T) {
	const launches = 24
	for _, c := range []struct {
		name, resource string
		fill           int
	}{
		{"application", "calc", 0},
		{"pooled desktop", "vdi", 0},
		{"assigned desktop", "mine", 0},
		{"the last free pooled desktop", "vdi", 19},
	} {
		t.Run(c.name, func(t *testing.T) {
			brokers, stores := pgBrokers(t, testSite(30, 250), 3)
			// The others' launches go through broker 0: brokers 1 and 2
			// still hold their machines free.
			for i := range c.fill {
				if _, err := brokers[0].Launch(context.Background(), broker.LaunchRequest{User: fmt.Sprintf("u%04d", i+2), Resource: c.resource}); err != nil {
					t.Fatal(err)
				}
			}
			for round := range 3 {
				user := fmt.Sprintf("u%04d", 21+round)
				got := launchTogether(brokers, user, c.resource, launches)
				sess := wantOneSession(t, stores[0], user, got)
				if c.fill > 0 {
					// Free the desktop for the next round.
					if err := brokers[round%3].Logoff(context.Background(), user, sess.ID); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// placeHook is a site DB that runs after once, when a placement of user
// found no session to go back to and no machine to claim: another
// launch of the user, through another broker, gets in between.
type placeHook struct {
	site.Store
	user  string
	once  sync.Once
	after func()
}

func (s *placeHook) Place(ctx context.Context, p site.Placement) (site.Placed, error) {
	placed, err := s.Store.Place(ctx, p)
	if err == nil && !placed.Placed() && p.Session.User == s.user {
		s.once.Do(s.after)
	}
	return placed, err
}

// TestALaunchThatFoundNoRoomGoesBackToTheSessionMadeMeanwhile: a launch
// whose first placement found the user no session and no room (its
// broker's view was stale, or the first group was full) goes on to
// other machines; when another launch of the user, through another
// broker, has made a session meanwhile, it goes back to that one.
func TestALaunchThatFoundNoRoomGoesBackToTheSessionMadeMeanwhile(t *testing.T) {
	ctx := context.Background()

	t.Run("stale candidates", func(t *testing.T) {
		s := sitetest.New(t, sitetest.Options{Config: testSite(10, 250), Registered: true})
		hook := &placeHook{Store: s.Store, user: "u0001"}
		b1, err := broker.New(ctx, broker.Config{Store: hook, Control: s.Control, AllowAddressChange: true})
		if err != nil {
			t.Fatal(err)
		}
		b2 := s.Broker
		// Four desktops taken through b2: b1 holds them free and offers
		// them first.
		for i := 2; i <= 5; i++ {
			if _, err := b2.Launch(ctx, broker.LaunchRequest{User: fmt.Sprintf("u%04d", i), Resource: "vdi"}); err != nil {
				t.Fatal(err)
			}
		}
		var other *broker.Launch
		hook.after = func() {
			if other, err = b2.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "vdi"}); err != nil {
				t.Errorf("the launch in between: %v", err)
			}
		}
		l, err := b1.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "vdi"})
		if err != nil {
			t.Fatal(err)
		}
		if other == nil {
			t.Fatal("b1's first placement placed: the test did not get a launch in between")
		}
		wantOneSession(t, s.Store, "u0001", []outcome{{via: 2, l: other}, {via: 1, l: l}})
	})

	t.Run("a second delivery group", func(t *testing.T) {
		cfg := testSite(10, 250)
		// "tool" is published in Annex (one machine, one session), which
		// comes first, and Apps.
		cfg.Catalogs = append(cfg.Catalogs, site.Catalog{Name: "small", Kind: site.MultiSession, Zone: "z"})
		cfg.Machines = append(cfg.Machines, site.Machine{Name: "small-01", Catalog: "small", Address: "small-01.test:3389", MaxSessions: 1})
		cfg.DeliveryGroups = append(cfg.DeliveryGroups, site.NewDeliveryGroup("Annex", "small"))
		cfg.Applications = append(cfg.Applications, site.Resource{Kind: site.Application, Name: "tool", DisplayName: "Tool",
			CommandLine: "/usr/bin/tool", DeliveryGroups: []string{"Annex", "Apps"}})
		cfg.Entitlements = append(cfg.Entitlements, site.Entitlement{Name: "annex", DeliveryGroup: "Annex", Groups: []string{"all"}})
		s := sitetest.New(t, sitetest.Options{Config: cfg, Registered: true})
		hook := &placeHook{Store: s.Store, user: "u0001"}
		b1, err := broker.New(ctx, broker.Config{Store: hook, Control: s.Control, AllowAddressChange: true})
		if err != nil {
			t.Fatal(err)
		}
		b2 := s.Broker
		// small-01 taken through b2: b1 holds it free.
		if l, err := b2.Launch(ctx, broker.LaunchRequest{User: "u0002", Resource: "tool"}); err != nil || l.Session.Machine != "small-01" {
			t.Fatalf("u0002's launch: %+v, %v; want small-01", l, err)
		}
		var other *broker.Launch
		hook.after = func() {
			if other, err = b2.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "tool"}); err != nil {
				t.Errorf("the launch in between: %v", err)
			}
		}
		l, err := b1.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "tool"})
		if err != nil {
			t.Fatal(err)
		}
		if other == nil {
			t.Fatal("b1's first placement placed: the test did not get a launch in between")
		}
		wantOneSession(t, s.Store, "u0001", []outcome{{via: 2, l: other}, {via: 1, l: l}})
	})
}

// TestDoubleLaunchKeepsThePolicies: a double launch is one session, but
// a launch once the user has logged on still follows the group's
// policy: disconnected-only gives a second desktop rather than take the
// active one over, always goes back to it.
func TestDoubleLaunchKeepsThePolicies(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, 3, 250, nil)
	for _, c := range []struct {
		resource string
		second   bool
	}{{"vdi", true}, {"calc", false}} {
		got := launchTogether([]*broker.Broker{h.b}, "u0002", c.resource, 4)
		sess := wantOneSession(t, h.store, "u0002", got)
		if err := h.b.SessionEvent(ctx, broker.SessionEvent{Machine: sess.Machine, SessionID: sess.ID, Change: broker.ChangeLogon}); err != nil {
			t.Fatal(err)
		}
		l, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0002", Resource: c.resource})
		if err != nil {
			t.Fatal(err)
		}
		if second := l.Session.ID != sess.ID; second != c.second {
			t.Errorf("%s: a launch once logged on got session %s (the first: %s); want a second session: %v", c.resource, l.Session.ID, sess.ID, c.second)
		}
		for _, s := range liveSessions(t, h.store, "u0002") {
			if err := h.b.Logoff(ctx, "u0002", s.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
}
