package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/storetest"
)

// wire is the network between a store and its database: it counts the
// round trips on it, and tests cut it.
type wire struct {
	turns atomic.Int64

	mu    sync.Mutex
	conns []*wireConn
	down  bool
	// hung drops everything the store sends, as a network that loses
	// every packet: the database never answers, and nothing fails.
	hung atomic.Bool
}

// hang makes the database stop answering, until mend.
func (w *wire) hang() { w.hung.Store(true) }

func (w *wire) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if w.hung.Load() {
		// A connection attempt into a network that loses every packet
		// times out.
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.ErrDeadlineExceeded}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	wc := &wireConn{Conn: c, w: w}
	w.conns = append(w.conns, wc)
	return wc, nil
}

// drop closes every connection, as a database restart does.
func (w *wire) drop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.conns {
		c.Conn.Close()
	}
	w.conns = nil
}

// cut drops every connection and refuses new ones until mend.
func (w *wire) cut() {
	w.drop()
	w.mu.Lock()
	w.down = true
	w.mu.Unlock()
}

func (w *wire) mend() {
	w.mu.Lock()
	w.down = false
	w.mu.Unlock()
	w.hung.Store(false)
}

// wireConn counts a round trip at every turn from writing to reading.
type wireConn struct {
	net.Conn
	w     *wire
	wrote atomic.Bool
}

func (c *wireConn) Write(b []byte) (int, error) {
	if c.w.hung.Load() {
		return len(b), nil
	}
	c.wrote.Store(true)
	return c.Conn.Write(b)
}

func (c *wireConn) Read(b []byte) (int, error) {
	if c.wrote.Swap(false) {
		c.w.turns.Add(1)
	}
	return c.Conn.Read(b)
}

