package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

// writes are one write of every kind, each on objects of base() or new
// ones, for tests of transactions as a whole.
var writes = []struct {
	name string
	do   func(ctx context.Context, tx site.Tx) error
}{
	{"SetSettings", func(ctx context.Context, tx site.Tx) error {
		return tx.SetSettings(ctx, site.Settings{Name: "Changed", Domain: "CHANGED"})
	}},
	{"CreateZone", func(ctx context.Context, tx site.Tx) error {
		return tx.Zones().Create(ctx, site.Zone{Name: "new-zone"})
	}},
	{"UpdateCatalog", func(ctx context.Context, tx site.Tx) error {
		return tx.Catalogs().Update(ctx, site.Catalog{Name: "spare-cat", Kind: site.SingleSessionPooled, Zone: "branch"})
	}},
	{"CreateGroup", func(ctx context.Context, tx site.Tx) error {
		return tx.Groups().Create(ctx, site.Group{Name: "new-group"})
	}},
	{"UpdateUser", func(ctx context.Context, tx site.Tx) error {
		return tx.Users().Update(ctx, site.User{Name: "alice", Groups: []string{"finance", "auditors"}})
	}},
	{"DeleteMachine", func(ctx context.Context, tx site.Tx) error { return tx.Machines().Delete(ctx, "app2") }},
	{"CreateDeliveryGroup", func(ctx context.Context, tx site.Tx) error {
		return tx.DeliveryGroups().Create(ctx, site.NewDeliveryGroup("new-dg", "spare-cat"))
	}},
	{"CreateApplication", func(ctx context.Context, tx site.Tx) error {
		return tx.Applications().Create(ctx, site.Resource{Kind: site.Application, Name: "new-app", DisplayName: "N", CommandLine: "n", DeliveryGroups: []string{"apps"}})
	}},
	{"DeleteDesktop", func(ctx context.Context, tx site.Tx) error { return tx.Desktops().Delete(ctx, "branch-desktop") }},
	{"UpdateEntitlement", func(ctx context.Context, tx site.Tx) error {
		return tx.Entitlements().Update(ctx, site.Entitlement{Name: "apps-staff", DeliveryGroup: "apps", Users: []string{"erin"}})
	}},
	{"SetMachineStatus", func(ctx context.Context, tx site.Tx) error {
		return tx.SetMachineStatus(ctx, "app1", site.MachineStatus{Registration: site.Registered, LoadIndex: 500, Usage: site.Usage{Sessions: 3}})
	}},
	{"CreateSession", func(ctx context.Context, tx site.Tx) error {
		return tx.Sessions().Create(ctx, site.Session{ID: "new-session", User: "alice", Resource: "notepad", DeliveryGroup: "apps", Machine: "app1", State: site.SessionPending})
	}},
	{"CreateAdmin", func(ctx context.Context, tx site.Tx) error {
		return tx.Admins().Create(ctx, site.Admin{Name: "root", PasswordHash: testHash})
	}},
}

// snapshot is what a test can see of a store: its configuration, machine
// status, sessions and admins.
type snapshot struct {
	Version  int64
	Config   *site.Config
	Status   site.MachineStatus
	Sessions []site.Session
	Admins   []site.Admin
}

func takeSnapshot(t *testing.T, s site.Store) snapshot {
	t.Helper()
	var snap snapshot
	view(t, s, func(ctx context.Context, tx site.Tx) (err error) {
		if snap.Version, err = tx.ConfigVersion(ctx); err != nil {
			return err
		}
		if snap.Config, err = site.LoadConfig(ctx, tx); err != nil {
			return err
		}
		if snap.Status, err = tx.MachineStatus(ctx, "app1"); err != nil {
			return err
		}
		sessions, err := tx.Sessions().List(ctx, site.SessionFilter{}, site.ListOptions{})
		if err != nil {
			return err
		}
		admins, err := tx.Admins().List(ctx, site.ListOptions{})
		if err != nil {
			return err
		}
		snap.Sessions, snap.Admins = sessions.Items, admins.Items
		return nil
	})
	return snap
}

func wantSnapshot(t *testing.T, s site.Store, want snapshot) {
	t.Helper()
	got := takeSnapshot(t, s)
	if got.Version != want.Version {
		t.Errorf("config version %d, want %d", got.Version, want.Version)
	}
	diffConfig(t, got.Config, want.Config)
	if !same(got.Status, want.Status) || !same(got.Sessions, want.Sessions) || !same(got.Admins, want.Admins) {
		t.Errorf("runtime state changed:\n got %+v\nwant %+v", got, want)
	}
}

