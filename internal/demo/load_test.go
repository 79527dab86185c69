package demo_test

import (
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

func TestLoadRecordsChangesAsSystem(t *testing.T) {
	ctx := t.Context()
	store, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "site.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cheap := auth.Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1, SaltLen: 16, KeyLen: 32}
	plan, err := demo.Load(ctx, store, "demo-password-1", cheap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := demo.SetPassword(ctx, store, "demo-password-2", cheap); err != nil {
		t.Fatal(err)
	}
	create, update, del := plan.Counts()
	loaded := create + update + del + 1 // and the settings
	users := len(demo.Site().Users)
	var all, admins site.Page[site.ChangeRecord]
	err = store.View(ctx, func(tx site.Tx) error {
		if all, err = tx.History().List(ctx, site.ChangeFilter{}, site.ListOptions{}); err != nil {
			return err
		}
		admins, err = tx.History().List(ctx, site.ChangeFilter{Kind: site.KindAdmin}, site.ListOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The load, its admin, then every user's and the admin's password.
	if want := loaded + 1 + users + 1; all.Total != want {
		t.Errorf("%d records, want %d", all.Total, want)
	}
	for _, r := range all.Items {
		if r.Actor != site.ActorSystem {
			t.Fatalf("record %+v is not the system's", r)
		}
	}
	if len(admins.Items) != 2 || admins.Items[0].Op != site.OpUpdate || admins.Items[1].Op != site.OpCreate {
		t.Errorf("admin records = %+v, want its creation then its password", admins.Items)
	}
}
