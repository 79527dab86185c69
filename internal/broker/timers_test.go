package broker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// timerCounter counts the logoffs of each session timer.
type timerCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *timerCounter) TransactionStarted(string)                    {}
func (c *timerCounter) TransactionFinished(string)                   {}
func (c *timerCounter) TransactionDone(string, time.Duration, error) {}
func (c *timerCounter) Refused()                                     {}
func (c *timerCounter) Reconnected()                                 {}
func (c *timerCounter) TimerLogoff(timer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[timer]++
}

func (c *timerCounter) get(timer string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[timer]
}

// TestSessionTimersLogOff runs on a synctest bubble: with the group's
// disconnected_logoff at 10m and max_session at 20m, a session
// disconnected for more than 10 minutes is logged off through its VDA at
// the first timer sweep after that, one that reconnected in time is not,
// and active sessions are logged off at the first sweep past 20 minutes;
// each VDA logoff once, each counted under its timer. (Each minute in the
// bubble runs the broker's loops for real: an hour took 52 s under -race.)
func TestSessionTimersLogOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const disconnected, maxSession = 10 * time.Minute, 20 * time.Minute
		cfg := testSite(10, 250)
		cfg.DeliveryGroups[0].SessionTimers = site.SessionTimers{DisconnectedLogoff: site.Duration(disconnected), MaxSession: site.Duration(maxSession)}
		counts := &timerCounter{counts: map[string]int{}}
		mod := func(c *broker.Config) {
			c.HeartbeatInterval = 3 * time.Second
			c.HeartbeatTimeout = 24 * time.Hour
			c.Observer = counts
		}
		s := sitetest.New(t, sitetest.Options{Config: cfg, Registered: true, Broker: mod})
		ctx := context.Background()
		b := s.Broker
		event := func(l *broker.Launch, c broker.SessionChange) {
			t.Helper()
			if err := b.SessionEvent(ctx, broker.SessionEvent{Machine: l.Session.Machine, SessionID: l.Session.ID, Change: c}); err != nil {
				t.Fatal(err)
			}
		}
		launch := func(user string) *broker.Launch {
			t.Helper()
			l, err := b.Launch(ctx, broker.LaunchRequest{User: user, Resource: "calc"})
			if err != nil {
				t.Fatal(err)
			}
			event(l, broker.ChangeLogon)
			return l
		}
		gone, back, active := launch("u0001"), launch("u0002"), launch("u0003")
		event(gone, broker.ChangeDisconnect)
		event(back, broker.ChangeDisconnect)
		run(t, b)

		advance(disconnected)
		event(back, broker.ChangeReconnect)
		if got := session(t, s.Store, gone.Session.ID).State; got != site.SessionDisconnected {
			t.Fatalf("a session disconnected for exactly the timer is %s, want still disconnected", got)
		}
		advance(broker.TimerSweepInterval + time.Second)
		if got := session(t, s.Store, gone.Session.ID).State; got != site.SessionLoggedOff {
			t.Fatalf("a session disconnected past disconnected_logoff is %s, want logged off", got)
		}
		if got, want := s.Control.Logoffs(), []string{gone.Session.ID}; !slices.Equal(got, want) {
			t.Fatalf("VDA logoffs %v, want %v", got, want)
		}
		for _, l := range []*broker.Launch{back, active} {
			if got := session(t, s.Store, l.Session.ID).State; got != site.SessionActive {
				t.Fatalf("session %s is %s, want active", l.Session.User, got)
			}
		}
		if got := counts.get(broker.TimerDisconnectedLogoff); got != 1 {
			t.Fatalf("%d disconnected_logoff logoffs counted, want 1", got)
		}

		advance(maxSession - disconnected)
		advance(broker.TimerSweepInterval)
		for _, l := range []*broker.Launch{back, active} {
			if got := session(t, s.Store, l.Session.ID).State; got != site.SessionLoggedOff {
				t.Fatalf("session %s past max_session is %s, want logged off", l.Session.User, got)
			}
		}
		logoffs := s.Control.Logoffs()
		slices.Sort(logoffs)
		want := []string{gone.Session.ID, back.Session.ID, active.Session.ID}
		slices.Sort(want)
		if !slices.Equal(logoffs, want) {
			t.Fatalf("VDA logoffs %v, want each session once: %v", logoffs, want)
		}
		if got := counts.get(broker.TimerMaxSession); got != 2 {
			t.Fatalf("%d max_session logoffs counted, want 2", got)
		}
	})
}

// TestPrepareCarriesIdleTimer: the VDA hears of the group's
// idle_disconnect in the prepare of each launch.
func TestPrepareCarriesIdleTimer(t *testing.T) {
	cfg := testSite(3, 250)
	cfg.DeliveryGroups[0].SessionTimers.IdleDisconnect = site.Duration(15 * time.Minute)
	s := sitetest.New(t, sitetest.Options{Config: cfg, Registered: true})
	ctx := context.Background()
	for _, res := range []string{"calc", "vdi"} {
		if _, err := s.Broker.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: res}); err != nil {
			t.Fatal(err)
		}
		p, ok := s.Control.LastPrepared()
		want := 15 * time.Minute
		if res == "vdi" {
			want = 0 // the VDI group has no idle timer
		}
		if !ok || p.IdleDisconnect != want {
			t.Fatalf("prepare of %s: idle %v, want %v", res, p.IdleDisconnect, want)
		}
	}
}

// TestSessionTimersWithThreeBrokers: three brokers on one PostgreSQL
// site DB, each seeing the machines registered, sweep the same
// disconnected sessions past their timer: each session ends once, and
// its VDA is asked once, by the broker whose transaction ended it.
func TestSessionTimersWithThreeBrokers(t *testing.T) {
	const n = 20
	cfg := testSite(n, 250)
	cfg.DeliveryGroups[0].SessionTimers.DisconnectedLogoff = site.Duration(10 * time.Minute)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var controls []*sitetest.Control
	brokers, stores := pgBrokers(t, cfg, 3, func(c *broker.Config) {
		ctl := sitetest.NewControl()
		controls = append(controls, ctl)
		c.Control, c.Now = ctl, clock
		c.HeartbeatInterval, c.HeartbeatTimeout = 150*time.Millisecond, 24*time.Hour
	})
	ctx := context.Background()
	var ids []string
	for i := 1; i <= n; i++ {
		l, err := brokers[0].Launch(ctx, broker.LaunchRequest{User: fmt.Sprintf("u%04d", i), Resource: "calc"})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []broker.SessionChange{broker.ChangeLogon, broker.ChangeDisconnect} {
			if err := brokers[0].SessionEvent(ctx, broker.SessionEvent{Machine: l.Session.Machine, SessionID: l.Session.ID, Change: c}); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, l.Session.ID)
	}
	for _, b := range brokers {
		run(t, b)
	}
	mu.Lock()
	now = now.Add(11 * time.Minute)
	mu.Unlock()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for _, id := range ids {
		for session(t, stores[0], id).State != site.SessionLoggedOff {
			select {
			case <-deadline:
				t.Fatalf("session %s is still %s 30 s after its timer", id, session(t, stores[0], id).State)
			case <-tick.C:
			}
		}
	}
	asked := map[string]int{}
	for _, c := range controls {
		for _, id := range c.Logoffs() {
			asked[id]++
		}
	}
	for i, c := range controls {
		t.Logf("broker %d asked %d logoffs", i, len(c.Logoffs()))
	}
	for _, id := range ids {
		if asked[id] != 1 {
			t.Errorf("session %s: the VDA was asked to log it off %d times, want once", id, asked[id])
		}
	}
}
