package lhc

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// TestConcurrentLaunchesOfOneUserGiveOneSession: a broker on the Local
// Host Cache takes many launches of one resource by one user at once,
// while the site DB answers and in outage mode: each resource gets one
// session, every launch a ticket for it, and the outage's session is
// written back once.
func TestConcurrentLaunchesOfOneUserGiveOneSession(t *testing.T) {
	ctx := context.Background()
	primary, s, b := brokerOnCopy(t)

	// launchAll launches each resource for user 16 times at once and
	// returns the one session each got.
	launchAll := func(t *testing.T, user string, resources ...string) map[string]string {
		t.Helper()
		const launches = 16
		var mu sync.Mutex
		got := map[string]map[string]bool{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, res := range resources {
			got[res] = map[string]bool{}
			for range launches {
				wg.Go(func() {
					<-start
					l, err := b.Launch(ctx, broker.LaunchRequest{User: user, Resource: res})
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						t.Errorf("launch %s: %v", res, err)
						return
					}
					got[res][l.Session.ID] = true
				})
			}
		}
		close(start)
		wg.Wait()
		out := map[string]string{}
		for res, ids := range got {
			if len(ids) != 1 {
				t.Errorf("%s's %d launches of %s got %d sessions, want 1: %v", user, launches, res, len(ids), ids)
			}
			for id := range ids {
				out[res] = id
			}
		}
		return out
	}
	// wantLive fails the test unless the user's live sessions in store
	// are those of sessions.
	wantLive := func(t *testing.T, store site.Store, user string, sessions map[string]string) {
		t.Helper()
		var live []site.Session
		err := store.View(ctx, func(tx site.Tx) error {
			p, err := tx.Sessions().List(ctx, site.SessionFilter{User: user, Live: true}, site.ListOptions{})
			live = p.Items
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(live) != len(sessions) {
			t.Fatalf("%s holds %d live sessions, want %d: %+v", user, len(live), len(sessions), live)
		}
		for _, sess := range live {
			if sessions[sess.Resource] != sess.ID {
				t.Errorf("%s's live session %s of %s was not the one its launches got (%s)", user, sess.ID, sess.Resource, sessions[sess.Resource])
			}
		}
	}
	resources := []string{"office-writer-001", demo.PooledDesktop}

	t.Run("site DB up", func(t *testing.T) {
		user := demo.UserName(1)
		got := launchAll(t, user, resources...)
		wantLive(t, s, user, got)
		wantLive(t, primary, user, got)
	})

	t.Run("outage", func(t *testing.T) {
		if _, err := s.Force(ctx, true); err != nil {
			t.Fatal(err)
		}
		user := demo.UserName(2)
		got := launchAll(t, user, resources...)
		wantLive(t, s, user, got)
		if _, err := s.Force(ctx, false); err != nil {
			t.Fatal(err)
		}
		if s.InOutage() {
			t.Fatal("still in outage mode after the force ended")
		}
		wantLive(t, primary, user, got)
	})
}

// brokerOnCopy is a broker on a Store over the demo site (in a flaky
// site DB), every demo machine registered, and a copy taken.
func brokerOnCopy(t *testing.T) (*flaky, *Store, *broker.Broker) {
	t.Helper()
	ctx := context.Background()
	primary := newPrimary(t)
	s := open(t, primary, t.TempDir())
	// The machines, registered once, stay this broker's however slow the
	// test runs (a loaded machine under -race).
	b, err := broker.New(ctx, broker.Config{Store: s, Control: sitetest.NewControl(), AllowAddressChange: true, HeartbeatTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.Attach(b)
	for i, m := range demo.Site().Machines {
		if err := b.Register(ctx, sitetest.Registration(i, m.Name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.copyNow(); err != nil {
		t.Fatal(err)
	}
	return primary, s, b
}

// TestLaunchLostAtTheCutIsNotDoubled: a launch whose placement reached the
// site DB as it went away, and whose answer was lost (the user was told it
// failed), leaves a pending session there that the outage's copy lacks.
// The user launches again in the outage and is seated anew; once the site
// DB is back, the lost launch's session is ended, so that the user keeps
// one session and goes back to the outage's.
func TestLaunchLostAtTheCutIsNotDoubled(t *testing.T) {
	ctx := context.Background()
	primary, s, b := brokerOnCopy(t)
	var logged syncBuffer
	s.log = slog.New(slog.NewTextHandler(&logged, nil))
	user, desktop := demo.UserName(3), demo.PooledDesktop
	live := func(store site.Store) []site.Session {
		t.Helper()
		var out []site.Session
		err := store.View(ctx, func(tx site.Tx) error {
			p, err := tx.Sessions().List(ctx, site.SessionFilter{User: user, Live: true}, site.ListOptions{})
			out = p.Items
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	primary.loseAnswers.Store(true)
	if _, err := b.Launch(ctx, broker.LaunchRequest{User: user, Resource: desktop}); site.ErrorCode(err) != site.EUnavailable {
		t.Fatalf("the launch whose answer is lost: %v, want it unavailable", err)
	}
	primary.loseAnswers.Store(false)
	lost := live(primary)
	if len(lost) != 1 || lost[0].State != site.SessionPending {
		t.Fatalf("the lost launch left %+v in the site DB, want one pending session", lost)
	}

	primary.down.Store(true)
	if _, err := s.Force(ctx, true); err != nil {
		t.Fatal(err)
	}
	l, err := b.Launch(ctx, broker.LaunchRequest{User: user, Resource: desktop})
	if err != nil {
		t.Fatalf("the launch in the outage: %v", err)
	}
	primary.down.Store(false)
	if _, err := s.Force(ctx, false); err != nil {
		t.Fatal(err)
	}
	if s.InOutage() {
		t.Fatal("still in outage mode after the force ended")
	}
	after := live(primary)
	if len(after) != 1 || after[0].ID != l.Session.ID {
		t.Fatalf("after the outage %s holds %+v in the site DB; want only the outage's session %s (the lost launch's %s ended)",
			user, after, l.Session.ID, lost[0].ID)
	}
	// The session ended at recovery is counted, and the recovery's log
	// line names it.
	if got := s.Status().EndedAtRecovery; got != 1 {
		t.Errorf("%d sessions counted as ended at recovery, want 1", got)
	}
	if line := logged.line("outage over"); !strings.Contains(line, "sessions_ended_at_recovery=1") || !strings.Contains(line, lost[0].ID) {
		t.Errorf("the recovery's log line does not count and name the session ended: %q", line)
	}
	again, err := b.Launch(ctx, broker.LaunchRequest{User: user, Resource: desktop})
	if err != nil || again.Session.ID != l.Session.ID {
		t.Fatalf("the next launch: %+v, %v; want it back on %s", again, err, l.Session.ID)
	}
}

// TestPlacementUnderWayAsOutageBegins: a placement under way as outage
// mode begins, which outlasts the moment entering it waits for the calls
// to the site DB (drainWait), reaches the site DB and its launch is
// acknowledged during the outage. What it wrote is brought into the copy
// as it ends, so that the user's next launch, in the outage, goes back to
// its session: without that, the copy lacked it and the user got a second
// session, both live once the outage was written back (the doubles at the
// cut that the chaos tests once tolerated).
func TestPlacementUnderWayAsOutageBegins(t *testing.T) {
	ctx := context.Background()
	primary, s, b := brokerOnCopy(t)
	s.opts.CallTimeout = time.Minute // the placement is held, not cut off
	user, desktop := demo.UserName(6), demo.PooledDesktop
	primary.placing, primary.hold = make(chan struct{}, 1), make(chan struct{})
	type result struct {
		l   *broker.Launch
		err error
	}
	first := make(chan result, 1)
	go func() {
		l, err := b.Launch(ctx, broker.LaunchRequest{User: user, Resource: desktop})
		first <- result{l, err}
	}()
	<-primary.placing
	// Entering waits drainWait for the placement, then goes on without it.
	if _, err := s.Force(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !s.InOutage() {
		t.Fatal("not in outage mode")
	}
	close(primary.hold)
	r := <-first
	if r.err != nil {
		t.Fatalf("the launch under way as outage mode began: %v", r.err)
	}
	again, err := b.Launch(ctx, broker.LaunchRequest{User: user, Resource: desktop})
	if err != nil || again.Session.ID != r.l.Session.ID {
		t.Fatalf("the launch in the outage: %+v, %v; want it back on %s, placed in the site DB as outage mode began", again, err, r.l.Session.ID)
	}
	if _, err := s.Force(ctx, false); err != nil {
		t.Fatal(err)
	}
	var live []site.Session
	err = primary.View(ctx, func(tx site.Tx) error {
		p, err := tx.Sessions().List(ctx, site.SessionFilter{User: user, Live: true}, site.ListOptions{})
		live = p.Items
		return err
	})
	if err != nil || len(live) != 1 || live[0].ID != r.l.Session.ID {
		t.Fatalf("after the outage %s holds %+v in the site DB (%v), want only %s", user, live, err, r.l.Session.ID)
	}
}

// TestLaunchLostAtTheCutSeatedLater: as above, but the user is seated
// again by another broker (the zone's leader), whose session reaches the
// site DB after this broker recovered: the lost launch's session is
// watched after recovery and ended once it is seen, and left alone when
// nothing seats the user.
func TestLaunchLostAtTheCutSeatedLater(t *testing.T) {
	ctx := context.Background()
	primary, s, b := brokerOnCopy(t)
	lose := func(user string) site.Session {
		t.Helper()
		primary.loseAnswers.Store(true)
		defer primary.loseAnswers.Store(false)
		if _, err := b.Launch(ctx, broker.LaunchRequest{User: user, Resource: demo.PooledDesktop}); site.ErrorCode(err) != site.EUnavailable {
			t.Fatalf("the launch whose answer is lost: %v", err)
		}
		var out site.Session
		err := primary.View(ctx, func(tx site.Tx) error {
			p, err := tx.Sessions().List(ctx, site.SessionFilter{User: user, Live: true}, site.ListOptions{})
			if err == nil && len(p.Items) == 1 {
				out = p.Items[0]
			}
			return err
		})
		if err != nil || out.ID == "" {
			t.Fatalf("the lost launch's session: %+v, %v", out, err)
		}
		return out
	}
	seatedLater, alone := lose(demo.UserName(4)), lose(demo.UserName(5))

	if _, err := s.Force(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Force(ctx, false); err != nil {
		t.Fatal(err)
	}
	state := func(id string) site.SessionState {
		t.Helper()
		var sess site.Session
		if err := primary.View(ctx, func(tx site.Tx) (err error) { sess, err = tx.Sessions().Get(ctx, id); return err }); err != nil {
			t.Fatal(err)
		}
		return sess.State
	}
	if got := state(seatedLater.ID); got != site.SessionPending {
		t.Fatalf("after recovery, with its user seated nowhere else: %s, want pending", got)
	}
	// The leader's write-back: the user's session of the outage.
	now := time.Now().UTC().Truncate(time.Microsecond)
	other := seatedLater
	other.ID, other.Machine, other.CreatedAt, other.UpdatedAt = "leader-outage-session", "pooled-vda-02", now, now
	if err := primary.Update(ctx, func(tx site.Tx) error { return tx.Sessions().Create(ctx, other) }); err != nil {
		t.Fatal(err)
	}
	s.observe(ctx, 0, nil) // a probe's answer
	if got := state(seatedLater.ID); got != site.SessionLoggedOff {
		t.Errorf("the lost launch's session once its user was seated by the leader: %s, want logged off", got)
	}
	if got := s.Status().EndedAtRecovery; got != 1 {
		t.Errorf("%d sessions counted as ended at recovery and in the watch after it, want 1", got)
	}
	if got := state(alone.ID); got != site.SessionPending {
		t.Errorf("the lost launch's session of a user seated nowhere else: %s, want it left pending (to expire)", got)
	}
}

// syncBuffer is a log's output, written and read concurrently.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// line returns the first line that holds msg, "" if none does.
func (b *syncBuffer) line(msg string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range strings.Lines(b.buf.String()) {
		if strings.Contains(l, msg) {
			return l
		}
	}
	return ""
}

// TestNoNewSessionAfterHandover: once a broker in outage mode has handed
// its brokering to the zone's leader, a launch that still reaches its copy
// (it began before the handover) makes no session there, which the leader
// would never learn of: it is told to retry (through the leader). A
// broker that takes its zone over again (HoldNewSessions) makes sessions again.
func TestNoNewSessionAfterHandover(t *testing.T) {
	ctx := context.Background()
	_, s, b := brokerOnCopy(t)
	if _, err := s.Force(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Handover(ctx); err != nil {
		t.Fatal(err)
	}
	user := demo.UserName(7)
	if _, err := b.Launch(ctx, broker.LaunchRequest{User: user, Resource: demo.PooledDesktop}); site.ErrorCode(err) != site.EUnavailable {
		t.Fatalf("a launch after the handover: %v, want it unavailable (retry)", err)
	}
	if n, err := s.Journaled(ctx); err != nil || n != 0 {
		t.Fatalf("%d sessions journaled after the handover (%v), want none", n, err)
	}
	s.HoldNewSessions()
	s.mu.Lock()
	s.rebuildUntil = time.Time{} // every VDA came: no wait for them
	s.mu.Unlock()
	if _, err := b.Launch(ctx, broker.LaunchRequest{User: user, Resource: demo.PooledDesktop}); err != nil {
		t.Fatalf("a launch once this broker leads again: %v", err)
	}
}
