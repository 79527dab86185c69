package site

import (
	"context"
	"fmt"
	"time"
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

// ClaimBrokerName records rec as the broker of its name, unless another
// instance under that name was seen alive within stale of now: then it
// returns an EConflict error that names it.
func ClaimBrokerName(ctx context.Context, s Store, rec BrokerRecord, now time.Time, stale time.Duration) error {
	return s.Update(ctx, func(tx Tx) error {
		old, err := tx.Brokers().Get(ctx, rec.Name)
		switch {
		case ErrorCode(err) == ENotFound:
			return tx.Brokers().Create(ctx, rec)
		case err != nil:
			return err
		case old.Instance != rec.Instance && now.Sub(old.LastSeen) < stale:
			return Errorf(EConflict, "broker name %q is taken by a running broker (zone %q, address %s, seen %s ago): "+
				"give this one another --name, or stop the other", rec.Name, old.Zone, old.Address, now.Sub(old.LastSeen).Round(time.Second))
		}
		return tx.Brokers().Update(ctx, rec)
	})
}

// BrokerAlive records that the broker of rec's name and instance is alive
// at now. EConflict when another instance has taken the name.
func BrokerAlive(ctx context.Context, s Store, name, instance string, now time.Time) error {
	return s.Update(ctx, func(tx Tx) error {
		rec, err := tx.Brokers().Get(ctx, name)
		if err != nil {
			return err
		}
		if rec.Instance != instance {
			return Errorf(EConflict, "broker name %q was taken by another broker (at %s)", name, rec.Address)
		}
		rec.LastSeen = now
		return tx.Brokers().Update(ctx, rec)
	})
}