// openWire opens a store on a new schema over a wire.
func openWire(t testing.TB, opts Options) (*Store, *wire) {
	t.Helper()
	cfg, err := parseDSN(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	w := wireFor(cfg)
	s, err := open(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, w
}

// wireFor makes cfg's connections go through a wire the test controls.
// A new connection into a wire that hangs waits 2 s, which the tests'
// bounds allow for.
func wireFor(cfg *pgxpool.Config) *wire {
	w := &wire{}
	cfg.ConnConfig.DialFunc = w.dial
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	return w
}

// fill creates a zone, a catalog, a user, machine m1, a delivery group and
// an application.
func fill(t testing.TB, s site.Store) {
	t.Helper()
	ctx := context.Background()
	if err := s.Update(ctx, func(tx site.Tx) error {
		for _, err := range []error{
			tx.Zones().Create(ctx, site.Zone{Name: "z", Primary: true}),
			tx.Catalogs().Create(ctx, site.Catalog{Name: "c", Kind: site.MultiSession, Zone: "z"}),
			tx.Users().Create(ctx, site.User{Name: "u"}),
			tx.Machines().Create(ctx, site.Machine{Name: "m1", Catalog: "c", Address: "h1:1"}),
			tx.DeliveryGroups().Create(ctx, site.NewDeliveryGroup("dg", "c")),
			tx.Applications().Create(ctx, site.Resource{Kind: site.Application, Name: "app", DisplayName: "App", CommandLine: "app", DeliveryGroups: []string{"dg"}}),
		} {
			if err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRoundTrips counts the round trips of the transactions brokers run
// most, on the wire: each costs what the package documentation says, once
// the connection has prepared its statements.
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	s, w := openWire(t, Options{MaxConns: 1})
	fill(t, s)
	n := 0
	session := func() string { n++; return fmt.Sprint("s", n) }
	last := ""
	cases := []struct {
		name string
		// wait is what the caller waits for; all counts the rollback of a
		// transaction that wrote nothing, which ends in the background.
		wait, all int
		update    bool
		fn        func(ctx context.Context, tx site.Tx) error
	}{
		{"claim: read and set a machine's status, create a session", 3, 3, true, func(ctx context.Context, tx site.Tx) error {
			st, err := tx.MachineStatus(ctx, "m1")
			if err != nil {
				return err
			}
			st.Sessions++
			if err := tx.SetMachineStatus(ctx, "m1", st); err != nil {
				return err
			}
			last = session()
			return tx.Sessions().Create(ctx, site.Session{ID: last, User: "u", Resource: "app", DeliveryGroup: "dg", Machine: "m1", State: site.SessionPending})
		}},
		{"heartbeat: read and set a machine's status", 2, 2, true, func(ctx context.Context, tx site.Tx) error {
			st, err := tx.MachineStatus(ctx, "m1")
			if err != nil {
				return err
			}
			st.CPUPercent++
			return tx.SetMachineStatus(ctx, "m1", st)
		}},
		{"end a session: read it and its machine's status, set both", 3, 3, true, func(ctx context.Context, tx site.Tx) error {
			sess, err := tx.Sessions().Get(ctx, last)
			if err != nil {
				return err
			}
			st, err := tx.MachineStatus(ctx, sess.Machine)
			if err != nil {
				return err
			}
			st.Sessions--
			if err := tx.SetMachineStatus(ctx, sess.Machine, st); err != nil {
				return err
			}
			sess.State = site.SessionLoggedOff
			return tx.Sessions().Update(ctx, sess)
		}},
		{"a claim that finds the machine full", 1, 2, true, func(ctx context.Context, tx site.Tx) error {
			_, err := tx.MachineStatus(ctx, "m1")
			return err
		}},
		{"create a zone", 2, 2, true, func(ctx context.Context, tx site.Tx) error {
			return tx.Zones().Create(ctx, site.Zone{Name: session()})
		}},
		{"view: a machine's status and the version", 1, 2, false, func(ctx context.Context, tx site.Tx) error {
			if _, err := tx.MachineStatus(ctx, "m1"); err != nil {
				return err
			}
			_, err := tx.ConfigVersion(ctx)
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var wait int
			run := func() {
				t.Helper()
				fn := func(stx site.Tx) error {
					if err := c.fn(ctx, stx); err != nil {
						return err
					}
					wait = stx.(*tx).roundTrips
					if tx := stx.(*tx); tx.wrote {
						wait++ // the commit
					}
					return nil
				}
				var err error
				if c.update {
					err = s.Update(ctx, fn)
				} else {
					err = s.View(ctx, fn)
				}
				if err != nil {
					t.Fatal(err)
				}
				s.ending.Wait()
			}
			run() // prepares the statements on the connection
			before := w.turns.Load()
			run()
			if all := int(w.turns.Load() - before); wait != c.wait || all != c.all {
				t.Errorf("%d round trips waited for, %d in all; want %d and %d", wait, all, c.wait, c.all)
			}
		})
	}
}

// TestLoadConfigRoundTripsDoNotGrowWithSize guards against N+1 queries:
// the whole configuration loads in a fixed number of round trips, one per
// kind, however many objects there are.
func TestLoadConfigRoundTripsDoNotGrowWithSize(t *testing.T) {
	ctx := context.Background()
	count := func(size storetest.Sizes) int {
		s, _ := openWire(t, Options{})
		if err := s.Update(ctx, func(tx site.Tx) error {
			_, err := site.ApplyConfig(ctx, tx, storetest.GenerateConfig(size), false)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.View(ctx, func(stx site.Tx) error {
			if _, err := site.LoadConfig(ctx, stx); err != nil {
				return err
			}
			n = stx.(*tx).roundTrips
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	mid, demo := count(storetest.MidSize), count(storetest.DemoSize)
	// One for the settings, one for the directory, one per list of objects.
	if mid != demo || demo > 12 {
		t.Fatalf("LoadConfig took %d round trips for the mid-size site and %d for the demo site; want the same 12", mid, demo)
	}
}

// TestLostDatabaseIsUnavailable: transactions fail with EUnavailable while
// the database cannot be reached, and work again once it can.
func TestLostDatabaseIsUnavailable(t *testing.T) {
	ctx := context.Background()
	s, w := openWire(t, Options{})
	fill(t, s)
	w.cut()
	called := false
	err := s.Update(ctx, func(tx site.Tx) error {
		called = true
		return tx.Zones().Create(ctx, site.Zone{Name: "lost"})
	})
	if site.ErrorCode(err) != site.EUnavailable {
		t.Fatalf("update while the database is gone: %v, want code %s", err, site.EUnavailable)
	}
	err = s.View(ctx, func(tx site.Tx) error { _, err := tx.ConfigVersion(ctx); return err })
	if site.ErrorCode(err) != site.EUnavailable {
		t.Fatalf("view while the database is gone: %v, want code %s", err, site.EUnavailable)
	}
	if !called {
		t.Fatal("fn did not run") // it runs; its first statement fails
	}
	w.mend()
	if err := s.Update(ctx, func(tx site.Tx) error { return tx.Zones().Create(ctx, site.Zone{Name: "found"}) }); err != nil {
		t.Fatalf("update once the database is back: %v", err)
	}
}

// TestUnansweringDatabaseFailsFast: a database that stops answering
// (packets lost, nothing refused) fails the transaction waiting for it
// after AnswerTimeout, and every later one at once, saying since when,
// until it answers again: then transactions work within a second or so,
// without a restart.
func TestUnansweringDatabaseFailsFast(t *testing.T) {
	ctx := context.Background()
	const answer = 400 * time.Millisecond
	s, w := openWire(t, Options{AnswerTimeout: answer, MaxConns: 4})
	fill(t, s)
	read := func() error {
		return s.View(ctx, func(tx site.Tx) error { _, err := tx.MachineStatus(ctx, "m1"); return err })
	}
	if err := read(); err != nil {
		t.Fatal(err)
	}
	w.hang()
	start := time.Now()
	err := s.Update(ctx, func(tx site.Tx) error {
		return tx.SetMachineStatus(ctx, "m1", site.MachineStatus{Registration: site.Registered})
	})
	// On a pooled connection, the wait is AnswerTimeout; on a new one, the
	// connect timeout (wireFor's: 2 s).
	if took := time.Since(start); site.ErrorCode(err) != site.EUnavailable || took > 3*time.Second {
		t.Fatalf("update on a database that does not answer: %v after %s; want %s after the answer or connect timeout", err, took, site.EUnavailable)
	}
	for range 5 {
		start = time.Now()
		err = read()
		if took := time.Since(start); site.ErrorCode(err) != site.EUnavailable || !strings.Contains(err.Error(), "since") || took > answer/2 {
			t.Fatalf("read once the database is taken for lost: %v after %s; want %s at once, saying since when", err, took, site.EUnavailable)
		}
	}
	w.mend()
	deadline := time.Now().Add(5 * time.Second)
	for read() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the database answers again, but transactions still fail after 5 s: %v", read())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTransactionContextCutsOff: a transaction's statements end when the
// context its Update was given ends, even those called with a context of
// their own (a caller's closure often passes its own): a caller such as
// the Local Host Cache cuts off the transactions under way on a site DB
// that stopped answering, and they must not wait out AnswerTimeout.
func TestTransactionContextCutsOff(t *testing.T) {
	// An answer timeout well above the cut-off's bound (3 s), so that only
	// the context can end the update in time; the hung connection's own
	// wait, which the store's close sits out, is the timeout's.
	s, w := openWire(t, Options{AnswerTimeout: 6 * time.Second, MaxConns: 4})
	fill(t, s)
	bg := context.Background()
	if err := s.View(bg, func(tx site.Tx) error { _, err := tx.MachineStatus(bg, "m1"); return err }); err != nil {
		t.Fatal(err)
	}
	w.hang()
	defer w.mend()
	ctx, cancel := context.WithCancel(bg)
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	err := s.Update(ctx, func(tx site.Tx) error {
		return tx.SetMachineStatus(bg, "m1", site.MachineStatus{Registration: site.Registered})
	})
	if took := time.Since(start); err == nil || site.ErrorCode(err) != site.EUnavailable || took > 3*time.Second {
		t.Fatalf("an update cut off by its context after 300 ms: %v after %s; want %s within a second or so", err, took, site.EUnavailable)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("the error %q does not say it was cut off (context.Canceled)", err)
	}
}

// TestDeadConnectionsAreReplaced: a transaction whose pooled connection
// died while it idled (a database restart) runs on a new one; one whose
// connection dies halfway fails with EUnavailable and commits nothing.
func TestDeadConnectionsAreReplaced(t *testing.T) {
	ctx := context.Background()
	s, w := openWire(t, Options{MaxConns: 2})
	fill(t, s)
	w.drop()
	if err := s.Update(ctx, func(tx site.Tx) error { return tx.Zones().Create(ctx, site.Zone{Name: "after-restart"}) }); err != nil {
		t.Fatalf("update on a dead pooled connection: %v", err)
	}
	w.drop()
	if err := s.View(ctx, func(tx site.Tx) error { _, err := tx.Zones().Get(ctx, "after-restart"); return err }); err != nil {
		t.Fatalf("view on a dead pooled connection: %v", err)
	}

	err := s.Update(ctx, func(tx site.Tx) error {
		if err := tx.Zones().Create(ctx, site.Zone{Name: "halfway"}); err != nil {
			return err
		}
		w.drop()
		return tx.Zones().Create(ctx, site.Zone{Name: "halfway-2"})
	})
	if site.ErrorCode(err) != site.EUnavailable {
		t.Fatalf("update whose connection died halfway: %v, want code %s", err, site.EUnavailable)
	}
	err = s.View(ctx, func(tx site.Tx) error { _, err := tx.Zones().Get(ctx, "halfway"); return err })
	if site.ErrorCode(err) != site.ENotFound {
		t.Fatalf("the first half of a failed update: %v, want not found", err)
	}
}

// TestFailedStatementFailsTheUpdate: PostgreSQL aborts a transaction at
// its first failed statement, so an Update whose fn ignores a failure
// (here, text PostgreSQL refuses) commits nothing and says why.
func TestFailedStatementFailsTheUpdate(t *testing.T) {
	ctx := context.Background()
	s, _ := openWire(t, Options{})
	fill(t, s)
	err := s.Update(ctx, func(tx site.Tx) error {
		if err := tx.Zones().Create(ctx, site.Zone{Name: "kept?"}); err != nil {
			return err
		}
		st, err := tx.MachineStatus(ctx, "m1")
		if err != nil {
			return err
		}
		st.AgentVersion = "bad\x00byte"
		_ = tx.SetMachineStatus(ctx, "m1", st) // waits for the next round trip, and fails there
		if _, err := tx.Zones().Get(ctx, "kept?"); err == nil {
			t.Errorf("a statement after a failed one succeeded")
		}
		return nil
	})
	if site.ErrorCode(err) != site.EInvalid || !strings.Contains(err.Error(), "set machine status") {
		t.Fatalf("update with a failed statement: %v, want its error", err)
	}
	if err := s.View(ctx, func(tx site.Tx) error { _, err := tx.Zones().Get(ctx, "kept?"); return err }); site.ErrorCode(err) != site.ENotFound {
		t.Fatalf("the update committed: %v", err)
	}
}

// TestPlaceRoundTrips counts the round trips of a launch on the wire: one,
// BEGIN, place_session and COMMIT together, whatever the placement finds,
// once the connection has prepared its statements; and nothing is left to
// end in the background.
func TestPlaceRoundTrips(t *testing.T) {
	ctx := context.Background()
	s, w := openWire(t, Options{MaxConns: 1})
	fill(t, s)
	// d1 and d2 are to be assigned, one per run of the assignment.
	if err := s.Update(ctx, func(tx site.Tx) error {
		for _, m := range []string{"d1", "d2"} {
			if err := tx.Machines().Create(ctx, site.Machine{Name: m, Catalog: "c", Address: m + ":1", MaxSessions: 1}); err != nil {
				return err
			}
		}
		for _, m := range []string{"m1", "d1", "d2"} {
			if err := tx.SetMachineStatus(ctx, m, site.MachineStatus{Registration: site.Registered}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	version := func() int64 {
		t.Helper()
		var v int64
		if err := s.View(ctx, func(tx site.Tx) (err error) { v, err = tx.ConfigVersion(ctx); return err }); err != nil {
			t.Fatal(err)
		}
		s.ending.Wait()
		return v
	}
	n := 0
	session := func() site.Session {
		n++
		return site.Session{ID: fmt.Sprint("p", n), User: "u", Resource: "app", DeliveryGroup: "dg", State: site.SessionPending}
	}
	rule := func(resource string) *site.ReconnectRule {
		return &site.ReconnectRule{Groups: []string{"dg"}, Policies: []site.ReconnectPolicy{site.ReconnectAlways}, Resources: []string{resource}}
	}
	desks := []string{"d1", "d2"}
	cases := []struct {
		name      string
		placement func() site.Placement
		// check says what is wrong with what the placement did, "" when
		// nothing; versions is how far it moved the configuration version.
		check    func(site.Placed) string
		versions int64
	}{
		{"claim", func() site.Placement {
			return site.Placement{Session: session(), Candidates: []site.Candidate{{Machine: "m1"}}}
		}, func(p site.Placed) string {
			if p.Session.Machine != "m1" {
				return "want a session on m1"
			}
			return ""
		}, 0},
		{"reconnection check, then claim", func() site.Placement {
			return site.Placement{Session: session(), Reconnect: rule("other"), Candidates: []site.Candidate{{Machine: "m1"}}}
		}, func(p site.Placed) string {
			if p.Session.Machine != "m1" {
				return "want a session on m1"
			}
			return ""
		}, 0},
		{"reconnect", func() site.Placement {
			return site.Placement{Session: session(), Reconnect: rule("app"), Candidates: []site.Candidate{{Machine: "m1"}}}
		}, func(p site.Placed) string {
			if p.Reconnect == nil || p.Reconnect.ID != "p1" {
				return "want a reconnection to p1"
			}
			return ""
		}, 0},
		{"nothing placed", func() site.Placement {
			return site.Placement{Session: session(), Candidates: []site.Candidate{{Machine: "m1", Limit: 1}}}
		}, func(p site.Placed) string {
			if _, ok := p.Refused["m1"]; p.Placed() || !ok {
				return "want nothing placed, m1 refused"
			}
			return ""
		}, 0},
		{"assignment", func() site.Placement {
			d := desks[0]
			desks = desks[1:]
			return site.Placement{Session: session(), Candidates: []site.Candidate{{Machine: d, Limit: 1, Assign: true}}}
		}, func(p site.Placed) string {
			if p.Session.Machine == "" || p.Status.Sessions != 1 {
				return "want a session on a desktop"
			}
			return ""
		}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := func() int {
				t.Helper()
				v := version()
				before := w.turns.Load()
				placed, err := s.Place(ctx, c.placement())
				s.ending.Wait()
				turns := int(w.turns.Load() - before)
				if err != nil {
					t.Fatalf("place: %v", err)
				}
				if msg := c.check(placed); msg != "" {
					t.Fatalf("placed %+v: %s", placed, msg)
				}
				if got := version() - v; got != c.versions {
					t.Fatalf("the configuration version moved by %d, want %d", got, c.versions)
				}
				return turns
			}
			run() // prepares the statements on the connection
			if turns := run(); turns != 1 {
				t.Errorf("%d round trips, want 1", turns)
			}
		})
	}
}

// TestPlaceOnALostDatabase: a placement fails with EUnavailable while the
// database cannot be reached, without the DSN's password, and works again
// once it can, on a new connection.
func TestPlaceOnALostDatabase(t *testing.T) {
	ctx := context.Background()
	cfg, err := parseDSN(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	const password = "hunter2-the-password" // the test server trusts; the store must not show it
	cfg.ConnConfig.Password = password
	w := wireFor(cfg)
	s, err := open(ctx, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	fill(t, s)
	if err := s.Update(ctx, func(tx site.Tx) error {
		return tx.SetMachineStatus(ctx, "m1", site.MachineStatus{Registration: site.Registered})
	}); err != nil {
		t.Fatal(err)
	}
	place := func(id string) (site.Placed, error) {
		return s.Place(ctx, site.Placement{Session: site.Session{ID: id, User: "u", Resource: "app", DeliveryGroup: "dg", State: site.SessionPending},
			Candidates: []site.Candidate{{Machine: "m1"}}})
	}
	w.cut()
	_, err = place("lost")
	if site.ErrorCode(err) != site.EUnavailable || strings.Contains(err.Error(), password) {
		t.Fatalf("place while the database is gone: %v, want code %s without the password", err, site.EUnavailable)
	}
	w.mend()
	if placed, err := place("found"); err != nil || placed.Session.Machine != "m1" {
		t.Fatalf("place once the database is back: %+v, %v", placed, err)
	}
	w.drop() // a restart: the pooled connections are dead, and the placement goes on a new one
	if placed, err := place("after-restart"); err != nil || placed.Session.Machine != "m1" {
		t.Fatalf("place after a restart: %+v, %v", placed, err)
	}
}

// TestPlaceAfterTheServerEndsItsConnections: a placement whose pooled
// connection the server ended while it idled (a restart, an
// administrator), which answers it with an error and so committed
// nothing, goes again on a new connection.
func TestPlaceAfterTheServerEndsItsConnections(t *testing.T) {
	ctx := context.Background()
	cfg, err := parseDSN(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	const app = "usher-place-ended"
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	s, err := open(ctx, cfg, Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	fill(t, s)
	if err := s.Update(ctx, func(tx site.Tx) error {
		return tx.SetMachineStatus(ctx, "m1", site.MachineStatus{Registration: site.Registered})
	}); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, pgtest.Admin(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var ended int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&ended); err != nil || ended != 1 {
		t.Fatalf("ended %d connections, %v; want 1", ended, err)
	}
	placed, err := s.Place(ctx, site.Placement{Session: site.Session{ID: "s1", User: "u", Resource: "app", DeliveryGroup: "dg", State: site.SessionPending},
		Candidates: []site.Candidate{{Machine: "m1"}}})
	if err != nil || placed.Session.Machine != "m1" {
		t.Fatalf("place on a connection the server ended: %+v, %v", placed, err)
	}
}

// TestReadOnceCostsOneRoundTrip: a read of one round trip through
// ReadOnce costs that round trip alone, where a View adds the ROLLBACK
// that ends it (in the background, but on the wire and in the pool all
// the same); it reads what committed.
func TestReadOnceCostsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, w := openWire(t, Options{MaxConns: 1})
	fill(t, s)
	want := site.MachineStatus{Registration: site.Registered, Credential: "c"}
	if err := s.Update(ctx, func(tx site.Tx) error { return tx.SetMachineStatus(ctx, "m1", want) }); err != nil {
		t.Fatal(err)
	}
	// flush takes the pool's one connection once a View's background
	// ROLLBACK has let it go, in one round trip.
	flush := func() {
		if _, err := s.ChangeSessions(ctx, []site.SessionChange{{Machine: "m1", Session: "none", State: site.SessionActive}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // statements prepared on the connection
		flush()
		for _, run := range []func(context.Context, func(site.Tx) error) error{s.ReadOnce, s.View} {
			if err := run(ctx, func(tx site.Tx) error { _, err := tx.MachineStatus(ctx, "m1"); return err }); err != nil {
				t.Fatal(err)
			}
		}
	}
	flush()
	read := func(run func(context.Context, func(site.Tx) error) error) int64 {
		before := w.turns.Load()
		var st site.MachineStatus
		if err := run(ctx, func(tx site.Tx) (err error) { st, err = tx.MachineStatus(ctx, "m1"); return err }); err != nil {
			t.Fatal(err)
		}
		if st.Registration != want.Registration || st.Credential != want.Credential {
			t.Fatalf("read %+v, want %+v", st, want)
		}
		flush()
		return w.turns.Load() - before - 1 // the flush
	}
	if n := read(s.ReadOnce); n != 1 {
		t.Errorf("ReadOnce of one read: %d round trips, want 1", n)
	}
	if n := read(s.View); n != 2 {
		t.Errorf("View of one read: %d round trips, want 2 (the read and its ROLLBACK)", n)
	}
}

// TestBulkCreatesReportTheirErrors: creates queued in bulk
// (site.BulkWriter) answer with a later round trip: one that fails fails
// the transaction with its own error, and nothing of it commits.
func TestBulkCreatesReportTheirErrors(t *testing.T) {
	ctx := context.Background()
	// One connection: fill prepared its statements, so that only the
	// transaction's own round trips count.
	s, w := openWire(t, Options{MaxConns: 1})
	fill(t, s)
	before := w.turns.Load()
	err := s.Update(ctx, func(stx site.Tx) error {
		if _, err := stx.ConfigVersion(ctx); err != nil { // the configuration lock
			return err
		}
		stx.(site.BulkWriter).WriteInBulk()
		for i := range 10 {
			if err := stx.Users().Create(ctx, site.User{Name: fmt.Sprint("bulk", i)}); err != nil {
				return err
			}
		}
		return stx.Users().Create(ctx, site.User{Name: "stray", Groups: []string{"nowhere"}})
	})
	if site.ErrorCode(err) != site.EInvalid || !strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("a bulk create with a missing group: %v, want %s naming it", err, site.EInvalid)
	}
	// The lock's, the creates' answers (read before any COMMIT), and
	// perhaps already the ROLLBACK that ends the failed transaction in the
	// background and a statement's preparation: far from one per create.
	if n := w.turns.Load() - before; n > 4 {
		t.Errorf("%d round trips for 11 creates in bulk, want at most 4", n)
	}
	if err := s.View(ctx, func(stx site.Tx) error {
		_, err := stx.Users().Get(ctx, "bulk0")
		return err
	}); site.ErrorCode(err) != site.ENotFound {
		t.Fatalf("a user created in the failed transaction: %v, want not found", err)
	}
}