func testTransactions(t *testing.T, open func(*testing.T) site.Store) {
	t.Run("UpdateCommitsEveryChange", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, w := range writes {
				if err := w.do(ctx, tx); err != nil {
					return fmt.Errorf("%s: %w", w.name, err)
				}
			}
			return nil
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			if st, _ := tx.Settings(ctx); st.Name != "Changed" {
				t.Errorf("settings not committed: %+v", st)
			}
			if _, err := tx.Zones().Get(ctx, "new-zone"); err != nil {
				t.Errorf("zone not committed: %v", err)
			}
			if _, err := tx.Machines().Get(ctx, "app2"); site.ErrorCode(err) != site.ENotFound {
				t.Errorf("machine delete not committed: %v", err)
			}
			if st, _ := tx.MachineStatus(ctx, "app1"); st.LoadIndex != 500 {
				t.Errorf("machine status not committed: %+v", st)
			}
			if _, err := tx.Sessions().Get(ctx, "new-session"); err != nil {
				t.Errorf("session not committed: %v", err)
			}
			if _, err := tx.Admins().Get(ctx, "root"); err != nil {
				t.Errorf("admin not committed: %v", err)
			}
			return nil
		})
	})

	t.Run("UpdateSeesItsOwnWrites", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			if err := tx.Zones().Create(ctx, site.Zone{Name: "mine"}); err != nil {
				return err
			}
			if _, err := tx.Zones().Get(ctx, "mine"); err != nil {
				t.Errorf("get own zone: %v", err)
			}
			// A reference to an object created earlier in the transaction.
			return tx.Catalogs().Create(ctx, site.Catalog{Name: "mine-cat", Kind: site.MultiSession, Zone: "mine"})
		})
	})

	t.Run("UpdateRollsBackWhenFnFails", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		before := takeSnapshot(t, s)
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, w := range writes {
				if err := w.do(ctx, tx); err != nil {
					return fmt.Errorf("%s: %w", w.name, err)
				}
			}
			return errTest
		})
		if !errors.Is(err, errTest) {
			t.Fatalf("update returned %v, want fn's error", err)
		}
		wantSnapshot(t, s, before)
	})

	t.Run("FailedWriteLeavesTransactionUsable", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		v := version(t, s)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			wantCode(t, tx.Zones().Create(ctx, site.Zone{Name: "hq"}), site.EConflict)
			wantCode(t, tx.Zones().Update(ctx, site.Zone{Name: "nowhere"}), site.ENotFound)
			wantCode(t, tx.Catalogs().Create(ctx, site.Catalog{Name: "c", Kind: site.MultiSession, Zone: "nowhere"}), site.EInvalid)
			return tx.Zones().Create(ctx, site.Zone{Name: "after-failures"})
		})
		wantVersion(t, s, v+1)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			if _, err := tx.Zones().Get(ctx, "after-failures"); err != nil {
				t.Errorf("get: %v", err)
			}
			if _, err := tx.Catalogs().Get(ctx, "c"); site.ErrorCode(err) != site.ENotFound {
				t.Errorf("invalid catalog was stored: %v", err)
			}
			return nil
		})
	})

	t.Run("ViewRejectsWrites", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		before := takeSnapshot(t, s)
		for _, w := range writes {
			err := s.View(t.Context(), func(tx site.Tx) error { return w.do(t.Context(), tx) })
			if err == nil {
				t.Errorf("%s in a view: no error", w.name)
			}
		}
		// A view that ignores the errors commits nothing either.
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, w := range writes {
				_ = w.do(ctx, tx)
			}
			return nil
		})
		wantSnapshot(t, s, before)
	})

	t.Run("ViewSeesOneState", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			v1, err := tx.ConfigVersion(ctx)
			if err != nil {
				return err
			}
			p1, err := tx.Zones().List(ctx, site.ListOptions{})
			if err != nil {
				return err
			}
			// An update commits while the view is open.
			if err := s.Update(ctx, func(tx site.Tx) error { return tx.Zones().Create(ctx, site.Zone{Name: "committed"}) }); err != nil {
				t.Fatalf("update during view: %v", err)
			}
			v2, err := tx.ConfigVersion(ctx)
			if err != nil {
				return err
			}
			p2, err := tx.Zones().List(ctx, site.ListOptions{})
			if err != nil {
				return err
			}
			if _, err := tx.Zones().Get(ctx, "committed"); site.ErrorCode(err) != site.ENotFound {
				t.Errorf("view sees a later commit: %v", err)
			}
			if v1 != v2 || !same(p1, p2) {
				t.Errorf("view saw a commit: version %d then %d, zones %v then %v", v1, v2, names(p1.Items, zoneName), names(p2.Items, zoneName))
			}
			return nil
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			if _, err := tx.Zones().Get(ctx, "committed"); err != nil {
				t.Errorf("a later view does not see the commit: %v", err)
			}
			return nil
		})
	})

	t.Run("TransactionsAfterCloseAreUnavailable", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if err := s.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		called := false
		fn := func(site.Tx) error { called = true; return nil }
		wantCode(t, s.View(t.Context(), fn), site.EUnavailable)
		wantCode(t, s.Update(t.Context(), fn), site.EUnavailable)
		if called {
			t.Fatalf("fn ran on a closed store")
		}
	})
}

