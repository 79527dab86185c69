package site

import (
	"context"
	"slices"
)

// Mutation is what MutateFrom did in a transaction.
type Mutation struct {
	// Plan is the difference applied.
	Plan *Plan
	// Config is the site's whole configuration once the transaction
	// commits: normalized, validated, with the password hashes the site
	// keeps; what LoadConfig reads then. It shares the lists held by its
	// objects with the configuration it was made from, and must not be
	// modified either: it may be handed as it is to a broker, which
	// serves it to concurrent readers.
	Config *Config
	// Version is the configuration version once the transaction commits:
	// the transaction's ConfigVersion, plus one when the plan changes
	// anything (a Store moves it by exactly one per transaction).
	Version int64
}

// MutateFrom is Mutate starting from base, the site's configuration at
// version, when the configuration in tx is still at that version: it then
// reads nothing of the site but its version, and diffs fn's result
// against base. Otherwise (base is nil, or another change moved the
// version) it loads the configuration from tx first, as Mutate does.
// base is only read: a broker may be serving it meanwhile.
//
// fn gets a copy of the configuration whose lists of objects (Users,
// Machines, ...) are its own: it may append to them, and replace, delete
// (slices.Delete) and reorder their elements. The objects in those lists
// share the lists they hold (a user's Groups, a resource's
// DeliveryGroups, ...) with base, so fn must not write into those: it
// replaces such a list with a new one, and never sets, sorts or deletes
// its elements in place. (Appending is harmless: it writes, if anything,
// past the end that every other holder of the list sees.) Nothing else
// on the way writes into them: Normalize, Validate, Diff and the stores'
// collections only read them.
//
// The configuration in tx must not have changed earlier in the same
// transaction: base is the site as committed at version, and Version
// counts one move per transaction.
//
// It returns fn's error, a validation error (EInvalid, EConflict), or the
// store's, and then nothing was changed that the transaction could keep.
func MutateFrom(ctx context.Context, tx Tx, base *Config, version int64, fn func(*Config) error) (*Mutation, error) {
	v, err := tx.ConfigVersion(ctx)
	if err != nil {
		return nil, err
	}
	current := base
	if base == nil || version != v {
		if current, err = LoadConfig(ctx, tx); err != nil {
			return nil, err
		}
	}
	desired := current.copyLists()
	if err := fn(desired); err != nil {
		return nil, err
	}
	desired.normalizeFrom(current)
	// The plan first: objects it leaves as they are passed Validate when
	// they were written, and are not checked on their own again, so that
	// a change costs less the fewer objects it touches.
	plan := diff(current, desired, true)
	if err := desired.validate(plan.unchanged()); err != nil {
		return nil, err
	}
	if err := plan.carryOut(ctx, tx, desired); err != nil {
		return nil, err
	}
	if !plan.Empty() {
		v++
	}
	return &Mutation{Plan: plan, Config: desired, Version: v}, nil
}

// copyLists returns a copy of c whose lists of objects are its own; the
// objects in them share the lists they hold with c's.
func (c *Config) copyLists() *Config {
	return &Config{
		Settings:       c.Settings,
		Directory:      c.Directory,
		Zones:          slices.Clone(c.Zones),
		Catalogs:       slices.Clone(c.Catalogs),
		Groups:         slices.Clone(c.Groups),
		Users:          slices.Clone(c.Users),
		Machines:       slices.Clone(c.Machines),
		DeliveryGroups: slices.Clone(c.DeliveryGroups),
		Applications:   slices.Clone(c.Applications),
		Desktops:       slices.Clone(c.Desktops),
		Entitlements:   slices.Clone(c.Entitlements),
		Targets:        slices.Clone(c.Targets),
	}
}
