package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/usher-vdi/usher/internal/site"
)

var (
	_ site.LocalCopy        = (*tx)(nil)
	_ site.CredentialLister = (*tx)(nil)
)

func (t *tx) SetConfigVersion(ctx context.Context, version int64) error {
	if err := t.writable(); err != nil {
		return err
	}
	if version < 1 {
		return site.Errorf(site.EInvalid, "configuration version %d is not positive", version)
	}
	t.pinVersion = version // at commit, after the version moved for the transaction's own changes
	return nil
}

// pin sets the configuration version SetConfigVersion asked for.
func (t *tx) pin(ctx context.Context) error {
	if _, err := t.exec(ctx, `UPDATE settings SET config_version = ?1 WHERE id = 1`, t.pinVersion); err != nil {
		return fmt.Errorf("set config version: %w", err)
	}
	return nil
}

func (t *tx) JournalSessions(ctx context.Context, ids []string) error {
	return t.withIDs(ctx, "journal sessions", `INSERT INTO session_journal (session_id) SELECT value FROM json_each(?1) WHERE true
		ON CONFLICT (session_id) DO NOTHING`, ids)
}

func (t *tx) Journaled(ctx context.Context) ([]string, error) {
	ids, err := t.strings(ctx, `SELECT session_id FROM session_journal ORDER BY session_id`)
	if err != nil {
		return nil, fmt.Errorf("session journal: %w", err)
	}
	return ids, nil
}

func (t *tx) Unjournal(ctx context.Context, ids []string) error {
	return t.withIDs(ctx, "unjournal sessions", `DELETE FROM session_journal WHERE session_id IN (SELECT value FROM json_each(?1))`, ids)
}

// withIDs runs a write whose ?1 is ids as a JSON array, once; none for no
// IDs.
func (t *tx) withIDs(ctx context.Context, what, query string, ids []string) error {
	if err := t.writable(); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	if _, err := t.exec(ctx, query, string(list)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (t *tx) MachineCredentials(ctx context.Context) (map[string]site.MachineCredential, error) {
	rows, err := t.query(ctx, `SELECT name, credential_id, coalesce(credential_issued_at, ''), credential_secret, credential_bound,
		enrolment_token_hash, coalesce(enrolment_token_expires, '') FROM machines`)
	if err != nil {
		return nil, fmt.Errorf("machine credentials: %w", err)
	}
	defer rows.Close()
	out := map[string]site.MachineCredential{}
	for rows.Next() {
		var name, issued, expires string
		var c site.MachineCredential
		if err := rows.Scan(&name, &c.ID, &issued, &c.SecretFingerprint, &c.Bound, &c.EnrolmentTokenHash, &expires); err != nil {
			return nil, fmt.Errorf("machine credentials: %w", dbErr(err))
		}
		if c.IssuedAt, err = parseTime(issued); err == nil {
			c.EnrolmentTokenExpires, err = parseTime(expires)
		}
		if err != nil {
			return nil, fmt.Errorf("machine credential %q: %w", name, err)
		}
		out[name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("machine credentials: %w", dbErr(err))
	}
	return out, nil
}
