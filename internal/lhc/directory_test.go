package lhc

import (
	"context"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/storetest"
)

// TestCopyKeepsTheDirectory: the local copy holds the directory
// settings, bind password included, so that a broker in outage can
// still authenticate directory users; changing them is refused then.
func TestCopyKeepsTheDirectory(t *testing.T) {
	ctx := context.Background()
	primary := newPrimary(t)
	want := storetest.TestDirectory(t)
	if err := primary.Update(ctx, func(tx site.Tx) error { return tx.SetDirectory(ctx, want) }); err != nil {
		t.Fatal(err)
	}
	s := open(t, primary, t.TempDir())
	if err := s.copyNow(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Force(ctx, true); err != nil {
		t.Fatal(err)
	}
	var got site.Directory
	var cfg *site.Config
	err := s.View(ctx, func(tx site.Tx) (err error) {
		if got, err = tx.Directory(ctx); err != nil {
			return err
		}
		cfg, err = site.LoadConfig(ctx, tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(want) || !cfg.Directory.Equal(want) {
		t.Errorf("the copy's directory is %v (config %v), want %v", got, cfg.Directory, want)
	}
	if got.BindPassword != want.BindPassword {
		t.Error("the copy lost the bind password")
	}
	err = s.Update(ctx, func(tx site.Tx) error { return tx.SetDirectory(ctx, site.Directory{}) })
	if site.ErrorCode(err) != site.ESiteDBUnavailable {
		t.Errorf("set the directory in outage mode: %v, want %s", err, site.ESiteDBUnavailable)
	}
}
