package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/site"
)

// Directory reads the directory settings from the settings row and the
// bind password from the secrets, in one statement; in an Update, with
// the configuration lock (see site.Tx).
func (t *tx) Directory(ctx context.Context) (site.Directory, error) {
	if err := t.usable(false); err != nil {
		return site.Directory{}, err
	}
	var raw, password []byte
	found := false
	b := &pgx.Batch{}
	queueOne(b, &found, `SELECT directory::text, (SELECT value FROM secrets WHERE name = $1::text) FROM settings WHERE id = 1`,
		[]any{site.SecretDirectoryBindPassword}, &raw, &password)
	if err := t.send(ctx, b, t.update); err != nil {
		return site.Directory{}, fmt.Errorf("directory: %w", err)
	}
	if !found {
		return site.Directory{}, fmt.Errorf("directory: no settings row")
	}
	d, err := site.DecodeDirectory(raw, password)
	if err != nil {
		return site.Directory{}, fmt.Errorf("directory: %w", err)
	}
	return d, nil
}

// SetDirectory writes the directory settings (JSON, without the password)
// and the bind password (a secret; removed when empty), with the
// configuration lock.
func (t *tx) SetDirectory(ctx context.Context, d site.Directory) error {
	if err := t.usable(true); err != nil {
		return err
	}
	raw, password, err := site.EncodeDirectory(d)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(`UPDATE settings SET directory = $1::jsonb WHERE id = 1`, string(raw))
	if password == nil {
		b.Queue(`DELETE FROM secrets WHERE name = $1::text`, site.SecretDirectoryBindPassword)
	} else {
		b.Queue(`INSERT INTO secrets (name, value) VALUES ($1::text, $2::bytea) ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
			site.SecretDirectoryBindPassword, password)
	}
	t.wrote = true
	if err := t.send(ctx, b, true); err != nil {
		return fmt.Errorf("set directory: %w", err)
	}
	t.logChange(site.KindDirectory, "")
	return nil
}
