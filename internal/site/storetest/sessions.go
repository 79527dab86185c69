package storetest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

func testMachineStatus(t *testing.T, open func(*testing.T) site.Store) {
	s := openBase(t, open)
	cet := time.FixedZone("CET", 3600)

	t.Run("NewMachineIsUnregistered", func(t *testing.T) {
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			st, err := tx.MachineStatus(ctx, "app1")
			if err != nil {
				return err
			}
			if want := (site.MachineStatus{Registration: site.Unregistered}); !same(st, want) {
				t.Errorf("status = %+v, want %+v", st, want)
			}
			return nil
		})
	})

	t.Run("StatusRoundTrips", func(t *testing.T) {
		want := site.MachineStatus{
			Registration:  site.Registered,
			LastHeartbeat: ms(2025, 6, 30, 23, 59, 58, 123, cet),
			LoadIndex:     site.MaxLoadIndex,
			Usage: site.Usage{Sessions: 42, CPUPercent: 87.5, MemoryPercent: 12.25,
				LogonsInProgress: 3, MemoryUsedMB: 2048, MemoryTotalMB: 16384},
			// What a VDA registers.
			RegisteredAddress: "10.1.2.3:3389",
			Protocol:          "rdp",
			ControlURL:        "https://10.1.2.3:8081/vda/app2",
			ControlToken:      "secret-control-token",
			ControlPin:        "5d41402abc4b2a76b9719d911017c592a7f2d8e11a4c2c0e8b3f9a7c6d5e4f30",
			AgentVersion:      "1.2.3",
			Conflict:          "another VDA tried to register from http://10.9.9.9:8490",
			ConflictAt:        ms(2025, 6, 30, 23, 59, 57, 5, nil),
			Credential:        "cred-of-the-registered-vda",
		}
		v := version(t, s)
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetMachineStatus(ctx, "app2", want) })
		wantVersion(t, s, v)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.MachineStatus(ctx, "app2")
			if err != nil {
				return err
			}
			if !got.LastHeartbeat.Equal(want.LastHeartbeat) {
				t.Errorf("heartbeat %v, want %v", got.LastHeartbeat, want.LastHeartbeat)
			}
			if !same(got, want) {
				t.Errorf("status = %+v, want %+v", got, want)
			}
			return nil
		})
		// And back to unregistered with no heartbeat.
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.SetMachineStatus(ctx, "app2", site.MachineStatus{Registration: site.Unregistered})
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.MachineStatus(ctx, "app2")
			if err != nil || !got.LastHeartbeat.IsZero() || got.Registration != site.Unregistered || got.Sessions != 0 {
				t.Errorf("status = %+v, %v; want unregistered and zero", got, err)
			}
			return nil
		})
	})

	t.Run("AllStatusesInOneRead", func(t *testing.T) {
		want := site.MachineStatus{Registration: site.Registered, LastHeartbeat: ms(2025, 7, 1, 8, 0, 0, 1, cet), LoadIndex: 500,
			Usage: site.Usage{Sessions: 2}, ControlURL: "http://10.0.0.5:8081/vda/spare1", Credential: "c"}
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetMachineStatus(ctx, "spare1", want) })
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			all, err := tx.MachineStatuses(ctx)
			if err != nil {
				return err
			}
			if len(all) != len(base().Machines) {
				t.Errorf("%d statuses, want one per machine (%d)", len(all), len(base().Machines))
			}
			for _, m := range base().Machines {
				one, err := tx.MachineStatus(ctx, m.Name)
				if err != nil {
					return err
				}
				if got, ok := all[m.Name]; !ok || !same(got, one) {
					t.Errorf("%s: %+v in all, %+v alone", m.Name, got, one)
				}
			}
			if !same(all["spare1"], want) {
				t.Errorf("spare1: %+v, want %+v", all["spare1"], want)
			}
			return nil
		})
	})

	t.Run("UnknownMachineIsNotFound", func(t *testing.T) {
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := tx.MachineStatus(ctx, "no-such")
			wantMessage(t, err, site.ENotFound, `"no-such"`)
			return tx.SetMachineStatus(ctx, "no-such", site.MachineStatus{Registration: site.Registered})
		})
		wantMessage(t, err, site.ENotFound, `"no-such"`)
	})

	t.Run("ConfigUpdateKeepsStatus", func(t *testing.T) {
		notOnCopy(t, s, copyRefusesConfig)
		want := site.MachineStatus{Registration: site.Registered, LastHeartbeat: ms(2025, 1, 1, 0, 0, 0, 1, nil), LoadIndex: 1234, Usage: site.Usage{Sessions: 5, CPUPercent: 50, MemoryPercent: 60}}
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetMachineStatus(ctx, "spare1", want) })
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return modify(ctx, tx.Machines(), "spare1", func(m *site.Machine) { m.Maintenance, m.Address = true, "10.9.9.9:1494" })
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.MachineStatus(ctx, "spare1")
			if err != nil || !same(got, want) {
				t.Errorf("status after machine update = %+v, %v; want %+v", got, err, want)
			}
			return nil
		})
	})

	t.Run("DeletedMachineHasNoStatus", func(t *testing.T) {
		notOnCopy(t, s, copyRefusesConfig)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			if err := tx.SetMachineStatus(ctx, "app1", site.MachineStatus{Registration: site.Registered}); err != nil {
				return err
			}
			return tx.Machines().Delete(ctx, "app1")
		})
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Machines().Create(ctx, site.Machine{Name: "app1", Catalog: "apps-cat", Address: "10.0.0.1:1494"})
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.MachineStatus(ctx, "app1")
			if err != nil || got.Registration != site.Unregistered {
				t.Errorf("status of a re-created machine = %+v, %v; want unregistered", got, err)
			}
			return nil
		})
	})
}

