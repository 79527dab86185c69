package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/site"
)

var _ site.CredentialLister = (*tx)(nil)

// MachineCredentials reads every machine's credential in one round trip.
// It locks nothing.
func (t *tx) MachineCredentials(ctx context.Context) (map[string]site.MachineCredential, error) {
	if err := t.usable(false); err != nil {
		return nil, err
	}
	out := map[string]site.MachineCredential{}
	b := &pgx.Batch{}
	b.Queue(`SELECT machine, credential_id, issued_at, secret_fingerprint, bound, enrolment_token_hash, enrolment_token_expires
		FROM machine_credentials`).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var name string
			var c site.MachineCredential
			if err := rows.Scan(&name, &c.ID, timeDest{&c.IssuedAt}, &c.SecretFingerprint, &c.Bound, &c.EnrolmentTokenHash,
				timeDest{&c.EnrolmentTokenExpires}); err != nil {
				return err
			}
			out[name] = c
		}
		return rows.Err()
	})
	if err := t.send(ctx, b, false); err != nil {
		return nil, fmt.Errorf("machine credentials: %w", err)
	}
	return out, nil
}
