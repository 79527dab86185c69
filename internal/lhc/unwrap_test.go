package lhc

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

// TestRecordingTxKeepsTheOptionalInterfaces: a transaction on the site DB
// under the record still offers what the site DB's does (site.TxAs
// unwraps it), and claims nothing it lacks.
func TestRecordingTxKeepsTheOptionalInterfaces(t *testing.T) {
	ctx := context.Background()
	db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "site.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(ctx, func(tx site.Tx) error {
		rt := &recordingTx{Tx: tx}
		cl, ok := site.TxAs[site.CredentialLister](rt)
		if !ok || cl != tx.(site.CredentialLister) {
			t.Errorf("TxAs through the record found %T (%v), want the site DB's transaction", cl, ok)
		}
		if _, own := tx.(site.BulkWriter); !own {
			if b, ok := site.TxAs[site.BulkWriter](rt); ok {
				t.Errorf("TxAs through the record found a BulkWriter (%T) that the site DB's transaction is not", b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
