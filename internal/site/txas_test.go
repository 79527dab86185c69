package site_test

import (
	"context"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

// watching wraps a Tx and unwraps to it.
type watching struct{ site.Tx }

func (w watching) Unwrap() site.Tx { return w.Tx }

// hiding wraps a Tx and does not unwrap: its Tx's optional interfaces
// are not its own.
type hiding struct{ site.Tx }

// listing wraps a Tx, unwraps to it, and lists credentials itself.
type listing struct{ site.Tx }

func (l listing) Unwrap() site.Tx { return l.Tx }

func (listing) MachineCredentials(context.Context) (map[string]site.MachineCredential, error) {
	return nil, nil
}

func TestTxAsLooksThroughWrappers(t *testing.T) {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, t.TempDir()+"/site.db", sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.View(ctx, func(tx site.Tx) error {
		if _, ok := tx.(site.CredentialLister); !ok {
			t.Fatal("a SQLite transaction is no CredentialLister: the test needs another optional interface")
		}
		for _, c := range []struct {
			name string
			tx   site.Tx
			want any // the CredentialLister found, nil for none
		}{
			{"the Tx itself", tx, tx},
			{"under a wrapper", watching{tx}, tx},
			{"under two wrappers", watching{watching{tx}}, tx},
			{"under a Tx that does not unwrap", watching{hiding{tx}}, nil},
			{"a wrapper that implements it stops the search", watching{listing{tx}}, listing{tx}},
		} {
			got, ok := site.TxAs[site.CredentialLister](c.tx)
			switch {
			case c.want == nil && ok:
				t.Errorf("%s: TxAs found %T, want none", c.name, got)
			case c.want != nil && (!ok || any(got) != c.want):
				t.Errorf("%s: TxAs found %T (%v), want %T", c.name, got, ok, c.want)
			}
		}
		// A wrapper claims none that its Tx lacks.
		if b, ok := site.TxAs[site.BulkWriter](watching{tx}); ok {
			t.Errorf("TxAs found a BulkWriter (%T) that a SQLite transaction is not", b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