func testSessions(t *testing.T, open func(*testing.T) site.Store) {
	cet := time.FixedZone("CET", 3600)
	full := site.Session{
		ID: "s-full", User: "alice", Resource: "notepad", DeliveryGroup: "apps", Machine: "app1",
		State: site.SessionActive, ClientName: "LAPTOP-7", ClientAddress: "192.0.2.7",
		CreatedAt: ms(2025, 3, 4, 5, 6, 7, 8, cet),
		UpdatedAt: ms(2025, 3, 4, 5, 16, 7, 999, nil),
		EndedAt:   ms(2025, 3, 4, 6, 0, 0, 0, nil),
	}

	t.Run("CRUD", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		v := version(t, s)

		t.Run("CreateThenGetReturnsTheSession", func(t *testing.T) {
			update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Sessions().Create(ctx, full) })
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				got, err := tx.Sessions().Get(ctx, full.ID)
				if err != nil {
					return err
				}
				if !got.CreatedAt.Equal(full.CreatedAt) || !got.UpdatedAt.Equal(full.UpdatedAt) || !got.EndedAt.Equal(full.EndedAt) {
					t.Errorf("times %v %v %v, want %v %v %v", got.CreatedAt, got.UpdatedAt, got.EndedAt, full.CreatedAt, full.UpdatedAt, full.EndedAt)
				}
				if !same(got, full) {
					t.Errorf("get = %+v, want %+v", got, full)
				}
				return nil
			})
		})

		t.Run("MachineSessionReadsBoth", func(t *testing.T) {
			update(t, s, func(ctx context.Context, tx site.Tx) error {
				st, sess, err := site.MachineSession(ctx, tx, full.Machine, full.ID)
				if err != nil {
					return err
				}
				one, err := tx.MachineStatus(ctx, full.Machine)
				if err != nil {
					return err
				}
				if !same(st, one) || !same(sess, full) {
					t.Errorf("MachineSession = %+v, %+v; want %+v, %+v", st, sess, one, full)
				}
				return nil
			})
			err := try(t, s, func(ctx context.Context, tx site.Tx) error {
				_, _, err := site.MachineSession(ctx, tx, "no-such", full.ID)
				return err
			})
			wantMessage(t, err, site.ENotFound, `"no-such"`)
			err = try(t, s, func(ctx context.Context, tx site.Tx) error {
				_, _, err := site.MachineSession(ctx, tx, full.Machine, "no-such-session")
				return err
			})
			wantMessage(t, err, site.ENotFound, `"no-such-session"`)
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				sts, sess, err := tx.MachineSessions(ctx, []string{full.Machine, "no-such"}, []string{"no-such-session", full.ID})
				if err != nil {
					return err
				}
				one, err := tx.MachineStatus(ctx, full.Machine)
				if err != nil {
					return err
				}
				if len(sts) != 1 || !same(sts[full.Machine], one) || len(sess) != 1 || !same(sess[full.ID], full) {
					t.Errorf("MachineSessions = %+v, %+v; want %s's status and session %s alone", sts, sess, full.Machine, full.ID)
				}
				return nil
			})
		})

		t.Run("ZeroTimesStayZero", func(t *testing.T) {
			pending := site.Session{ID: "s-pending", User: "bob", Resource: "vdi-desktop", DeliveryGroup: "vdi", Machine: "vdi1", State: site.SessionPending}
			update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Sessions().Create(ctx, pending) })
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				got, err := tx.Sessions().Get(ctx, pending.ID)
				if err != nil || !same(got, pending) || !got.CreatedAt.IsZero() || !got.EndedAt.IsZero() {
					t.Errorf("get = %+v, %v; want %+v", got, err, pending)
				}
				return nil
			})
		})

		t.Run("CreateOfTakenIDIsConflict", func(t *testing.T) {
			err := try(t, s, func(ctx context.Context, tx site.Tx) error {
				other := full
				other.User = "bob"
				return tx.Sessions().Create(ctx, other)
			})
			wantMessage(t, err, site.EConflict, `"s-full"`)
		})

		t.Run("CreateNeedsResourceAndMachine", func(t *testing.T) {
			for _, c := range []struct {
				missing string
				change  func(*site.Session)
			}{
				{`resource "ghost-app"`, func(s *site.Session) { s.Resource = "ghost-app" }},
				{`machine "ghost-vda"`, func(s *site.Session) { s.Machine = "ghost-vda" }},
			} {
				sess := full
				sess.ID = "s-missing"
				c.change(&sess)
				err := try(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Sessions().Create(ctx, sess) })
				wantMessage(t, err, site.EInvalid, c.missing)
			}
		})

		t.Run("CreateTakesAUserTheSiteDoesNotHold", func(t *testing.T) {
			// A directory's users are not in the site DB; their sessions are.
			sess := full
			sess.ID, sess.User = "s-directory", "jdoe@corp.example"
			update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Sessions().Create(ctx, sess) })
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				got, err := tx.Sessions().Get(ctx, sess.ID)
				if err != nil || got.User != sess.User {
					t.Errorf("get = %+v, %v; want the session of %s", got, err, sess.User)
				}
				return nil
			})
			setUp(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Sessions().Delete(ctx, sess.ID) })
		})

		t.Run("UpdateReplacesTheSession", func(t *testing.T) {
			ended := full
			ended.State, ended.Machine, ended.ClientName, ended.ClientAddress = site.SessionLoggedOff, "app2", "", ""
			ended.UpdatedAt = ended.EndedAt
			update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Sessions().Update(ctx, ended) })
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				got, err := tx.Sessions().Get(ctx, full.ID)
				if err != nil || !same(got, ended) {
					t.Errorf("get = %+v, %v; want %+v", got, err, ended)
				}
				return nil
			})
		})

		t.Run("MissingIDIsNotFound", func(t *testing.T) {
			ghost := full
			ghost.ID = "s-ghost"
			err := try(t, s, func(ctx context.Context, tx site.Tx) error {
				_, err := tx.Sessions().Get(ctx, "s-ghost")
				wantMessage(t, err, site.ENotFound, `"s-ghost"`)
				wantMessage(t, tx.Sessions().Update(ctx, ghost), site.ENotFound, `"s-ghost"`)
				return tx.Sessions().Delete(ctx, "s-ghost")
			})
			if onCopy(s) {
				wantCode(t, err, site.ESiteDBUnavailable) // copyDeletesNothing
				return
			}
			wantMessage(t, err, site.ENotFound, `"s-ghost"`)
		})

		t.Run("DeleteRemovesTheSession", func(t *testing.T) {
			if onCopy(s) {
				// copyDeletesNothing: the delete is refused, and the
				// fixture goes as the site DB's copy would lose it.
				err := try(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Sessions().Delete(ctx, "s-pending") })
				wantCode(t, err, site.ESiteDBUnavailable)
				setUp(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Sessions().Delete(ctx, "s-pending") })
			} else {
				update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Sessions().Delete(ctx, "s-pending") })
			}
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				_, err := tx.Sessions().Get(ctx, "s-pending")
				wantCode(t, err, site.ENotFound)
				return nil
			})
		})

		t.Run("SessionsKeepConfigVersion", func(t *testing.T) {
			wantVersion(t, s, v)
		})
	})

	t.Run("ListFiltersAndOrdersByID", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		users := []string{"alice", "bob", "carol"}
		machines := []string{"app1", "app2", "spare1"}
		states := []site.SessionState{site.SessionPending, site.SessionActive, site.SessionDisconnected, site.SessionLoggedOff}
		var all []site.Session
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			for i := range 48 {
				sess := site.Session{
					ID:   fmt.Sprintf("sess-%02d", (i*29)%48), // created out of ID order
					User: users[i%3], Resource: "calc", DeliveryGroup: "apps", Machine: machines[(i/3)%3],
					State: states[i%4], CreatedAt: ms(2025, 1, 1, 0, 0, i, 0, nil),
				}
				all = append(all, sess)
				if err := tx.Sessions().Create(ctx, sess); err != nil {
					return err
				}
			}
			return nil
		})
		slices.SortFunc(all, func(a, b site.Session) int { return cmp.Compare(a.ID, b.ID) })
		filters := []site.SessionFilter{
			{},
			{User: "bob"},
			{Machine: "app2"},
			{State: site.SessionDisconnected},
			{User: "alice", Machine: "spare1"},
			{User: "carol", State: site.SessionActive},
			{User: "alice", Machine: "app1", State: site.SessionPending},
			{User: "nobody"},
			{Live: true},
			{User: "bob", Live: true},
			{Machine: "app1", Live: true},
			{State: site.SessionLoggedOff, Live: true},
			// The base site's staff are alice and bob, finance bob only;
			// auditors have no member.
			{Group: "staff"},
			{Group: "finance", Live: true},
			{Group: "staff", Machine: "app2", State: site.SessionActive},
			{Group: "auditors"},
			{Group: "nobody"},
		}
		members := map[string][]string{"staff": {"alice", "bob"}, "finance": {"bob"}}
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, f := range filters {
				var want []site.Session
				for _, sess := range all {
					if (f.User == "" || sess.User == f.User) && (f.Machine == "" || sess.Machine == f.Machine) && (f.State == "" || sess.State == f.State) &&
						(!f.Live || sess.State != site.SessionLoggedOff) && (f.Group == "" || slices.Contains(members[f.Group], sess.User)) {
						want = append(want, sess)
					}
				}
				page, err := tx.Sessions().List(ctx, f, site.ListOptions{})
				if err != nil {
					return err
				}
				if !same(page.Items, want) || page.Total != len(want) || page.Next != "" {
					t.Errorf("filter %+v: got %d sessions (total %d, next %q), want %d", f, len(page.Items), page.Total, page.Next, len(want))
				}
				got := walk(t, func(o site.ListOptions) (site.Page[site.Session], error) { return tx.Sessions().List(ctx, f, o) },
					5, len(want), func(s site.Session) string { return s.ID })
				if !same(got, want) {
					t.Errorf("filter %+v: pages hold %v, want %v", f, names(got, sessionID), names(want, sessionID))
				}
			}
			return nil
		})
	})

	t.Run("SessionsOutliveTheirConfiguration", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		notOnCopy(t, s, copyRefusesConfig)
		sess := site.Session{ID: "history", User: "temp-user", Resource: "temp-app", DeliveryGroup: "temp-dg", Machine: "temp-vda", State: site.SessionActive}
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			if err := tx.Users().Create(ctx, site.User{Name: "temp-user"}); err != nil {
				return err
			}
			if err := tx.Machines().Create(ctx, site.Machine{Name: "temp-vda", Catalog: "spare-cat", Address: "h:1"}); err != nil {
				return err
			}
			if err := tx.DeliveryGroups().Create(ctx, site.NewDeliveryGroup("temp-dg")); err != nil {
				return err
			}
			if err := tx.Applications().Create(ctx, site.Resource{Kind: site.Application, Name: "temp-app", DisplayName: "T", CommandLine: "t", DeliveryGroups: []string{"temp-dg"}}); err != nil {
				return err
			}
			return tx.Sessions().Create(ctx, sess)
		})
		// A machine with a live session cannot go: the session ends first.
		err := try(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Machines().Delete(ctx, "temp-vda") })
		wantMessage(t, err, site.EConflict, "1 live session")
		ended := sess
		ended.State = site.SessionLoggedOff
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Sessions().Update(ctx, ended) })
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, err := range []error{
				tx.Applications().Delete(ctx, "temp-app"),
				tx.DeliveryGroups().Delete(ctx, "temp-dg"),
				tx.Machines().Delete(ctx, "temp-vda"),
				tx.Users().Delete(ctx, "temp-user"),
			} {
				if err != nil {
					return err
				}
			}
			return nil
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.Sessions().Get(ctx, "history")
			if err != nil || !same(got, ended) {
				t.Errorf("get = %+v, %v; want %+v", got, err, ended)
			}
			page, err := tx.Sessions().List(ctx, site.SessionFilter{User: "temp-user", Machine: "temp-vda"}, site.ListOptions{})
			if err != nil || len(page.Items) != 1 {
				t.Errorf("list by deleted user and machine = %+v, %v", page, err)
			}
			return nil
		})
	})
}

