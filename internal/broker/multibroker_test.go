package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// TestThreeBrokersOnePostgres: three brokers, each with its own
// connections to one PostgreSQL site DB as three processes would have,
// take 2,200 concurrent launches for 570 seats, 200 of them a second
// launch of a user already launching through another broker. No machine
// goes over its limit, every seat is given, every acknowledged launch is
// exactly one session (a user's two launches the same one), and none is
// lost; sessions started through one broker are logged off through
// another.
func TestThreeBrokersOnePostgres(t *testing.T) {
	ctx := context.Background()
	const users, limit, twice = 2000, 10, 200
	cfg := testSite(users, limit)
	seats := 57 * limit

	brokers, stores := pgBrokers(t, cfg, 3)

	type result struct {
		user string
		l    *broker.Launch
		err  error
	}
	results := make(chan result, users+twice)
	start := make(chan struct{})
	var wg sync.WaitGroup
	launch := func(user string, via int) {
		wg.Go(func() {
			<-start
			l, err := brokers[via].Launch(ctx, broker.LaunchRequest{User: user, Resource: "calc"})
			results <- result{user, l, err}
		})
	}
	for i := 1; i <= users; i++ {
		user := fmt.Sprintf("u%04d", i)
		launch(user, i%3)
		if i <= twice {
			launch(user, (i+1)%3)
		}
	}
	close(start)
	wg.Wait()
	close(results)

	ok := map[string]*broker.Launch{}
	failed := map[string]int{}
	for r := range results {
		if r.err != nil {
			code := site.ErrorCode(r.err)
			if failed[code] == 0 && code != site.ENoCapacity {
				t.Logf("%s: %v", r.user, r.err)
			}
			failed[code]++
			continue
		}
		if prev, seen := ok[r.user]; seen && prev.Session.ID != r.l.Session.ID {
			t.Errorf("%s launched twice into two sessions: %s on %s and %s on %s", r.user, prev.Session.ID, prev.Session.Machine, r.l.Session.ID, r.l.Session.Machine)
		}
		ok[r.user] = r.l
	}
	for code := range failed {
		if code != site.ENoCapacity {
			t.Errorf("launches failed with %s: %v", code, failed)
		}
	}
	if len(ok) != seats {
		t.Errorf("%d users seated, want every one of the %d seats given (failures %v)", len(ok), seats, failed)
	}
	limits := map[string]int{}
	for _, m := range cfg.Machines {
		limits[m.Name] = limit
	}
	h := &harness{t: t, store: stores[0]}
	h.check(ok, limits)

	// Log a hundred sessions off through a broker other than the one
	// that started them; the rest stay.
	n := 0
	for user, l := range ok {
		if n == 100 {
			break
		}
		n++
		via := brokers[(n+1)%3]
		if err := via.Logoff(ctx, user, l.Session.ID); err != nil {
			t.Fatalf("log %s's session off through another broker: %v", user, err)
		}
		delete(ok, user)
	}
	h.check(ok, limits)
}

// pgBrokers starts n brokers, each with its own connections to one new
// PostgreSQL site DB holding cfg, every machine registered.
func pgBrokers(t *testing.T, cfg *site.Config, n int, mod ...func(*broker.Config)) ([]*broker.Broker, []site.Store) {
	t.Helper()
	return pgBrokersOn(t, pgtest.DSN(t), cfg, n, mod...)
}

// pgBrokersOn is pgBrokers on the site DB at dsn; mod changes the
// brokers' configuration.
func pgBrokersOn(t *testing.T, dsn string, cfg *site.Config, n int, mod ...func(*broker.Config)) ([]*broker.Broker, []site.Store) {
	t.Helper()
	ctx := context.Background()
	var brokers []*broker.Broker
	var stores []site.Store
	for i := range n {
		store, err := pgstore.Open(ctx, dsn, pgstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		if i == 0 {
			if err := store.Update(ctx, func(tx site.Tx) error { _, err := site.ApplyConfig(ctx, tx, cfg, false); return err }); err != nil {
				t.Fatal(err)
			}
		}
		bc := broker.Config{Store: store, Control: sitetest.NewControl(), AllowAddressChange: true, MaxConcurrent: -1}
		for _, m := range mod {
			m(&bc)
		}
		b, err := broker.New(ctx, bc)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			for j, m := range cfg.Machines {
				if err := b.Register(ctx, sitetest.Registration(j, m.Name)); err != nil {
					t.Fatal(err)
				}
			}
		}
		brokers, stores = append(brokers, b), append(stores, store)
	}
	return brokers, stores
}

