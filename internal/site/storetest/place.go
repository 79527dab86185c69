package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

// testPlace holds Place to site.PlaceTx's behaviour: the reconnection
// rule, the candidates in order, the limits under concurrency, and the
// assignment of assigned desktops.
func testPlace(t *testing.T, open func(*testing.T) site.Store) {
	placer := func(t *testing.T) (site.Store, site.Placer) {
		t.Helper()
		s := openBase(t, open)
		register(t, s, "app1", "app2", "spare1", "vdi1", "vdi2")
		return s, s
	}
	newSession := func(id, user, resource, group string) site.Session {
		return site.Session{ID: id, User: user, Resource: resource, DeliveryGroup: group, State: site.SessionPending,
			ClientName: "LAPTOP-1", ClientAddress: "192.0.2.1", CreatedAt: ms(2025, 1, 2, 3, 4, 5, 0, nil), UpdatedAt: ms(2025, 1, 2, 3, 4, 5, 0, nil)}
	}
	place := func(t *testing.T, p site.Placer, pl site.Placement) site.Placed {
		t.Helper()
		got, err := p.Place(t.Context(), pl)
		if err != nil {
			t.Fatalf("place: %v", err)
		}
		return got
	}

	t.Run("ClaimsTheFirstCandidateThatFits", func(t *testing.T) {
		t.Parallel()
		s, p := placer(t)
		setUsage(t, s, "app1", 2, 0)
		unregister(t, s, "spare1")
		v := version(t, s)
		got := place(t, p, site.Placement{Session: newSession("s1", "alice", "notepad", "apps"), Candidates: []site.Candidate{
			{Machine: "ghost", Limit: 5}, {Machine: "spare1"}, {Machine: "app1", Limit: 30, LoadIndex: 1234}, {Machine: "app2"}}})
		if got.Reconnect != nil || got.Session.ID != "s1" || got.Session.Machine != "app1" {
			t.Fatalf("placed %+v, want a new session s1 on app1", got)
		}
		if st := got.Status; st.Sessions != 3 || st.LogonsInProgress != 1 || st.LoadIndex != 1234 || st.Registration != site.Registered {
			t.Errorf("status after the claim %+v, want 3 sessions, 1 logon, load index 1234", st)
		}
		// The placement hands the broker where and how to reach the VDA,
		// the pin of its control listener's certificate included.
		if st := got.Status; st.ControlURL != "https://vda/app1" || st.ControlPin != pinOf("app1") {
			t.Errorf("status after the claim: control URL %q, pin %q; want https://vda/app1 and its pin", st.ControlURL, st.ControlPin)
		}
		if st := got.Refused["spare1"]; st.ControlPin != pinOf("spare1") {
			t.Errorf("refused spare1's status has pin %q, want its own", st.ControlPin)
		}
		if _, ok := got.Refused["spare1"]; !ok || len(got.Refused) != 1 {
			t.Errorf("refused %v, want spare1 alone (a missing machine is absent, later candidates untried)", got.Refused)
		}
		wantVersion(t, s, v)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			sess, err := tx.Sessions().Get(ctx, "s1")
			if err != nil {
				return err
			}
			if !same(sess, got.Session) {
				t.Errorf("stored %+v, want %+v", sess, got.Session)
			}
			st, err := tx.MachineStatus(ctx, "app1")
			if err != nil {
				return err
			}
			if !same(st, got.Status) {
				t.Errorf("stored status %+v, want %+v", st, got.Status)
			}
			return nil
		})
	})

	t.Run("AFullMachineIsRefused", func(t *testing.T) {
		t.Parallel()
		s, p := placer(t)
		setUsage(t, s, "app1", 4, 0)
		got := place(t, p, site.Placement{Session: newSession("s1", "alice", "notepad", "apps"), Candidates: []site.Candidate{
			{Machine: "app1", Limit: 4}, {Machine: "spare1", Limit: 1}}})
		if got.Session.Machine != "spare1" || got.Refused["app1"].Sessions != 4 {
			t.Fatalf("placed %+v, want spare1 with app1 refused at 4 sessions", got)
		}
		got = place(t, p, site.Placement{Session: newSession("s2", "bob", "notepad", "apps"), Candidates: []site.Candidate{
			{Machine: "app1", Limit: 4}, {Machine: "spare1", Limit: 1}}})
		if got.Placed() || len(got.Refused) != 2 {
			t.Fatalf("placed %+v on full machines, want nothing and both refused", got)
		}
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := tx.Sessions().Get(ctx, "s2")
			wantCode(t, err, site.ENotFound)
			return nil
		})
	})

	t.Run("Reconnects", func(t *testing.T) {
		t.Parallel()
		s, p := placer(t)
		live := []site.Session{
			{ID: "a-ended", User: "alice", Resource: "notepad", DeliveryGroup: "apps", Machine: "app1", State: site.SessionLoggedOff},
			{ID: "a-active-unnamed", User: "alice", Resource: "calc", DeliveryGroup: "apps", Machine: "app1", State: site.SessionActive},
			{ID: "b-active", User: "alice", Resource: "calc", DeliveryGroup: "apps", Machine: "app1", State: site.SessionActive, ClientName: "DESK-9"},
			{ID: "c-other-user", User: "bob", Resource: "notepad", DeliveryGroup: "apps", Machine: "app1", State: site.SessionDisconnected},
			{ID: "d-other-group", User: "alice", Resource: "spare-app", DeliveryGroup: "spare", Machine: "spare1", State: site.SessionDisconnected},
			{ID: "e-disconnected", User: "alice", Resource: "notepad", DeliveryGroup: "apps", Machine: "app2", State: site.SessionDisconnected},
			{ID: "f-pending", User: "alice", Resource: "notepad", DeliveryGroup: "apps", Machine: "app1", State: site.SessionPending},
		}
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, sess := range live {
				if err := tx.Sessions().Create(ctx, sess); err != nil {
					return err
				}
			}
			return nil
		})
		rule := func(policy site.ReconnectPolicy, client string, skip ...string) *site.ReconnectRule {
			return &site.ReconnectRule{Groups: []string{"apps"}, Policies: []site.ReconnectPolicy{policy},
				Resources: []string{"notepad", "calc"}, ClientName: client, Skip: skip}
		}
		for _, c := range []struct {
			name string
			rule *site.ReconnectRule
			want string
		}{
			{"ActiveUnderAlways", rule(site.ReconnectAlways, "", "a-active-unnamed"), "b-active"},
			{"ActiveFromTheSameEndpoint", rule(site.ReconnectSameEndpointOnly, "DESK-9"), "b-active"},
			{"NotActiveFromAnotherEndpoint", rule(site.ReconnectSameEndpointOnly, "LAPTOP-1"), "e-disconnected"},
			{"NotActiveFromAnUnnamedEndpoint", rule(site.ReconnectSameEndpointOnly, ""), "e-disconnected"},
			{"DisconnectedOnly", rule(site.ReconnectDisconnectedOnly, "DESK-9"), "e-disconnected"},
			{"SkippedSessions", rule(site.ReconnectAlways, "", "a-active-unnamed", "b-active", "e-disconnected"), "f-pending"},
			{"NotOtherResources", &site.ReconnectRule{Groups: []string{"apps", "spare"}, Policies: []site.ReconnectPolicy{site.ReconnectAlways, site.ReconnectAlways},
				Resources: []string{"spare-app"}}, "d-other-group"},
		} {
			t.Run(c.name, func(t *testing.T) {
				v := version(t, s)
				got := place(t, p, site.Placement{Session: newSession("new-"+c.name, "alice", "notepad", "apps"), Reconnect: c.rule,
					Candidates: []site.Candidate{{Machine: "spare1"}}})
				if got.Reconnect == nil || got.Reconnect.ID != c.want || got.Session.ID != "" {
					t.Fatalf("placed %+v, want a reconnection to %s", got, c.want)
				}
				if got.Status.Registration != site.Registered || got.Status.Sessions != 0 {
					t.Errorf("status %+v, want the reconnection's machine untouched", got.Status)
				}
				if got.Status.ControlPin != pinOf(got.Reconnect.Machine) {
					t.Errorf("status of the reconnection's machine has pin %q, want %s's", got.Status.ControlPin, got.Reconnect.Machine)
				}
				wantVersion(t, s, v)
			})
		}

		t.Run("NotOnAnUnregisteredMachine", func(t *testing.T) {
			unregister(t, s, "app1", "app2")
			got := place(t, p, site.Placement{Session: newSession("new-unreg", "alice", "notepad", "apps"),
				Reconnect: rule(site.ReconnectAlways, ""), Candidates: []site.Candidate{{Machine: "spare1"}}})
			if got.Reconnect != nil || got.Session.Machine != "spare1" {
				t.Fatalf("placed %+v, want a new session on spare1", got)
			}
		})
	})

	t.Run("AssignsADesktopOnce", func(t *testing.T) {
		t.Parallel()
		s, p := placer(t)
		notOnCopy(t, s, copyAssignsNothing)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Machines().Create(ctx, site.Machine{Name: "vdi3", Catalog: "vdi-cat", Address: "10.0.1.3:1494", MaxSessions: 1})
		})
		register(t, s, "vdi3")
		v := version(t, s)
		// vdi2 is erin's: not alice's to take.
		got := place(t, p, site.Placement{Session: newSession("s1", "alice", "vdi-desktop", "vdi"), Candidates: []site.Candidate{
			{Machine: "vdi2", Limit: 1, Assign: true}, {Machine: "vdi3", Limit: 1, Assign: true}}})
		if got.Session.Machine != "vdi3" {
			t.Fatalf("placed %+v, want vdi3", got)
		}
		if _, ok := got.Refused["vdi2"]; !ok {
			t.Errorf("refused %v, want vdi2 (erin's)", got.Refused)
		}
		wantVersion(t, s, v+1)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			m, err := tx.Machines().Get(ctx, "vdi3")
			if err == nil && m.AssignedUser != "alice" {
				t.Errorf("vdi3 is assigned to %q, want alice", m.AssignedUser)
			}
			return err
		})
		// erin's own machine takes her without another change.
		got = place(t, p, site.Placement{Session: newSession("s2", "erin", "vdi-desktop", "vdi"), Candidates: []site.Candidate{
			{Machine: "vdi2", Limit: 1, Assign: true}}})
		if got.Session.Machine != "vdi2" {
			t.Fatalf("placed %+v, want vdi2", got)
		}
		wantVersion(t, s, v+1)
	})

	t.Run("LimitsHoldUnderConcurrency", func(t *testing.T) {
		t.Parallel()
		s, p := placer(t)
		const launches, limit = 24, 5
		var wg sync.WaitGroup
		placed := make([]site.Placed, launches)
		errs := make([]error, launches)
		for i := range launches {
			wg.Go(func() {
				placed[i], errs[i] = p.Place(t.Context(), site.Placement{Session: newSession(fmt.Sprintf("s%02d", i), "alice", "notepad", "apps"),
					Candidates: []site.Candidate{{Machine: "app1", Limit: limit}, {Machine: "spare1", Limit: limit}}})
			})
		}
		wg.Wait()
		on := map[string]int{}
		for i := range launches {
			if errs[i] != nil {
				t.Fatalf("place %d: %v", i, errs[i])
			}
			if placed[i].Placed() {
				on[placed[i].Session.Machine]++
			}
		}
		if on["app1"] != limit || on["spare1"] != limit {
			t.Errorf("sessions placed %v, want %d on each machine", on, limit)
		}
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, m := range []string{"app1", "spare1"} {
				st, err := tx.MachineStatus(ctx, m)
				if err != nil {
					return err
				}
				page, err := tx.Sessions().List(ctx, site.SessionFilter{Machine: m}, site.ListOptions{})
				if err != nil {
					return err
				}
				if st.Sessions != limit || page.Total != limit {
					t.Errorf("%s: status counts %d sessions and %d are stored, want %d", m, st.Sessions, page.Total, limit)
				}
			}
			return nil
		})
	})

	// A double click, two tabs or two brokers: concurrent placements of
	// one user that carry one rule make one session and go back to it,
	// pending, whatever the policy says of active sessions, on
	// multi-session and on single-session (assigned) machines alike.
	t.Run("ConcurrentLaunchesOfOneUserMakeOneSession", func(t *testing.T) {
		t.Parallel()
		apps := func(policy site.ReconnectPolicy, client string) *site.ReconnectRule {
			return &site.ReconnectRule{Groups: []string{"apps"}, Policies: []site.ReconnectPolicy{policy},
				Resources: []string{"notepad", "calc"}, ClientName: client}
		}
		for _, c := range []struct {
			name, resource, group string
			rule                  *site.ReconnectRule
			candidates            []site.Candidate
		}{
			{"ApplicationUnderAlways", "notepad", "apps", apps(site.ReconnectAlways, ""),
				[]site.Candidate{{Machine: "app1"}, {Machine: "spare1"}}},
			{"ApplicationUnderDisconnectedOnly", "notepad", "apps", apps(site.ReconnectDisconnectedOnly, ""),
				[]site.Candidate{{Machine: "app1", Limit: 30}, {Machine: "spare1"}}},
			{"ApplicationFromAnotherEndpoint", "notepad", "apps", apps(site.ReconnectSameEndpointOnly, "DESK-9"),
				[]site.Candidate{{Machine: "app1"}, {Machine: "spare1"}}},
			{"AssignedDesktop", "vdi-desktop", "vdi",
				&site.ReconnectRule{Groups: []string{"vdi"}, Policies: []site.ReconnectPolicy{site.ReconnectDisconnectedOnly}, Resources: []string{"vdi-desktop"}},
				[]site.Candidate{{Machine: "vdi3", Limit: 1, Assign: true}, {Machine: "vdi4", Limit: 1, Assign: true}}},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				s, p := placer(t)
				if slices.ContainsFunc(c.candidates, func(c site.Candidate) bool { return c.Assign }) {
					notOnCopy(t, s, copyAssignsNothing)
				}
				setUp(t, s, func(ctx context.Context, tx site.Tx) error {
					for _, m := range []string{"vdi3", "vdi4"} {
						if err := tx.Machines().Create(ctx, site.Machine{Name: m, Catalog: "vdi-cat", Address: "10.0.1.9:1494", MaxSessions: 1}); err != nil {
							return err
						}
					}
					return nil
				})
				register(t, s, "vdi3", "vdi4")
				const launches = 12
				var wg sync.WaitGroup
				placed := make([]site.Placed, launches)
				errs := make([]error, launches)
				for i := range launches {
					wg.Go(func() {
						placed[i], errs[i] = p.Place(t.Context(), site.Placement{Session: newSession(fmt.Sprintf("s%02d", i), "alice", c.resource, c.group),
							Reconnect: c.rule, Candidates: c.candidates})
					})
				}
				wg.Wait()
				var created []site.Session
				for i := range launches {
					if errs[i] != nil {
						t.Fatalf("place %d: %v", i, errs[i])
					}
					switch {
					case placed[i].Session.ID != "":
						created = append(created, placed[i].Session)
					case placed[i].Reconnect == nil:
						t.Errorf("launch %d was neither placed nor reconnected", i)
					}
				}
				if len(created) != 1 {
					t.Fatalf("%d sessions created for one user's concurrent launches, want 1 and the rest reconnected", len(created))
				}
				made := created[0]
				for i := range launches {
					if r := placed[i].Reconnect; r != nil && (r.ID != made.ID || r.State != site.SessionPending || r.Machine != made.Machine) {
						t.Errorf("launch %d went back to %s (%s) on %s, want the pending %s on %s", i, r.ID, r.State, r.Machine, made.ID, made.Machine)
					}
				}
				view(t, s, func(ctx context.Context, tx site.Tx) error {
					live, err := tx.Sessions().List(ctx, site.SessionFilter{User: "alice", Live: true}, site.ListOptions{})
					if err != nil {
						return err
					}
					if live.Total != 1 {
						t.Errorf("alice holds %d live sessions, want 1", live.Total)
					}
					st, err := tx.MachineStatus(ctx, made.Machine)
					if err != nil {
						return err
					}
					if st.Sessions != 1 || st.LogonsInProgress != 1 {
						t.Errorf("%s counts %d sessions, %d logging on; want the one pending session once", made.Machine, st.Sessions, st.LogonsInProgress)
					}
					if c.candidates[0].Assign {
						m, err := tx.Machines().Get(ctx, made.Machine)
						if err != nil {
							return err
						}
						if m.AssignedUser != "alice" {
							t.Errorf("%s is assigned to %q, want alice", m.Name, m.AssignedUser)
						}
						other := c.candidates[1].Machine
						if other == made.Machine {
							other = c.candidates[0].Machine
						}
						if m, err = tx.Machines().Get(ctx, other); err == nil && m.AssignedUser != "" {
							t.Errorf("%s is assigned to %q as well: one user's launches took two desktops", m.Name, m.AssignedUser)
						}
						return err
					}
					return nil
				})
			})
		}
	})

	t.Run("PlacesAUserTheSiteDoesNotHold", func(t *testing.T) {
		t.Parallel()
		// A directory's users are not in the site DB; their sessions are.
		_, p := placer(t)
		out, err := p.Place(t.Context(), site.Placement{Session: newSession("s-dir", `jdoe`, "notepad", "apps"),
			Candidates: []site.Candidate{{Machine: "app1"}}})
		if err != nil || out.Session.Machine != "app1" || out.Session.User != "jdoe" {
			t.Fatalf("place = %+v, %v; want jdoe's session on app1", out, err)
		}
	})

	t.Run("AFailedPlacementChangesNothing", func(t *testing.T) {
		t.Parallel()
		s, p := placer(t)
		for name, sess := range map[string]site.Session{
			"unknown resource": newSession("s2", "alice", "ghost-app", "apps"),
		} {
			_, err := p.Place(t.Context(), site.Placement{Session: sess, Candidates: []site.Candidate{{Machine: "app1"}}})
			if site.ErrorCode(err) != site.EInvalid {
				t.Errorf("%s: %v, want %s", name, err, site.EInvalid)
			}
		}
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			st, err := tx.MachineStatus(ctx, "app1")
			if err != nil {
				return err
			}
			page, err := tx.Sessions().List(ctx, site.SessionFilter{}, site.ListOptions{})
			if err != nil {
				return err
			}
			if st.Sessions != 0 || st.LogonsInProgress != 0 || page.Total != 0 {
				t.Errorf("after failed placements: %d sessions, %d logons counted, %d stored; want none", st.Sessions, st.LogonsInProgress, page.Total)
			}
			return nil
		})
	})

	t.Run("RefusesMalformedPlacements", func(t *testing.T) {
		t.Parallel()
		_, p := placer(t)
		good := site.Placement{Session: newSession("s1", "alice", "notepad", "apps"), Candidates: []site.Candidate{{Machine: "app1"}}}
		for name, change := range map[string]func(*site.Placement){
			"no ID":        func(p *site.Placement) { p.Session.ID = "" },
			"active":       func(p *site.Placement) { p.Session.State = site.SessionActive },
			"policies":     func(p *site.Placement) { p.Reconnect = &site.ReconnectRule{Groups: []string{"apps"}} },
			"load index":   func(p *site.Placement) { p.Candidates[0].LoadIndex = site.MaxLoadIndex + 1 },
			"no candidate": func(p *site.Placement) { p.Candidates[0].Machine = "" },
		} {
			pl := good
			pl.Candidates = append([]site.Candidate(nil), good.Candidates...)
			change(&pl)
			_, err := p.Place(t.Context(), pl)
			if site.ErrorCode(err) != site.EInvalid {
				t.Errorf("%s: %v, want %s", name, err, site.EInvalid)
			}
		}
	})
}

