package api

import (
	"context"

	"github.com/usher-vdi/usher/internal/site"
)

// mutate changes the configuration with fn in one transaction, with the
// whole-site checks of site.Mutate, records the change in the site's
// change history as the calling admin's, then runs then (when not nil) in
// the same transaction. With a broker it starts from the configuration the
// broker serves, which costs no read of the site while the site DB is
// still at its version, and once committed hands the broker the new
// configuration, so that the change is served at once without reading
// the site back.
//
// fn gets a copy of the configuration whose lists of objects are its own
// but whose objects share the lists they hold (a user's groups, ...) with
// the configuration the broker serves: fn may add, replace and delete
// objects, or set their fields, and must never write into a list an
// object holds (see site.MutateFrom). No fn of this package does: each
// adds, replaces or deletes an object, or sets one field of one.
func (s *Server) mutate(ctx context.Context, fn func(*site.Config) error, then func(site.Tx) error) error {
	var base *site.Config
	var version int64
	if s.cfg.Broker != nil {
		snap := s.cfg.Broker.Snapshot()
		base, version = snap.Config(), snap.Version
	}
	var m *site.Mutation
	err := s.cfg.Store.Update(ctx, func(tx site.Tx) error {
		var err error
		if m, err = site.MutateFrom(ctx, tx, base, version, fn); err != nil {
			return err
		}
		if err := site.RecordPlan(ctx, tx, adminActor(ctx), m.Plan); err != nil {
			return err
		}
		if then != nil {
			return then(tx)
		}
		return nil
	})
	if err == nil && s.cfg.Broker != nil {
		s.cfg.Broker.Publish(m.Version, m.Config)
	}
	return err
}
