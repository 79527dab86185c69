package site

import (
	"context"
	"fmt"
)

// Names of the site secrets usher keeps.
const (
	// SecretTokenKey signs bearer tokens.
	SecretTokenKey = "token-key"
	// SecretEnrolment is what VDAs enrol with.
	SecretEnrolment = "enrolment"
)

// EnsureSecret returns the named secret, creating it with make when the
// site has none: brokers starting together all get the one that was
// stored first.
func EnsureSecret(ctx context.Context, s Store, name string, make func() ([]byte, error)) ([]byte, error) {
	var out []byte
	err := s.Update(ctx, func(tx Tx) error {
		v, err := tx.Secret(ctx, name)
		if ErrorCode(err) != ENotFound {
			out = v
			return err
		}
		if out, err = make(); err != nil {
			return err
		}
		return tx.SetSecret(ctx, name, out)
	})
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	return out, nil
}
