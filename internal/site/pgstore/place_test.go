package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
)

// placeSite fills a store with machines m1..m4 (catalog "c",
// multi-session, delivery group "dg" publishing application "app") and
// d1..d4 (catalog "dc", single-session assigned, delivery group "ddg"
// publishing desktop "desk"), every one registered, and users.
func placeSite(t *testing.T, s site.Store, users ...string) {
	t.Helper()
	ctx := context.Background()
	if err := s.Update(ctx, func(tx site.Tx) error {
		errs := []error{
			tx.Zones().Create(ctx, site.Zone{Name: "z", Primary: true}),
			tx.Catalogs().Create(ctx, site.Catalog{Name: "c", Kind: site.MultiSession, Zone: "z"}),
			tx.Catalogs().Create(ctx, site.Catalog{Name: "dc", Kind: site.SingleSessionAssigned, Zone: "z"}),
		}
		for _, u := range users {
			errs = append(errs, tx.Users().Create(ctx, site.User{Name: u}))
		}
		for i := 1; i <= 4; i++ {
			errs = append(errs,
				tx.Machines().Create(ctx, site.Machine{Name: fmt.Sprint("m", i), Catalog: "c", Address: fmt.Sprintf("10.0.0.%d:1494", i)}),
				tx.Machines().Create(ctx, site.Machine{Name: fmt.Sprint("d", i), Catalog: "dc", Address: fmt.Sprintf("10.0.1.%d:1494", i), MaxSessions: 1}))
		}
		errs = append(errs,
			tx.DeliveryGroups().Create(ctx, site.NewDeliveryGroup("dg", "c")),
			tx.DeliveryGroups().Create(ctx, site.NewDeliveryGroup("ddg", "dc")),
			tx.Applications().Create(ctx, site.Resource{Kind: site.Application, Name: "app", DisplayName: "App", CommandLine: "app", DeliveryGroups: []string{"dg"}}),
			tx.Applications().Create(ctx, site.Resource{Kind: site.Application, Name: "app2", DisplayName: "App 2", CommandLine: "app2", DeliveryGroups: []string{"dg"}}),
			tx.Desktops().Create(ctx, site.Resource{Kind: site.Desktop, Name: "desk", DisplayName: "Desk", DeliveryGroups: []string{"ddg"}}))
		for i := 1; i <= 4; i++ {
			for _, m := range []string{fmt.Sprint("m", i), fmt.Sprint("d", i)} {
				errs = append(errs, tx.SetMachineStatus(ctx, m, site.MachineStatus{Registration: site.Registered, ControlURL: "http://vda/" + m}))
			}
		}
		return errors.Join(errs...)
	}); err != nil {
		t.Fatal(err)
	}
}

// newSession is a session to place.
func newSession(id, user, resource, group string) site.Session {
	at := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
	return site.Session{ID: id, User: user, Resource: resource, DeliveryGroup: group, State: site.SessionPending,
		ClientName: "LAPTOP-1", CreatedAt: at, UpdatedAt: at}
}

// setUsage sets a machine's session count.
func setUsage(t *testing.T, s site.Store, machine string, sessions int) {
	t.Helper()
	ctx := context.Background()
	if err := s.Update(ctx, func(tx site.Tx) error {
		st, err := tx.MachineStatus(ctx, machine)
		if err != nil {
			return err
		}
		st.Sessions = sessions
		return tx.SetMachineStatus(ctx, machine, st)
	}); err != nil {
		t.Fatal(err)
	}
}