func sessionID(s site.Session) string { return s.ID }

// testDeleteMachineWithSessions checks that a machine with live sessions
// cannot be deleted, by itself or by a whole configuration, and that
// ending its sessions in the same transaction lets it go.
func testDeleteMachineWithSessions(t *testing.T, open func(*testing.T) site.Store) {
	s := openBase(t, open)
	live := []site.Session{
		{ID: "d-1", User: "alice", Resource: "notepad", DeliveryGroup: "apps", Machine: "app1", State: site.SessionActive},
		{ID: "d-2", User: "bob", Resource: "notepad", DeliveryGroup: "apps", Machine: "app1", State: site.SessionPending},
		{ID: "d-3", User: "dave", Resource: "notepad", DeliveryGroup: "apps", Machine: "app1", State: site.SessionDisconnected},
		{ID: "d-old", User: "erin", Resource: "notepad", DeliveryGroup: "apps", Machine: "app1", State: site.SessionLoggedOff},
	}
	update(t, s, func(ctx context.Context, tx site.Tx) error {
		for _, sess := range live {
			if err := tx.Sessions().Create(ctx, sess); err != nil {
				return err
			}
		}
		return nil
	})
	v := version(t, s)

	t.Run("DeleteIsAConflictNamingTheCount", func(t *testing.T) {
		err := try(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Machines().Delete(ctx, "app1") })
		wantMessage(t, err, site.EConflict, `"app1" has 3 live sessions`)
		wantVersion(t, s, v)
	})

	t.Run("ApplyingAConfigWithoutTheMachineIsAConflict", func(t *testing.T) {
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := site.Mutate(ctx, tx, func(c *site.Config) error {
				c.Machines = slices.DeleteFunc(c.Machines, func(m site.Machine) bool { return m.Name == "app1" })
				return nil
			})
			return err
		})
		wantCode(t, err, site.EConflict)
		wantVersion(t, s, v)
	})

	t.Run("EndingTheSessionsFirstLetsItGo", func(t *testing.T) {
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, sess := range live[:3] {
				sess.State = site.SessionLoggedOff
				if err := tx.Sessions().Update(ctx, sess); err != nil {
					return err
				}
			}
			return tx.Machines().Delete(ctx, "app1")
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			p, err := tx.Sessions().List(ctx, site.SessionFilter{Machine: "app1"}, site.ListOptions{})
			if err != nil || p.Total != 4 {
				t.Errorf("sessions of the deleted machine = %+v, %v; want its 4 ended ones kept", p, err)
			}
			return nil
		})
	})
}

