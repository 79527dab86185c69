package lhc

import (
	"context"
	"slices"
	"testing"

	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
)

// TestPreferencesInOutage: users' preferences are the site DB's. In outage
// mode they read as none (the copy does not take them) and writes are
// refused with site_db_unavailable; once the site DB is back they are
// there as they were.
func TestPreferencesInOutage(t *testing.T) {
	ctx := context.Background()
	primary := newPrimary(t)
	s := open(t, primary, t.TempDir())
	user := demo.UserName(1)
	want := site.Preferences{Favourites: []string{demo.OfficeDesktop}}
	get := func() site.Preferences {
		t.Helper()
		var p site.Preferences
		if err := s.View(ctx, func(tx site.Tx) (err error) { p, err = tx.Preferences().Get(ctx, user); return err }); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := s.Update(ctx, func(tx site.Tx) error { _, err := tx.Preferences().Put(ctx, user, want); return err }); err != nil {
		t.Fatal(err)
	}
	if err := s.copyNow(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Force(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := get(); len(got.Favourites) != 0 || got.Favourites == nil || !got.UpdatedAt.IsZero() {
		t.Errorf("preferences in outage mode: %+v, want none", got)
	}
	err := s.Update(ctx, func(tx site.Tx) error { _, err := tx.Preferences().Put(ctx, user, site.Preferences{}); return err })
	if site.ErrorCode(err) != site.ESiteDBUnavailable {
		t.Errorf("a Put in outage mode: %v, want %s", err, site.ESiteDBUnavailable)
	}
	if _, err := s.Force(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := get(); !slices.Equal(got.Favourites, want.Favourites) || got.UpdatedAt.IsZero() {
		t.Errorf("preferences after the outage: %+v, want %v", got, want.Favourites)
	}
}
