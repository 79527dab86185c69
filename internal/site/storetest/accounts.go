package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// testAccountNames checks that users', groups' and admins' names match
// case-insensitively and in any Unicode normal form: lookups find them by
// any spelling, and a second account spelled differently is a conflict.
func testAccountNames(t *testing.T, open func(*testing.T) site.Store) {
	const decomposed = "jose\u0301" // "josé" with a combining accent
	t.Run("users are found by any spelling", func(t *testing.T) {
		s := openBase(t, open)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, name := range []string{"alice", "ALICE", "Alice"} {
				u, err := tx.Users().Get(ctx, name)
				if err != nil {
					t.Fatalf("get user %q: %v", name, err)
				}
				if u.Name != "alice" {
					t.Errorf("get user %q: name %q, want the stored alice", name, u.Name)
				}
			}
			g, err := tx.Groups().Get(ctx, "STAFF")
			if err != nil || g.Name != "staff" {
				t.Errorf("get group STAFF: %+v, %v", g, err)
			}
			return nil
		})
	})
	t.Run("names differing in case conflict", func(t *testing.T) {
		s := openBase(t, open)
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Users().Create(ctx, site.User{Name: "Alice"})
		})
		wantMessage(t, err, site.EConflict, `"Alice"`, `"alice"`)
		err = try(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Groups().Create(ctx, site.Group{Name: "Staff"})
		})
		wantMessage(t, err, site.EConflict, `"Staff"`, `"staff"`)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Admins().Create(ctx, site.Admin{Name: "root", PasswordHash: testHash, CreatedAt: time.Now()})
		})
		err = try(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Admins().Create(ctx, site.Admin{Name: "ROOT", PasswordHash: testHash, CreatedAt: time.Now()})
		})
		wantMessage(t, err, site.EConflict, `"ROOT"`, `"root"`)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			if a, err := tx.Admins().Get(ctx, "Root"); err != nil || a.Name != "root" {
				t.Errorf("get admin Root: %+v, %v", a, err)
			}
			return nil
		})
	})
	t.Run("names are stored in normal form C", func(t *testing.T) {
		s := openBase(t, open)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Users().Create(ctx, site.User{Name: decomposed})
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, name := range []string{decomposed, "jos\u00e9", "JOS\u00c9"} {
				u, err := tx.Users().Get(ctx, name)
				if err != nil {
					t.Fatalf("get user %q: %v", name, err)
				}
				if u.Name != "jos\u00e9" {
					t.Errorf("get user %q: name %q, want the composed jos\u00e9", name, u.Name)
				}
			}
			return nil
		})
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Users().Create(ctx, site.User{Name: "JOS\u00c9"})
		})
		wantCode(t, err, site.EConflict)
	})
	t.Run("update and delete keep the stored spelling", func(t *testing.T) {
		s := openBase(t, open)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			u, err := tx.Users().Get(ctx, "bob")
			if err != nil {
				return err
			}
			u.Name, u.DisplayName = "BOB", "Robert"
			return tx.Users().Update(ctx, u)
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			u, err := tx.Users().Get(ctx, "bob")
			if err != nil || u.Name != "bob" || u.DisplayName != "Robert" {
				t.Errorf("after update as BOB: %+v, %v", u, err)
			}
			return nil
		})
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Groups().Create(ctx, site.Group{Name: "temps"})
		})
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Groups().Delete(ctx, "TEMPS")
		})
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := tx.Groups().Get(ctx, "temps")
			return err
		})
		wantCode(t, err, site.ENotFound)
	})
	t.Run("confusable names are refused", func(t *testing.T) {
		s := openBase(t, open)
		for _, name := range []string{"p\u0430ypal", "user 1", "user@x", "a+b"} { // Cyrillic а
			err := try(t, s, func(ctx context.Context, tx site.Tx) error {
				return tx.Users().Create(ctx, site.User{Name: name})
			})
			wantCode(t, err, site.EInvalid)
		}
	})
	t.Run("references by any spelling work through Mutate", func(t *testing.T) {
		s := openBase(t, open)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := site.Mutate(ctx, tx, func(c *site.Config) error {
				c.Users = append(c.Users, site.User{Name: "dana", Groups: []string{"STAFF"}})
				for i := range c.Entitlements {
					c.Entitlements[i].Users = append(c.Entitlements[i].Users, "DANA")
				}
				return nil
			})
			return err
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			u, err := tx.Users().Get(ctx, "dana")
			if err != nil || len(u.Groups) != 1 || u.Groups[0] != "staff" {
				t.Errorf("dana: %+v, %v", u, err)
			}
			es, err := tx.Entitlements().List(ctx, site.ListOptions{})
			if err != nil {
				return err
			}
			for _, e := range es.Items {
				found := false
				for _, n := range e.Users {
					found = found || n == "dana"
				}
				if !found {
					t.Errorf("entitlement %s users %v: no dana", e.Name, e.Users)
				}
			}
			return nil
		})
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := site.Mutate(ctx, tx, func(c *site.Config) error {
				c.Users = append(c.Users, site.User{Name: "Dana"})
				return nil
			})
			return err
		})
		wantMessage(t, err, site.EConflict, `"Dana"`, `"dana"`)
	})
}
