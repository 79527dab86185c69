package lhc

import (
	"context"
	"slices"

	"github.com/usher-vdi/usher/internal/site"
)

// outageTx is a transaction on the local copy in outage mode: it refuses
// what only the site DB may do, and notes the sessions it writes, which
// the Store journals in the same transaction.
type outageTx struct {
	site.Tx
	refuse  func() error
	written []string
}

func (t *outageTx) SetSettings(context.Context, site.Settings) error { return t.refuse() }
func (t *outageTx) SetSecret(context.Context, string, []byte) error  { return t.refuse() }
func (t *outageTx) SetDirectory(context.Context, site.Directory) error {
	return t.refuse()
}
func (t *outageTx) Zones() site.Collection[site.Zone] { return refusing(t.Tx.Zones(), t.refuse) }
func (t *outageTx) Catalogs() site.Collection[site.Catalog] {
	return refusing(t.Tx.Catalogs(), t.refuse)
}
func (t *outageTx) Groups() site.Collection[site.Group] { return refusing(t.Tx.Groups(), t.refuse) }
func (t *outageTx) Users() site.Collection[site.User]   { return refusing(t.Tx.Users(), t.refuse) }
func (t *outageTx) Machines() site.Collection[site.Machine] {
	return refusing(t.Tx.Machines(), t.refuse)
}
func (t *outageTx) DeliveryGroups() site.Collection[site.DeliveryGroup] {
	return refusing(t.Tx.DeliveryGroups(), t.refuse)
}
func (t *outageTx) Applications() site.Collection[site.Resource] {
	return refusing(t.Tx.Applications(), t.refuse)
}
func (t *outageTx) Desktops() site.Collection[site.Resource] {
	return refusing(t.Tx.Desktops(), t.refuse)
}
func (t *outageTx) Entitlements() site.Collection[site.Entitlement] {
	return refusing(t.Tx.Entitlements(), t.refuse)
}
func (t *outageTx) Targets() site.Collection[site.Target] {
	return refusing(t.Tx.Targets(), t.refuse)
}
func (t *outageTx) Admins() site.Collection[site.Admin] { return refusing(t.Tx.Admins(), t.refuse) }

// Boots are read from the copy, which holds none (the boot log is the
// site DB's); a boot is not recorded while the site DB is down (the boot
// server logs it and serves the boot all the same).
func (t *outageTx) Boots() site.BootLog { return refusedBoots{t.Tx.Boots(), t.refuse} }

type refusedBoots struct {
	site.BootLog
	refuse func() error
}

func (b refusedBoots) Record(context.Context, site.BootRecord) error { return b.refuse() }

func (t *outageTx) Sessions() site.Sessions { return journaling{t.Tx.Sessions(), t} }

// History is refused, reads too: the change history is the site DB's,
// which the local copy does not hold.
func (t *outageTx) History() site.ChangeHistory { return refusedHistory{t.refuse} }

type refusedHistory struct{ refuse func() error }

func (h refusedHistory) Record(context.Context, ...site.ChangeRecord) error { return h.refuse() }
func (h refusedHistory) List(context.Context, site.ChangeFilter, site.ListOptions) (site.Page[site.ChangeRecord], error) {
	return site.Page[site.ChangeRecord]{}, h.refuse()
}

// Preferences are read from the copy, which holds none (users'
// preferences are user data, which the copy does not take): in outage
// mode every user has site.NoPreferences. Writes are refused, as the
// site DB's alone; the portal keeps its own copy meanwhile.
func (t *outageTx) Preferences() site.UserPreferences {
	return refusedPreferences{t.Tx.Preferences(), t.refuse}
}

type refusedPreferences struct {
	site.UserPreferences
	refuse func() error
}

func (p refusedPreferences) Put(context.Context, string, site.Preferences) (site.Preferences, error) {
	return site.Preferences{}, p.refuse()
}
func (p refusedPreferences) Delete(context.Context, string) error { return p.refuse() }

// journaling notes the sessions written through it.
type journaling struct {
	site.Sessions
	t *outageTx
}

func (j journaling) note(id string, err error) error {
	if err == nil && !slices.Contains(j.t.written, id) {
		j.t.written = append(j.t.written, id)
	}
	return err
}

func (j journaling) Create(ctx context.Context, s site.Session) error {
	return j.note(s.ID, j.Sessions.Create(ctx, s))
}

func (j journaling) Update(ctx context.Context, s site.Session) error {
	return j.note(s.ID, j.Sessions.Update(ctx, s))
}

// Delete is refused: a session deleted from the copy could not be
// written back. Brokering ends sessions; it deletes none.
func (j journaling) Delete(context.Context, string) error { return j.t.refuse() }

// refused is a collection whose writes are refused.
type refused[T any] struct {
	site.Collection[T]
	refuse func() error
}

func refusing[T any](c site.Collection[T], refuse func() error) site.Collection[T] {
	return refused[T]{c, refuse}
}

func (c refused[T]) Create(context.Context, T) error      { return c.refuse() }
func (c refused[T]) Update(context.Context, T) error      { return c.refuse() }
func (c refused[T]) Delete(context.Context, string) error { return c.refuse() }