func zoneName(z site.Zone) string { return z.Name }

func testConfigVersion(t *testing.T, open func(*testing.T) site.Store) {
	t.Run("NewSiteStartsAtOne", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		wantVersion(t, s, 1)
	})

	t.Run("OneConfigUpdateMovesItByOne", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		update(t, s, func(ctx context.Context, tx site.Tx) error { return createAll(ctx, tx, base()) })
		wantVersion(t, s, 2)
		for i, w := range writes {
			update(t, s, w.do)
			want := int64(3 + i)
			if i >= len(writes)-3 { // machine status, a session, an admin
				want = int64(len(writes) - 1)
			}
			if got := version(t, s); got != want {
				t.Fatalf("after %s: config version %d, want %d", w.name, got, want)
			}
		}
	})

	t.Run("ConfigVersionIsAsOfTransactionStart", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			for i := range 3 {
				if err := tx.Zones().Create(ctx, site.Zone{Name: fmt.Sprint("z", i)}); err != nil {
					return err
				}
				if v, err := tx.ConfigVersion(ctx); err != nil || v != 1 {
					t.Errorf("version inside the update after %d creates = %d, %v; want 1", i+1, v, err)
				}
			}
			return nil
		})
		wantVersion(t, s, 2)
	})

	t.Run("ReadsAndRuntimeWritesKeepIt", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		v := version(t, s)
		takeSnapshot(t, s)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := site.LoadConfig(ctx, tx)
			return err
		})
		update(t, s, func(ctx context.Context, tx site.Tx) error { return nil })
		for _, w := range writes[len(writes)-3:] {
			update(t, s, w.do)
		}
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			if err := tx.Sessions().Update(ctx, site.Session{ID: "new-session", User: "bob", Resource: "calc", DeliveryGroup: "apps", Machine: "app2", State: site.SessionActive}); err != nil {
				return err
			}
			if err := tx.Admins().Update(ctx, site.Admin{Name: "root", PasswordHash: "$argon2id$new"}); err != nil {
				return err
			}
			if err := tx.Sessions().Delete(ctx, "new-session"); err != nil {
				return err
			}
			return tx.Admins().Delete(ctx, "root")
		})
		wantVersion(t, s, v)
	})

	t.Run("FailedUpdatesKeepIt", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		v := version(t, s)
		for _, w := range writes {
			err := try(t, s, func(ctx context.Context, tx site.Tx) error {
				if err := w.do(ctx, tx); err != nil {
					return err
				}
				return errTest
			})
			if !errors.Is(err, errTest) {
				t.Fatalf("%s: %v", w.name, err)
			}
		}
		wantVersion(t, s, v)
	})
}

func testSettings(t *testing.T, open func(*testing.T) site.Store) {
	t.Run("NewSiteHasDefaultSettings", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.Settings(ctx)
			if err != nil {
				return err
			}
			if want := site.DefaultSettings(); got != want {
				t.Errorf("settings = %+v, want %+v", got, want)
			}
			return nil
		})
	})

	t.Run("SetSettingsReplacesThem", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, want := range []site.Settings{
			{Name: "Farm One", Domain: "ONE", TrustXMLRequests: true, AnonymousAppData: true},
			{Name: "Farm Two", Domain: "TWO"},
		} {
			update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetSettings(ctx, want) })
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				if got, err := tx.Settings(ctx); err != nil || got != want {
					t.Errorf("settings = %+v, %v; want %+v", got, err, want)
				}
				return nil
			})
		}
		wantVersion(t, s, 3)
	})

	t.Run("InvalidSettingsAreInvalid", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		bad := site.Settings{Name: " ", Domain: "X"}
		err := try(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetSettings(ctx, bad) })
		wantCode(t, err, site.EInvalid)
		if got, want := site.ErrorMessage(err), site.ErrorMessage(bad.Validate()); got != want {
			t.Errorf("message %q, want %q", got, want)
		}
		wantVersion(t, s, 1)
	})
}
