package sqlitestore

import (
	"context"
	"fmt"

	"github.com/usher-vdi/usher/internal/site"
)

// Directory reads the directory settings from the settings row and the
// bind password from the secrets, in one statement.
func (t *tx) Directory(ctx context.Context) (site.Directory, error) {
	var raw string
	var password []byte
	err := t.scanOne(ctx, `SELECT directory, (SELECT value FROM secrets WHERE name = ?1) FROM settings WHERE id = 1`,
		[]any{site.SecretDirectoryBindPassword}, &raw, &password)
	if err != nil {
		return site.Directory{}, fmt.Errorf("directory: %w", err)
	}
	d, err := site.DecodeDirectory([]byte(raw), password)
	if err != nil {
		return site.Directory{}, fmt.Errorf("directory: %w", err)
	}
	return d, nil
}

// SetDirectory writes the directory settings (JSON, without the password)
// and the bind password (a secret; removed when empty).
func (t *tx) SetDirectory(ctx context.Context, d site.Directory) error {
	if err := t.writable(); err != nil {
		return err
	}
	raw, password, err := site.EncodeDirectory(d)
	if err != nil {
		return err
	}
	if _, err := t.exec(ctx, `UPDATE settings SET directory = ?1 WHERE id = 1`, string(raw)); err != nil {
		return fmt.Errorf("set directory: %w", err)
	}
	if password == nil {
		_, err = t.exec(ctx, `DELETE FROM secrets WHERE name = ?1`, site.SecretDirectoryBindPassword)
	} else {
		_, err = t.exec(ctx, `INSERT INTO secrets (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
			site.SecretDirectoryBindPassword, password)
	}
	if err != nil {
		return fmt.Errorf("set directory bind password: %w", err)
	}
	t.logChange(site.KindDirectory, "")
	return nil
}