func version(t *testing.T, s site.Store) int64 {
	t.Helper()
	ctx := context.Background()
	var v int64
	if err := s.View(ctx, func(tx site.Tx) (err error) { v, err = tx.ConfigVersion(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	return v
}

// placeState is what a placement may change.
type placeState struct {
	Status   map[string]site.MachineStatus
	Assigned map[string]string
	Sessions []site.Session
}

func readPlaceState(ctx context.Context, tx site.Tx) (placeState, error) {
	st := placeState{Status: map[string]site.MachineStatus{}, Assigned: map[string]string{}}
	ms, err := tx.Machines().List(ctx, site.ListOptions{})
	if err != nil {
		return st, err
	}
	for _, m := range ms.Items {
		st.Assigned[m.Name] = m.AssignedUser
		if st.Status[m.Name], err = tx.MachineStatus(ctx, m.Name); err != nil {
			return st, err
		}
	}
	ss, err := tx.Sessions().List(ctx, site.SessionFilter{}, site.ListOptions{})
	st.Sessions = ss.Items
	return st, err
}

var errRollBack = errors.New("roll back")

// TestPlaceMatchesPlaceTx places at random on a site that changes at
// random between placements, and holds each Place to what site.PlaceTx,
// run on the same state in an Update that is then rolled back, returns and
// leaves: the same result, the same error, the same state, and the
// configuration version moved by one for an assignment.
func TestPlaceMatchesPlaceTx(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, pgtest.DSN(t))
	users := []string{"u0", "u1", "u2"}
	placeSite(t, s, users...)
	rounds := 300
	if testing.Short() {
		rounds = 60
	}
	rng := rand.New(rand.NewPCG(7, 11))
	pick := func(list ...string) string { return list[rng.IntN(len(list))] }
	some := func(list ...string) []string {
		var out []string
		for _, x := range list {
			if rng.IntN(2) == 0 {
				out = append(out, x)
			}
		}
		return out
	}
	machines := []string{"m1", "m2", "m3", "d1", "d2"}
	states := []site.SessionState{site.SessionPending, site.SessionActive, site.SessionDisconnected, site.SessionLoggedOff}
	policies := []site.ReconnectPolicy{site.ReconnectAlways, site.ReconnectDisconnectedOnly, site.ReconnectSameEndpointOnly}
	var ids []string
	var placed, reconnected, refused, failed int
	for round := range rounds {
		// The site changes: registrations, counts, sessions, assignments.
		if err := s.Update(ctx, func(tx site.Tx) error {
			for _, m := range machines {
				if rng.IntN(3) > 0 {
					continue
				}
				st, err := tx.MachineStatus(ctx, m)
				if err != nil {
					return err
				}
				st.Registration = site.Registered
				if rng.IntN(4) == 0 {
					st.Registration = site.Unregistered
				}
				st.Sessions, st.LogonsInProgress, st.CPUPercent = rng.IntN(4), rng.IntN(3), float64(rng.IntN(100))
				if err := tx.SetMachineStatus(ctx, m, st); err != nil {
					return err
				}
			}
			if rng.IntN(2) == 0 {
				id := fmt.Sprintf("x%03d", round)
				ids = append(ids, id)
				sess := site.Session{ID: id, User: pick(users...), Resource: pick("app", "app2", "desk"), DeliveryGroup: pick("dg", "ddg", "other"),
					Machine: pick(machines...), State: states[rng.IntN(len(states))], ClientName: pick("", "A", "B")}
				if rng.IntN(8) == 0 {
					sess.EndedAt = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
				}
				if err := tx.Sessions().Create(ctx, sess); err != nil {
					return err
				}
			}
			if rng.IntN(5) == 0 {
				m, err := tx.Machines().Get(ctx, pick("d1", "d2"))
				if err != nil {
					return err
				}
				m.AssignedUser = pick("", "", "u0", "u1", "u2")
				return tx.Machines().Update(ctx, m)
			}
			return nil
		}); err != nil {
			t.Fatalf("round %d: change the site: %v", round, err)
		}

		p := site.Placement{Session: newSession(fmt.Sprintf("p%03d", round), pick(users...), pick("app", "app2", "desk"), pick("dg", "ddg"))}
		switch rng.IntN(40) {
		case 0:
			p.Session.User = "ghost"
		case 1:
			p.Session.Resource = "ghost"
		case 2:
			if len(ids) > 0 {
				p.Session.ID = pick(ids...)
			}
		}
		if rng.IntN(2) == 0 {
			r := &site.ReconnectRule{Groups: some("dg", "ddg", "other"), Resources: some("app", "app2", "desk"),
				ClientName: pick("", "A", "B"), Skip: some(ids...)}
			for range r.Groups {
				r.Policies = append(r.Policies, policies[rng.IntN(len(policies))])
			}
			p.Reconnect = r
		}
		for range rng.IntN(5) {
			c := site.Candidate{Machine: pick(append(machines, "ghost")...), Limit: rng.IntN(4), LoadIndex: rng.IntN(site.MaxLoadIndex + 1)}
			c.Assign = strings.HasPrefix(c.Machine, "d") && rng.IntN(4) > 0
			p.Candidates = append(p.Candidates, c)
		}

		var want site.Placed
		var before, after placeState
		wantErr := s.Update(ctx, func(tx site.Tx) error {
			var err error
			if before, err = readPlaceState(ctx, tx); err != nil {
				return err
			}
			if want, err = site.PlaceTx(ctx, tx, p); err != nil {
				return err
			}
			if after, err = readPlaceState(ctx, tx); err != nil {
				return err
			}
			return errRollBack
		})
		if errors.Is(wantErr, errRollBack) {
			wantErr = nil
		}
		v := version(t, s)
		got, err := s.Place(ctx, p)
		if site.ErrorCode(err) != site.ErrorCode(wantErr) || site.ErrorMessage(err) != site.ErrorMessage(wantErr) {
			t.Fatalf("round %d: place %+v: error %v, want %v", round, p, err, wantErr)
		}
		if wantErr != nil {
			after = before
			failed++
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: place %+v:\ngot  %+v\nwant %+v", round, p, got, want)
		}
		var stored placeState
		if err := s.View(ctx, func(tx site.Tx) (err error) { stored, err = readPlaceState(ctx, tx); return err }); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(stored, after) {
			t.Fatalf("round %d: place %+v left\n%+v\nwant\n%+v", round, p, stored, after)
		}
		assigned := int64(0)
		for m, u := range after.Assigned {
			if before.Assigned[m] != u {
				assigned++
			}
		}
		if got := version(t, s) - v; got != assigned {
			t.Fatalf("round %d: the configuration version moved by %d, want %d", round, got, assigned)
		}
		switch {
		case got.Reconnect != nil:
			reconnected++
		case got.Session.ID != "":
			placed++
			ids = append(ids, got.Session.ID)
		case len(got.Refused) > 0:
			refused++
		}
	}
	t.Logf("%d rounds: %d placed, %d reconnected, %d with candidates refused and none placed, %d errors", rounds, placed, reconnected, refused, failed)
	if placed == 0 || reconnected == 0 || refused == 0 || failed == 0 {
		t.Errorf("the rounds did not cover every outcome")
	}
}

// waitForLockWait waits until a backend of the application name waits
// for a lock.
func waitForLockWait(t *testing.T, dsn, app string) {
	t.Helper()
	waitForActivity(t, dsn, "a backend of "+app+" waiting for a lock", func(n int) bool { return n > 0 },
		`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app)
}

// waitForActivity polls count, a query of the server's own activity
// (pg_stat_activity: no event to wait on), every 5 ms until ok takes its
// answer, and fails t after 10 s.
func waitForActivity(t *testing.T, dsn, what string, ok func(int) bool, count string, args ...any) {
	t.Helper()
	conn := raw(t, dsn)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(context.Background(), count, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if ok(n) {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no %s within 10 s (count %d)", what, n)
		}
	}
}

// TestPlaceWaitsForALockedCandidate: a candidate whose status another
// transaction holds is waited for, and refused with the status that
// transaction left, not the one before it.
func TestPlaceWaitsForALockedCandidate(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := MustOpen(t, dsn)
	placeSite(t, s, "alice")
	placer := MustOpen(t, setting(t, dsn, "application_name", "usher-place-waits"))
	release := holdUpdate(t, s, func(ctx context.Context, tx site.Tx) error {
		st, err := tx.MachineStatus(ctx, "m1")
		if err != nil {
			return err
		}
		st.Sessions = 2
		return tx.SetMachineStatus(ctx, "m1", st)
	})
	done := make(chan site.Placed, 1)
	go func() {
		placed, err := placer.Place(ctx, site.Placement{Session: newSession("s1", "alice", "app", "dg"),
			Candidates: []site.Candidate{{Machine: "m1", Limit: 2}, {Machine: "m2", Limit: 2}}})
		if err != nil {
			t.Error(err)
		}
		done <- placed
	}()
	waitForLockWait(t, dsn, "usher-place-waits")
	if err := release(); err != nil {
		t.Fatal(err)
	}
	placed := <-done
	if placed.Session.Machine != "m2" || placed.Refused["m1"].Sessions != 2 {
		t.Fatalf("placed %+v, want m2, with m1 refused at the 2 sessions set while the placement waited", placed)
	}
}

// TestPlaceGivesBackTheLocksOfRefusedCandidates: while a placement waits
// for a candidate, it holds no lock of those it refused, nor the
// configuration lock that an assignment it did not make took.
func TestPlaceGivesBackTheLocksOfRefusedCandidates(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := MustOpen(t, dsn)
	placeSite(t, s, "alice")
	setUsage(t, s, "m1", 2)
	setUsage(t, s, "d1", 1)
	placer := MustOpen(t, setting(t, dsn, "application_name", "usher-place-gives-back"))
	impatient := MustOpenWith(t, dsn, pgstore.Options{LockTimeout: time.Second})
	release := holdUpdate(t, s, func(ctx context.Context, tx site.Tx) error {
		_, err := tx.MachineStatus(ctx, "m2")
		return err
	})
	done := make(chan site.Placed, 1)
	go func() {
		placed, err := placer.Place(ctx, site.Placement{Session: newSession("s1", "alice", "app", "dg"),
			Candidates: []site.Candidate{{Machine: "d1", Limit: 1, Assign: true}, {Machine: "m1", Limit: 2}, {Machine: "m2", Limit: 2}}})
		if err != nil {
			t.Error(err)
		}
		done <- placed
	}()
	waitForLockWait(t, dsn, "usher-place-gives-back")
	for _, m := range []string{"d1", "m1"} {
		if err := impatient.Update(ctx, func(tx site.Tx) error {
			st, err := tx.MachineStatus(ctx, m)
			if err != nil {
				return err
			}
			st.CPUPercent = 50
			return tx.SetMachineStatus(ctx, m, st)
		}); err != nil {
			t.Errorf("heartbeat of %s, refused, while the placement waits for m2: %v", m, err)
		}
	}
	if err := impatient.Update(ctx, func(tx site.Tx) error { return tx.Zones().Create(ctx, site.Zone{Name: "meanwhile"}) }); err != nil {
		t.Errorf("configuration change while the placement waits for m2: %v", err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	placed := <-done
	if placed.Session.Machine != "m2" || len(placed.Refused) != 2 {
		t.Fatalf("placed %+v, want m2 with d1 and m1 refused", placed)
	}
}

// TestPlaceSeesAnAssignmentMadeWhileItWaits: a desktop given to someone
// else while a placement of its former owner waits for its status is
// refused, not placed on.
func TestPlaceSeesAnAssignmentMadeWhileItWaits(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := MustOpen(t, dsn)
	placeSite(t, s, "alice", "bob")
	assign := func(user string) {
		t.Helper()
		if err := s.Update(ctx, func(tx site.Tx) error {
			m, err := tx.Machines().Get(ctx, "d1")
			if err != nil {
				return err
			}
			m.AssignedUser = user
			return tx.Machines().Update(ctx, m)
		}); err != nil {
			t.Fatal(err)
		}
	}
	assign("alice")
	placer := MustOpen(t, setting(t, dsn, "application_name", "usher-place-reassigned"))
	release := holdUpdate(t, s, func(ctx context.Context, tx site.Tx) error {
		_, err := tx.MachineStatus(ctx, "d1") // a heartbeat
		return err
	})
	done := make(chan site.Placed, 1)
	go func() {
		placed, err := placer.Place(ctx, site.Placement{Session: newSession("s1", "alice", "desk", "ddg"),
			Candidates: []site.Candidate{{Machine: "d1", Limit: 1, Assign: true}}})
		if err != nil {
			t.Error(err)
		}
		done <- placed
	}()
	waitForLockWait(t, dsn, "usher-place-reassigned")
	assign("bob")
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if placed := <-done; placed.Placed() || len(placed.Refused) != 1 {
		t.Fatalf("placed %+v, want d1 refused: it is bob's now", placed)
	}
}

// TestPlaceTakesTheConfigurationLockFirst: a placement that finds, once
// it holds a desktop's status, that the desktop was given back meanwhile
// lets the status go and takes the configuration lock before it again, as
// configuration changes take them; holding the status while it waited for
// the configuration lock would deadlock with a change that holds that lock
// and reads the status.
func TestPlaceTakesTheConfigurationLockFirst(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := MustOpen(t, dsn)
	placeSite(t, s, "alice", "bob")
	assign := func(user string) {
		t.Helper()
		if err := s.Update(ctx, func(tx site.Tx) error {
			m, err := tx.Machines().Get(ctx, "d1")
			if err != nil {
				return err
			}
			m.AssignedUser = user
			return tx.Machines().Update(ctx, m)
		}); err != nil {
			t.Fatal(err)
		}
	}
	assign("bob")
	v := version(t, s)
	const app = "usher-place-config-first"
	placer := MustOpen(t, setting(t, dsn, "application_name", app))
	release := holdUpdate(t, s, func(ctx context.Context, tx site.Tx) error {
		_, err := tx.MachineStatus(ctx, "d1") // a heartbeat
		return err
	})
	done := make(chan site.Placed, 1)
	go func() {
		placed, err := placer.Place(ctx, site.Placement{Session: newSession("s1", "alice", "desk", "ddg"),
			Candidates: []site.Candidate{{Machine: "d1", Limit: 1, Assign: true}}})
		if err != nil {
			t.Errorf("place: %v", err)
		}
		done <- placed
	}()
	waitForLockWait(t, dsn, app) // for d1's status, having seen it bob's
	assign("")
	// A configuration change takes the configuration lock, then reads d1's
	// status, as the admin API does when it shows a machine.
	holds, goOn, changed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		changed <- s.Update(ctx, func(tx site.Tx) error {
			if err := tx.Zones().Create(ctx, site.Zone{Name: "meanwhile"}); err != nil {
				return err
			}
			close(holds)
			<-goOn
			_, err := tx.MachineStatus(ctx, "d1")
			return err
		})
	}()
	<-holds
	if err := release(); err != nil {
		t.Fatal(err)
	}
	waitForLockWait(t, dsn, app) // for the configuration lock
	close(goOn)
	if err := <-changed; err != nil {
		t.Errorf("configuration change: %v", err)
	}
	if placed := <-done; placed.Session.Machine != "d1" {
		t.Fatalf("placed %+v, want d1, given back", placed)
	}
	if got := version(t, s); got != v+3 {
		t.Errorf("configuration version %d, want %d: the change, the giving back and the assignment", got, v+3)
	}
}

// TestPlaceOneUserAtATime: launches of one user with a reconnection rule
// from several brokers at once make one session, and the others go back to
// it, as they would on a store with one writer.
func TestPlaceOneUserAtATime(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	stores := []*pgstore.Store{MustOpen(t, dsn), MustOpen(t, dsn), MustOpen(t, dsn)}
	placeSite(t, stores[0], "alice")
	const launches = 8 // per broker
	for round := range 10 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		made := map[string]bool{}
		for b, s := range stores {
			for i := range launches {
				wg.Go(func() {
					<-start
					placed, err := s.Place(ctx, site.Placement{Session: newSession(fmt.Sprintf("s-%d-%d-%d", round, b, i), "alice", "app", "dg"),
						Reconnect:  &site.ReconnectRule{Groups: []string{"dg"}, Policies: []site.ReconnectPolicy{site.ReconnectAlways}, Resources: []string{"app"}},
						Candidates: []site.Candidate{{Machine: "m1"}, {Machine: "m2"}}})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					switch {
					case placed.Session.ID != "":
						made[placed.Session.ID] = true
					case placed.Reconnect != nil:
						made[placed.Reconnect.ID] = true
					default:
						t.Errorf("placed %+v: nothing", placed)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if len(made) != 1 {
			t.Fatalf("round %d: sessions %v, want one", round, slices.Sorted(maps.Keys(made)))
		}
		for id := range made {
			if err := endSession(ctx, stores[0], id); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestPlaceErrors: a placement that cannot be recorded fails as the Tx
// calls of site.PlaceTx fail, and records nothing.
func TestPlaceErrors(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, pgtest.DSN(t))
	placeSite(t, s, "alice")
	if _, err := s.Place(ctx, site.Placement{Session: newSession("taken", "alice", "app", "dg"), Candidates: []site.Candidate{{Machine: "m1"}}}); err != nil {
		t.Fatal(err)
	}
	v := version(t, s)
	for _, c := range []struct {
		name string
		p    site.Placement
		code string
	}{
		{"unknown user to assign to", site.Placement{Session: newSession("s1", "nobody", "desk", "ddg"), Candidates: []site.Candidate{{Machine: "d1", Assign: true}}}, site.EInvalid},
		{"unknown resource", site.Placement{Session: newSession("s1", "alice", "nothing", "dg"), Candidates: []site.Candidate{{Machine: "m1"}}}, site.EInvalid},
		{"taken ID", site.Placement{Session: newSession("taken", "alice", "app", "dg"), Candidates: []site.Candidate{{Machine: "m2"}}}, site.EConflict},
		{"malformed", site.Placement{Session: newSession("", "alice", "app", "dg")}, site.EInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Place(ctx, c.p)
			if site.ErrorCode(err) != c.code {
				t.Fatalf("place: %v, want code %s", err, c.code)
			}
		})
	}
	if err := s.View(ctx, func(tx site.Tx) error {
		for _, m := range []string{"m2", "d1"} {
			st, err := tx.MachineStatus(ctx, m)
			if err != nil {
				return err
			}
			if st.Sessions != 0 {
				t.Errorf("%s counts %d sessions after failed placements, want 0", m, st.Sessions)
			}
		}
		p, err := tx.Sessions().List(ctx, site.SessionFilter{}, site.ListOptions{})
		if err == nil && p.Total != 1 {
			t.Errorf("%d sessions stored, want 1", p.Total)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := version(t, s); got != v {
		t.Errorf("failed placements moved the configuration version from %d to %d", v, got)
	}

	t.Run("closed", func(t *testing.T) {
		s.Close()
		_, err := s.Place(ctx, site.Placement{Session: newSession("s2", "alice", "app", "dg"), Candidates: []site.Candidate{{Machine: "m1"}}})
		if site.ErrorCode(err) != site.EUnavailable {
			t.Fatalf("place on a closed store: %v, want code %s", err, site.EUnavailable)
		}
	})
}

// TestPlaceUnderConcurrency: several brokers, each with its own pool,
// place thousands of sessions at once on a few machines with small
// limits, trying them in different orders, while sessions end, machines
// heartbeat and an administrator changes the configuration. No placement
// fails (no deadlock, no lock timeout); no machine ever counts more
// sessions than its limit; every placement has exactly one session and
// every count matches the sessions stored; a user who launches with a
// reconnection rule never has two live sessions; and the configuration
// version moves by one per assignment and per change.
func TestPlaceUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	const brokers, workers, limit = 3, 6, 2
	rounds := 400
	if testing.Short() {
		rounds = 60
	}
	var ruled, free []string
	for i := range 8 {
		ruled, free = append(ruled, fmt.Sprint("r", i)), append(free, fmt.Sprint("f", i))
	}
	first := MustOpen(t, dsn)
	placeSite(t, first, append(slices.Clone(ruled), free...)...)
	stores := []*pgstore.Store{first}
	for len(stores) < brokers {
		stores = append(stores, MustOpenWith(t, dsn, pgstore.Options{MaxConns: workers + 2}))
	}
	apps, desks := []string{"m1", "m2", "m3", "m4"}, []string{"d1", "d2", "d3", "d4"}
	v0 := version(t, first)

	type outcome struct {
		id, user, machine string
	}
	var (
		mu          sync.Mutex
		claims      []outcome
		reconnects  int
		nothing     int
		ended       atomic.Int64
		adminWrites atomic.Int64
	)
	stop := make(chan struct{})
	var background sync.WaitGroup
	for _, s := range stores {
		background.Go(func() { // heartbeats
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				m := append(slices.Clone(apps), desks...)[i%8]
				if err := s.Update(ctx, func(tx site.Tx) error {
					st, err := tx.MachineStatus(ctx, m)
					if err != nil {
						return err
					}
					st.CPUPercent, st.LastHeartbeat = float64(i%100), time.Now()
					return tx.SetMachineStatus(ctx, m, st)
				}); err != nil {
					t.Errorf("heartbeat of %s: %v", m, err)
				}
			}
		})
	}
	background.Go(func() { // an administrator
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if err := first.Update(ctx, func(tx site.Tx) error {
				if _, err := tx.Machines().Get(ctx, apps[i%4]); err != nil {
					return err
				}
				return tx.Zones().Update(ctx, site.Zone{Name: "z", Primary: true, Description: fmt.Sprint("edit ", i)})
			}); err != nil {
				t.Errorf("configuration change: %v", err)
				continue
			}
			adminWrites.Add(1)
		}
	})

	start := time.Now()
	var wg sync.WaitGroup
	for b, s := range stores {
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(b), uint64(w)))
				var held []string // the sessions this worker's users are in
				for i := range rounds {
					p := site.Placement{}
					lim := limit
					switch i % 4 {
					case 0, 1: // an application, going back to the user's session
						user := ruled[(b*workers+w+i)%len(ruled)]
						p.Session = newSession(fmt.Sprintf("a-%d-%d-%d", b, w, i), user, "app", "dg")
						p.Reconnect = &site.ReconnectRule{Groups: []string{"dg"}, Policies: []site.ReconnectPolicy{site.ReconnectAlways}, Resources: []string{"app"}}
					case 2: // an application, a new session
						p.Session = newSession(fmt.Sprintf("n-%d-%d-%d", b, w, i), free[rng.IntN(len(free))], "app", "dg")
					case 3: // a desktop of one's own
						p.Session = newSession(fmt.Sprintf("d-%d-%d-%d", b, w, i), free[rng.IntN(len(free))], "desk", "ddg")
						lim = 1
					}
					machines := apps
					if i%4 == 3 {
						machines = desks
					}
					for _, j := range rng.Perm(len(machines))[:3] {
						p.Candidates = append(p.Candidates, site.Candidate{Machine: machines[j], Limit: lim, LoadIndex: rng.IntN(1000), Assign: i%4 == 3})
					}
					placed, err := s.Place(ctx, p)
					if err != nil {
						t.Errorf("place %s: %v", p.Session.ID, err)
						continue
					}
					var sess site.Session
					switch {
					case placed.Reconnect != nil:
						sess = *placed.Reconnect
						if sess.User != p.Session.User {
							t.Errorf("place %s: back to %+v, another user's", p.Session.ID, sess)
						}
						mu.Lock()
						reconnects++
						mu.Unlock()
					case placed.Session.ID != "":
						sess = placed.Session
						if n := placed.Status.Sessions; n < 1 || n > lim {
							t.Errorf("place %s: %s counts %d sessions, limit %d", sess.ID, sess.Machine, n, lim)
						}
						mu.Lock()
						claims = append(claims, outcome{sess.ID, sess.User, sess.Machine})
						mu.Unlock()
					default:
						for m, st := range placed.Refused {
							if st.Registration == site.Registered && st.Sessions < lim && !strings.HasPrefix(m, "d") {
								t.Errorf("place %s: %s refused with %+v", p.Session.ID, m, st)
							}
						}
						mu.Lock()
						nothing++
						mu.Unlock()
					}
					if sess.ID != "" && !slices.Contains(held, sess.ID) {
						held = append(held, sess.ID)
					}
					// Users log off, some at once, some later.
					for len(held) > 0 && (len(held) > 2 || rng.IntN(2) == 0) {
						if err := endSession(ctx, s, held[0]); err != nil {
							t.Errorf("end %s: %v", held[0], err)
						}
						held = held[1:]
						ended.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	background.Wait()
	t.Logf("%d brokers, %d placements in %v: %d sessions placed, %d reconnections, %d with no room; %d ends, %d configuration changes",
		brokers, brokers*workers*rounds, elapsed.Round(time.Millisecond), len(claims), reconnects, nothing, ended.Load(), adminWrites.Load())
	if len(claims) < brokers*workers*rounds/4 {
		t.Errorf("only %d sessions placed: the test does not test much", len(claims))
	}

	if err := first.View(ctx, func(tx site.Tx) error {
		all, err := tx.Sessions().List(ctx, site.SessionFilter{}, site.ListOptions{})
		if err != nil {
			return err
		}
		stored := map[string]site.Session{}
		for _, sess := range all.Items {
			stored[sess.ID] = sess
		}
		if len(all.Items) != len(claims) {
			t.Errorf("%d sessions stored, %d placed", len(all.Items), len(claims))
		}
		for _, c := range claims {
			if sess, ok := stored[c.id]; !ok || sess.Machine != c.machine || sess.User != c.user {
				t.Errorf("placed %+v, stored %+v", c, sess)
			}
		}
		live := map[string]int{}
		perUser := map[string]int{}
		for _, sess := range all.Items {
			if sess.State != site.SessionLoggedOff {
				live[sess.Machine]++
				perUser[sess.User]++
			}
		}
		for _, u := range ruled {
			if perUser[u] > 1 {
				t.Errorf("%s, who always launches with a reconnection rule, has %d live sessions", u, perUser[u])
			}
		}
		assigned := 0
		for _, m := range append(slices.Clone(apps), desks...) {
			st, err := tx.MachineStatus(ctx, m)
			if err != nil {
				return err
			}
			lim := limit
			if strings.HasPrefix(m, "d") {
				lim = 1
			}
			if st.Sessions != live[m] || st.LogonsInProgress != live[m] || st.Sessions > lim {
				t.Errorf("%s counts %d sessions (%d logons) and has %d live, limit %d", m, st.Sessions, st.LogonsInProgress, live[m], lim)
			}
			mach, err := tx.Machines().Get(ctx, m)
			if err != nil {
				return err
			}
			if mach.AssignedUser != "" {
				assigned++
			}
			for _, c := range claims {
				if c.machine == m && strings.HasPrefix(m, "d") && c.user != mach.AssignedUser {
					t.Errorf("%s is %s's, and %s was placed on it", m, mach.AssignedUser, c.user)
				}
			}
		}
		t.Logf("%d desktops assigned", assigned)
		v, err := tx.ConfigVersion(ctx)
		if err == nil && v != v0+int64(assigned)+adminWrites.Load() {
			t.Errorf("configuration version %d, want %d + %d assignments + %d changes", v, v0, assigned, adminWrites.Load())
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// endSession ends a session and gives its slot back, as the broker does.
func endSession(ctx context.Context, s site.Store, id string) error {
	return s.Update(ctx, func(tx site.Tx) error {
		sess, err := tx.Sessions().Get(ctx, id)
		if err != nil || sess.State == site.SessionLoggedOff {
			return err
		}
		st, err := tx.MachineStatus(ctx, sess.Machine)
		if err != nil {
			return err
		}
		st.Sessions = max(0, st.Sessions-1)
		if sess.State == site.SessionPending {
			st.LogonsInProgress = max(0, st.LogonsInProgress-1)
		}
		if err := tx.SetMachineStatus(ctx, sess.Machine, st); err != nil {
			return err
		}
		sess.State, sess.EndedAt = site.SessionLoggedOff, time.Now()
		return tx.Sessions().Update(ctx, sess)
	})
}
