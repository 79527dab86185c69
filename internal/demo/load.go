package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site"
)

// Admin is the demo site's admin account.
const Admin = "admin"

// Load applies the demo site to a store in one transaction and sets
// password on every demo user and on the Admin account. The hash is
// computed once and shared, as the password is; loading again with the
// same password keeps the existing hash. The change history records the
// changes as usher's own (site.ActorSystem). It returns the applied plan.
func Load(ctx context.Context, store site.Store, password string, params auth.Params) (*site.Plan, error) {
	cfg := Site()
	var plan *site.Plan
	err := store.Update(ctx, func(tx site.Tx) error {
		hash := ""
		if u, err := tx.Users().Get(ctx, cfg.Users[0].Name); err == nil && u.PasswordHash != "" {
			if ok, _ := auth.VerifyPassword(u.PasswordHash, password); ok {
				hash = u.PasswordHash
			}
		}
		if hash == "" {
			var err error
			if hash, err = auth.HashPassword(password, params); err != nil {
				return err
			}
		}
		for i := range cfg.Users {
			cfg.Users[i].PasswordHash = hash
		}
		var err error
		if plan, err = site.ApplyConfig(ctx, tx, cfg, false); err != nil {
			return err
		}
		if err := site.RecordPlan(ctx, tx, site.ActorSystem, plan); err != nil {
			return err
		}
		return setAdminPassword(ctx, tx, hash)
	})
	return plan, err
}

// setAdminPassword gives the Admin account the password hash, creating
// the account when there is none, and records the change.
func setAdminPassword(ctx context.Context, tx site.Tx, hash string) error {
	rec := site.ChangeRecord{Actor: site.ActorSystem, Op: site.OpCreate, Kind: site.KindAdmin, Name: Admin}
	a, err := tx.Admins().Get(ctx, Admin)
	switch site.ErrorCode(err) {
	case site.ENotFound:
		err = tx.Admins().Create(ctx, site.Admin{Name: Admin, PasswordHash: hash, CreatedAt: time.Now().UTC()})
	case "":
		if a.PasswordHash == hash {
			return nil
		}
		a.PasswordHash = hash
		rec.Op, rec.Fields = site.OpUpdate, []string{"password_hash"}
		err = tx.Admins().Update(ctx, a)
	}
	if err != nil {
		return err
	}
	return tx.History().Record(ctx, rec)
}

// SetPassword sets password on every demo user still in the site and on
// the Admin account, changing nothing else. Users removed or renamed
// since the demo was loaded are left as they are. When the Admin account
// and the first demo user have that password already, it changes nothing
// (so that restarts with one password leave the configuration version
// alone) and reports false.
func SetPassword(ctx context.Context, store site.Store, password string, params auth.Params) (changed bool, err error) {
	same := false
	err = store.View(ctx, func(tx site.Tx) error {
		a, err := tx.Admins().Get(ctx, Admin)
		if err != nil {
			return nil
		}
		u, err := tx.Users().Get(ctx, UserName(1))
		if err != nil {
			return nil
		}
		okA, _ := auth.VerifyPassword(a.PasswordHash, password)
		okU, _ := auth.VerifyPassword(u.PasswordHash, password)
		same = okA && okU
		return nil
	})
	if err != nil || same {
		return false, err
	}
	hash, err := auth.HashPassword(password, params)
	if err != nil {
		return false, err
	}
	return true, store.Update(ctx, func(tx site.Tx) error {
		plan, err := site.Mutate(ctx, tx, func(c *site.Config) error {
			for i := range c.Users {
				if isDemoUser(c.Users[i].Name) {
					c.Users[i].PasswordHash = hash
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := site.RecordPlan(ctx, tx, site.ActorSystem, plan); err != nil {
			return err
		}
		return setAdminPassword(ctx, tx, hash)
	})
}

// isDemoUser reports whether name is one of the demo's users, user0001 to
// user1000.
func isDemoUser(name string) bool {
	var n int
	if len(name) != 8 || !strings.HasPrefix(name, "user") {
		return false
	}
	if _, err := fmt.Sscanf(name[4:], "%04d", &n); err != nil {
		return false
	}
	return n >= 1 && n <= Users && UserName(n) == name
}

// Empty reports whether the site DB holds no site yet: its configuration
// has never changed since the site began (version 1).
func Empty(ctx context.Context, store site.Store) (bool, error) {
	var v int64
	err := store.View(ctx, func(tx site.Tx) (err error) { v, err = tx.ConfigVersion(ctx); return err })
	return v <= 1, err
}