// register marks machines registered with no sessions.
func register(t *testing.T, s site.Store, machines ...string) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx site.Tx) error {
		for _, m := range machines {
			st := site.MachineStatus{Registration: site.Registered, ControlURL: "https://vda/" + m, ControlPin: pinOf(m)}
			if err := tx.SetMachineStatus(ctx, m, st); err != nil {
				return err
			}
		}
		return nil
	})
}

// pinOf is the control pin register gives machine: the hex SHA-256 of
// its name.
func pinOf(machine string) string {
	sum := sha256.Sum256([]byte(machine))
	return hex.EncodeToString(sum[:])
}

// unregister marks machines unregistered.
func unregister(t *testing.T, s site.Store, machines ...string) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx site.Tx) error {
		for _, m := range machines {
			st, err := tx.MachineStatus(ctx, m)
			if err != nil {
				return err
			}
			st.Registration = site.Unregistered
			if err := tx.SetMachineStatus(ctx, m, st); err != nil {
				return err
			}
		}
		return nil
	})
}

// setUsage sets a machine's session and logon counts.
func setUsage(t *testing.T, s site.Store, machine string, sessions, logons int) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx site.Tx) error {
		st, err := tx.MachineStatus(ctx, machine)
		if err != nil {
			return err
		}
		st.Sessions, st.LogonsInProgress = sessions, logons
		return tx.SetMachineStatus(ctx, machine, st)
	})
}