// TestRegistrationsAndLogoffsDoNotDeadlock: a VDA registering again
// (which ends the sessions it does not report) while users log the same
// sessions off through other brokers: both lock the machine's status
// before its sessions, so that on PostgreSQL neither fails with a
// deadlock, and every session ends once.
func TestRegistrationsAndLogoffsDoNotDeadlock(t *testing.T) {
	ctx := context.Background()
	const users = 570
	cfg := testSite(users, 10)
	brokers, stores := pgBrokers(t, cfg, 3)
	h := &harness{t: t, store: stores[0]}
	for round := range 3 {
		ok := map[string]*broker.Launch{}
		for i := 1; i <= users; i++ {
			user := fmt.Sprintf("u%04d", i)
			l, err := brokers[i%3].Launch(ctx, broker.LaunchRequest{User: user, Resource: "calc"})
			if err != nil {
				t.Fatalf("round %d: launch for %s: %v", round, user, err)
			}
			ok[user] = l
		}
		var wg sync.WaitGroup
		errs := make(chan error, users+len(cfg.Machines))
		for user, l := range ok {
			wg.Go(func() { errs <- brokers[1+len(user)%2].Logoff(ctx, user, l.Session.ID) })
		}
		for j, m := range cfg.Machines {
			if !strings.HasPrefix(m.Name, "rdsh-") {
				continue
			}
			wg.Go(func() { errs <- brokers[0].Register(ctx, sitetest.Registration(j, m.Name)) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("round %d: %v", round, err)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		per := h.check(nil, nil)
		for m, n := range per {
			if n != 0 {
				t.Errorf("round %d: machine %s still has %d live sessions", round, m, n)
			}
		}
		if err := stores[0].View(ctx, func(tx site.Tx) error {
			all, err := tx.MachineStatuses(ctx)
			for m, st := range all {
				if st.Sessions != 0 || st.LogonsInProgress != 0 {
					t.Errorf("round %d: machine %s counts %d sessions, %d logging on, and holds none", round, m, st.Sessions, st.LogonsInProgress)
				}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLockoutIsSiteWide replays a password-guessing burst against three
// brokers of one site at once: however the guesses spread, no more
// passwords are checked than the lock-out threshold allows, the account
// is then locked out on every broker (the right password refused
// everywhere), and an admin's unlock through one broker lifts it on all.
func TestLockoutIsSiteWide(t *testing.T) {
	ctx := context.Background()
	const threshold = 5
	brokers, _ := pgBrokers(t, testSite(3, 10), 3, func(c *broker.Config) {
		c.SiteLockout, c.LockoutThreshold, c.SourceFree = true, threshold, -1
	})
	var checked atomic.Int32
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			_, err := brokers[i%3].CheckPassword(ctx, broker.AccountUser, "u0001", "", func() bool {
				checked.Add(1)
				time.Sleep(5 * time.Millisecond) // a hash takes a while: the burst overlaps, not a condition
				return false
			})
			if err != nil && !errors.Is(err, auth.ErrLocked) {
				t.Errorf("guess %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if n := checked.Load(); n > threshold {
		t.Fatalf("%d passwords checked in a burst through three brokers; the threshold is %d", n, threshold)
	}
	for i, b := range brokers {
		ran := false
		ok, err := b.CheckPassword(ctx, broker.AccountUser, "u0001", "", func() bool { ran = true; return true })
		if ok || !errors.Is(err, auth.ErrLocked) || ran {
			t.Fatalf("broker %d: the right password after the burst: %v, %v (checked: %v); want locked out, unchecked", i, ok, err, ran)
		}
		locks, err := b.Lockouts(ctx)
		if err != nil || len(locks) != 1 || locks[0].Name != "u0001" || locks[0].Kind != broker.AccountUser {
			t.Fatalf("broker %d lists lock-outs %+v, %v; want u0001's", i, locks, err)
		}
	}
	if was, err := brokers[2].Unlock(ctx, broker.AccountUser, "u0001"); !was || err != nil {
		t.Fatalf("unlock: %v, %v", was, err)
	}
	// No broker keeps a lock of its own: the right password is in,
	// through any of them.
	if ok, err := brokers[1].CheckPassword(ctx, broker.AccountUser, "u0001", "", func() bool { return true }); !ok || err != nil {
		t.Fatalf("the right password after the unlock, through another broker: %v, %v", ok, err)
	}
}

// countingStore counts a store's Updates.
type countingStore struct {
	site.Store
	updates atomic.Int64
}

func (s *countingStore) Update(ctx context.Context, fn func(site.Tx) error) error {
	s.updates.Add(1)
	return s.Store.Update(ctx, fn)
}

// TestVerifiedLogonsSpareTheSiteDB: on a site whose brokers share their
// lock-out, an NFuse client sends its credentials with every request. A
// right password the broker verified moments ago costs no site DB
// transaction for LockoutRecheck; past it, the next logon asks the site
// DB again, and so learns of a lock made through another broker.
func TestVerifiedLogonsSpareTheSiteDB(t *testing.T) {
	ctx := context.Background()
	const recheck = 400 * time.Millisecond
	cfg := testSite(3, 10)
	hash, err := auth.HashPassword("right password", cheap)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Users {
		cfg.Users[i].PasswordHash = hash
	}
	var counted *countingStore
	brokers, _ := pgBrokers(t, cfg, 2, func(c *broker.Config) {
		c.SiteLockout, c.LockoutThreshold, c.SourceFree, c.LockoutRecheck = true, 3, -1, recheck
		if counted == nil {
			counted = &countingStore{Store: c.Store}
			c.Store = counted
		}
	})
	a, b := brokers[0], brokers[1]
	logon := func() error { _, err := a.Authenticate(ctx, "u0001", "right password", "192.0.2.7"); return err }
	if err := logon(); err != nil {
		t.Fatal(err)
	}
	before := counted.updates.Load()
	start := time.Now()
	for range 200 {
		if err := logon(); err != nil {
			t.Fatal(err)
		}
	}
	// Every logon after the recheck asks the site DB again: two
	// transactions (reserve, end) a recheck, at most.
	if n, most := counted.updates.Load()-before, 2*(int64(time.Since(start)/recheck)+1); n > most {
		t.Errorf("200 logons with a verified password cost %d site DB transactions; want at most %d", n, most)
	}
	if _, err := a.Authenticate(ctx, "u0001", "wrong", "192.0.2.7"); !errors.Is(err, broker.ErrBadCredentials) {
		t.Fatalf("a wrong password: %v", err)
	}
	// Another broker locks the account out.
	for range 3 {
		b.CheckPassword(ctx, broker.AccountUser, "u0001", "", func() bool { return false })
	}
	time.Sleep(recheck + 100*time.Millisecond) // time passing is the test: the verified password is rechecked after recheck
	if err := logon(); !errors.Is(err, broker.ErrAccountLocked) {
		t.Fatalf("the right password %s after another broker locked the account out: %v; want it locked out", recheck, err)
	}
	if err := logon(); !errors.Is(err, broker.ErrAccountLocked) {
		t.Fatalf("the right password again: %v; want it locked out", err)
	}
}

// TestConcurrentSessionEvents: VDAs report the logons of hundreds of
// sessions at once, each twice and through two brokers, half of them
// disconnecting right after, with reports for the wrong machine among
// them. The events of each broker go in batches: every report gets its
// own answer, every session ends in the state reported last, and every
// machine counts no logon in progress.
func TestConcurrentSessionEvents(t *testing.T) {
	ctx := context.Background()
	const users = 570
	brokers, stores := pgBrokers(t, testSite(users, 10), 3)
	var launches []*broker.Launch
	for i := 1; i <= users; i++ {
		user := fmt.Sprintf("u%04d", i)
		l, err := brokers[i%3].Launch(ctx, broker.LaunchRequest{User: user, Resource: "calc"})
		if err != nil {
			t.Fatal(err)
		}
		launches = append(launches, l)
	}
	var wg sync.WaitGroup
	for i, l := range launches {
		disconnect := i%2 == 0
		wg.Go(func() {
			for k := range 2 {
				ev := broker.SessionEvent{Machine: l.Session.Machine, SessionID: l.Session.ID, Change: broker.ChangeLogon}
				if err := brokers[(i+k)%3].SessionEvent(ctx, ev); err != nil {
					t.Errorf("logon of %s through broker %d: %v", l.Session.ID, (i+k)%3, err)
				}
			}
			if disconnect {
				ev := broker.SessionEvent{Machine: l.Session.Machine, SessionID: l.Session.ID, Change: broker.ChangeDisconnect}
				if err := brokers[i%3].SessionEvent(ctx, ev); err != nil {
					t.Errorf("disconnect of %s: %v", l.Session.ID, err)
				}
			}
		})
		wg.Go(func() {
			other := "rdsh-01"
			if l.Session.Machine == other {
				other = "rdsh-02"
			}
			ev := broker.SessionEvent{Machine: other, SessionID: l.Session.ID, Change: broker.ChangeLogon}
			if err := brokers[(i+1)%3].SessionEvent(ctx, ev); site.ErrorCode(err) != site.EForbidden {
				t.Errorf("logon of %s reported by another machine: %v, want forbidden", l.Session.ID, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	err := stores[0].View(ctx, func(tx site.Tx) error {
		for i, l := range launches {
			s, err := tx.Sessions().Get(ctx, l.Session.ID)
			if err != nil {
				return err
			}
			want := site.SessionActive
			if i%2 == 0 {
				want = site.SessionDisconnected
			}
			if s.State != want {
				t.Errorf("session %s is %s, want %s", s.ID, s.State, want)
			}
		}
		all, err := tx.MachineStatuses(ctx)
		for m, st := range all {
			if st.LogonsInProgress != 0 {
				t.Errorf("machine %s counts %d logons in progress after every logon was reported", m, st.LogonsInProgress)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentHeartbeats: every machine heartbeats again and again
// through the three brokers at once, in batches, with an impostor's
// heartbeat among them: each machine's last report is what the site DB
// holds, its session counts are untouched, and the impostor is refused.
func TestConcurrentHeartbeats(t *testing.T) {
	ctx := context.Background()
	cfg := testSite(10, 10)
	brokers, stores := pgBrokers(t, cfg, 3)
	var wg sync.WaitGroup
	for i, m := range cfg.Machines {
		wg.Go(func() {
			for k := 1; k <= 5; k++ {
				hb := broker.Heartbeat{Machine: m.Name, Usage: site.Usage{CPUPercent: float64(10 * k), MemoryPercent: float64(i % 100)}}
				if _, err := brokers[(i+k)%3].Heartbeat(ctx, hb); err != nil {
					t.Errorf("heartbeat %d of %s: %v", k, m.Name, err)
				}
			}
		})
		wg.Go(func() {
			hb := broker.Heartbeat{Machine: m.Name, Credential: "an impostor's", Usage: site.Usage{CPUPercent: 99}}
			if _, err := brokers[i%3].Heartbeat(ctx, hb); site.ErrorCode(err) != broker.ENotRegistered {
				t.Errorf("an impostor's heartbeat for %s: %v, want not_registered", m.Name, err)
			}
		})
	}
	wg.Wait()
	err := stores[0].View(ctx, func(tx site.Tx) error {
		all, err := tx.MachineStatuses(ctx)
		for i, m := range cfg.Machines {
			st := all[m.Name]
			if st.CPUPercent != 50 || st.MemoryPercent != float64(i%100) || st.LastHeartbeat.IsZero() || st.Sessions != 0 {
				t.Errorf("%s: cpu %v%%, memory %v%%, last heartbeat %v, %d sessions; want its last report (50%%, %d%%) and no session",
					m.Name, st.CPUPercent, st.MemoryPercent, st.LastHeartbeat, st.Sessions, i%100)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