func testMachineCredential(t *testing.T, open func(*testing.T) site.Store) {
	s := openBase(t, open)
	want := site.MachineCredential{
		ID: "cred-1", IssuedAt: ms(2025, 5, 6, 7, 8, 9, 10, nil), SecretFingerprint: "fp",
		Bound: true, EnrolmentTokenHash: "abc123", EnrolmentTokenExpires: ms(2025, 5, 7, 7, 8, 9, 10, nil),
	}

	t.Run("NewMachineHasNone", func(t *testing.T) {
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.MachineCredential(ctx, "app1")
			if err != nil || !same(got, site.MachineCredential{}) {
				t.Errorf("credential = %+v, %v; want zero", got, err)
			}
			return nil
		})
	})

	t.Run("RoundTripsWithoutMovingTheVersion", func(t *testing.T) {
		v := version(t, s)
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetMachineCredential(ctx, "app1", want) })
		wantVersion(t, s, v)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.MachineCredential(ctx, "app1")
			if err != nil || !same(got, want) {
				t.Errorf("credential = %+v, %v; want %+v", got, err, want)
			}
			return nil
		})
	})

	t.Run("StatusAndConfigWritesKeepIt", func(t *testing.T) {
		notOnCopy(t, s, copyRefusesConfig)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			if err := tx.SetMachineStatus(ctx, "app1", site.MachineStatus{Registration: site.Registered}); err != nil {
				return err
			}
			return modify(ctx, tx.Machines(), "app1", func(m *site.Machine) { m.MaxSessions = 7 })
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.MachineCredential(ctx, "app1")
			if err != nil || !same(got, want) {
				t.Errorf("credential = %+v, %v; want %+v", got, err, want)
			}
			return nil
		})
	})

	t.Run("UnknownMachineIsNotFound", func(t *testing.T) {
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := tx.MachineCredential(ctx, "no-such")
			wantMessage(t, err, site.ENotFound, `"no-such"`)
			return tx.SetMachineCredential(ctx, "no-such", want)
		})
		wantMessage(t, err, site.ENotFound, `"no-such"`)
	})

	t.Run("ReadOnlyInView", func(t *testing.T) {
		err := s.View(t.Context(), func(tx site.Tx) error { return tx.SetMachineCredential(t.Context(), "app1", want) })
		if err == nil {
			t.Fatal("SetMachineCredential in View succeeded")
		}
	})

	t.Run("ARecreatedMachineStartsWithNone", func(t *testing.T) {
		notOnCopy(t, s, copyRefusesConfig)
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Machines().Delete(ctx, "app1") })
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Machines().Create(ctx, site.Machine{Name: "app1", Catalog: "apps-cat", Address: "10.0.0.1:1494"})
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.MachineCredential(ctx, "app1")
			if err != nil || !same(got, site.MachineCredential{}) {
				t.Errorf("credential of a re-created machine = %+v, %v; want zero", got, err)
			}
			return nil
		})
	})
}
