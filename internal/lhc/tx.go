package lhc

import (
	"context"
	"slices"

	"github.com/usher-vdi/usher/internal/site"
)

// outageTx is a transaction on the local copy in outage mode: it refuses
// what only the site DB may do, and notes the sessions it writes, which
// the Store journals in the same transaction.
//
// It fails closed: it holds the copy's transaction in a field rather
// than embedding it, and spells out every method of site.Tx, so that a
// method added to site.Tx does not compile here until it is given a
// rule, and TestOutageTxFailsClosed then fails until the rule is written
// into its list of what outage mode permits (reads, and the runtime
// writes of brokering); everything else answers refuse's error
// (site.ESiteDBUnavailable). The objects it hands out (collections,
// sessions, the boot log, history, preferences) are spelled out the
// same way.
type outageTx struct {
	tx      site.Tx
	refuse  func() error
	written []string
}

var _ site.Tx = (*outageTx)(nil)

// Reads: the configuration, the settings, the directory and the secrets
// as copied from the site DB.

func (t *outageTx) ConfigVersion(ctx context.Context) (int64, error) { return t.tx.ConfigVersion(ctx) }
func (t *outageTx) ConfigChanges(ctx context.Context, since int64) ([]site.ConfigChange, bool, error) {
	return t.tx.ConfigChanges(ctx, since)
}
func (t *outageTx) Settings(ctx context.Context) (site.Settings, error) { return t.tx.Settings(ctx) }
func (t *outageTx) Directory(ctx context.Context) (site.Directory, error) {
	return t.tx.Directory(ctx)
}
func (t *outageTx) Secret(ctx context.Context, name string) ([]byte, error) {
	return t.tx.Secret(ctx, name)
}

// Configuration, directory and secret writes are the site DB's alone.

func (t *outageTx) SetSettings(context.Context, site.Settings) error   { return t.refuse() }
func (t *outageTx) SetDirectory(context.Context, site.Directory) error { return t.refuse() }
func (t *outageTx) SetSecret(context.Context, string, []byte) error    { return t.refuse() }

// The configuration's collections and the admins are read from the copy;
// their writes are refused.

func (t *outageTx) Zones() site.Collection[site.Zone] { return refusing(t.tx.Zones(), t.refuse) }
func (t *outageTx) Catalogs() site.Collection[site.Catalog] {
	return refusing(t.tx.Catalogs(), t.refuse)
}
func (t *outageTx) Groups() site.Collection[site.Group] { return refusing(t.tx.Groups(), t.refuse) }
func (t *outageTx) Users() site.Collection[site.User]   { return refusing(t.tx.Users(), t.refuse) }
func (t *outageTx) Machines() site.Collection[site.Machine] {
	return refusing(t.tx.Machines(), t.refuse)
}
func (t *outageTx) DeliveryGroups() site.Collection[site.DeliveryGroup] {
	return refusing(t.tx.DeliveryGroups(), t.refuse)
}
func (t *outageTx) Applications() site.Collection[site.Resource] {
	return refusing(t.tx.Applications(), t.refuse)
}
func (t *outageTx) Desktops() site.Collection[site.Resource] {
	return refusing(t.tx.Desktops(), t.refuse)
}
func (t *outageTx) Entitlements() site.Collection[site.Entitlement] {
	return refusing(t.tx.Entitlements(), t.refuse)
}
func (t *outageTx) Targets() site.Collection[site.Target] {
	return refusing(t.tx.Targets(), t.refuse)
}
func (t *outageTx) Admins() site.Collection[site.Admin] { return refusing(t.tx.Admins(), t.refuse) }

// Runtime state goes on in outage mode: machines register and enrol,
// accounts lock out, brokers record themselves. The statuses of this
// broker's machines are written back at recovery; the rest is the copy's
// until the next copy replaces it.

func (t *outageTx) MachineStatus(ctx context.Context, machine string) (site.MachineStatus, error) {
	return t.tx.MachineStatus(ctx, machine)
}
func (t *outageTx) SetMachineStatus(ctx context.Context, machine string, st site.MachineStatus) error {
	return t.tx.SetMachineStatus(ctx, machine, st)
}
func (t *outageTx) MachineStatuses(ctx context.Context) (map[string]site.MachineStatus, error) {
	return t.tx.MachineStatuses(ctx)
}
func (t *outageTx) MachineSessions(ctx context.Context, machines, sessions []string) (map[string]site.MachineStatus, map[string]site.Session, error) {
	return t.tx.MachineSessions(ctx, machines, sessions)
}
func (t *outageTx) MachineCredential(ctx context.Context, machine string) (site.MachineCredential, error) {
	return t.tx.MachineCredential(ctx, machine)
}
func (t *outageTx) SetMachineCredential(ctx context.Context, machine string, c site.MachineCredential) error {
	return t.tx.SetMachineCredential(ctx, machine, c)
}
func (t *outageTx) AccountLock(ctx context.Context, account string) (site.AccountLock, error) {
	return t.tx.AccountLock(ctx, account)
}
func (t *outageTx) SetAccountLock(ctx context.Context, l site.AccountLock) error {
	return t.tx.SetAccountLock(ctx, l)
}
func (t *outageTx) AccountLocks(ctx context.Context) ([]site.AccountLock, error) {
	return t.tx.AccountLocks(ctx)
}
func (t *outageTx) Brokers() site.Collection[site.BrokerRecord] { return passing(t.tx.Brokers()) }

// Boots are read from the copy, which holds none (the boot log is the
// site DB's); a boot is not recorded while the site DB is down (the boot
// server logs it and serves the boot all the same).
func (t *outageTx) Boots() site.BootLog { return refusedBoots{t.tx.Boots(), t.refuse} }

type refusedBoots struct {
	log    site.BootLog
	refuse func() error
}

func (b refusedBoots) Record(context.Context, site.BootRecord) error { return b.refuse() }
func (b refusedBoots) List(ctx context.Context, f site.BootFilter, opts site.ListOptions) (site.Page[site.BootRecord], error) {
	return b.log.List(ctx, f, opts)
}

// Sessions are written and journaled (Create, Update); Delete is refused.
func (t *outageTx) Sessions() site.Sessions { return journaling{t.tx.Sessions(), t} }

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
	return refusedPreferences{t.tx.Preferences(), t.refuse}
}

type refusedPreferences struct {
	prefs  site.UserPreferences
	refuse func() error
}

func (p refusedPreferences) Get(ctx context.Context, user string) (site.Preferences, error) {
	return p.prefs.Get(ctx, user)
}
func (p refusedPreferences) Put(context.Context, string, site.Preferences) (site.Preferences, error) {
	return site.Preferences{}, p.refuse()
}
func (p refusedPreferences) Delete(context.Context, string) error { return p.refuse() }

// journaling notes the sessions written through it.
type journaling struct {
	sessions site.Sessions
	t        *outageTx
}

func (j journaling) note(id string, err error) error {
	if err == nil && !slices.Contains(j.t.written, id) {
		j.t.written = append(j.t.written, id)
	}
	return err
}

func (j journaling) Get(ctx context.Context, id string) (site.Session, error) {
	return j.sessions.Get(ctx, id)
}

func (j journaling) List(ctx context.Context, f site.SessionFilter, opts site.ListOptions) (site.Page[site.Session], error) {
	return j.sessions.List(ctx, f, opts)
}

func (j journaling) Create(ctx context.Context, s site.Session) error {
	return j.note(s.ID, j.sessions.Create(ctx, s))
}

func (j journaling) Update(ctx context.Context, s site.Session) error {
	return j.note(s.ID, j.sessions.Update(ctx, s))
}

// Delete is refused: a session deleted from the copy could not be
// written back. Brokering ends sessions; it deletes none.
func (j journaling) Delete(context.Context, string) error { return j.t.refuse() }

// refused is a collection whose writes are refused.
type refused[T any] struct {
	c      site.Collection[T]
	refuse func() error
}

func refusing[T any](c site.Collection[T], refuse func() error) site.Collection[T] {
	return refused[T]{c, refuse}
}

func (c refused[T]) Get(ctx context.Context, name string) (T, error) { return c.c.Get(ctx, name) }
func (c refused[T]) List(ctx context.Context, opts site.ListOptions) (site.Page[T], error) {
	return c.c.List(ctx, opts)
}
func (c refused[T]) Create(context.Context, T) error      { return c.refuse() }
func (c refused[T]) Update(context.Context, T) error      { return c.refuse() }
func (c refused[T]) Delete(context.Context, string) error { return c.refuse() }

// passed is a collection of runtime state that outage mode writes as
// the site DB would: its methods are spelled out, as outageTx's are, so
// that one added to site.Collection needs a rule here too.
type passed[T any] struct{ c site.Collection[T] }

func passing[T any](c site.Collection[T]) site.Collection[T] { return passed[T]{c} }

func (c passed[T]) Get(ctx context.Context, name string) (T, error) { return c.c.Get(ctx, name) }
func (c passed[T]) List(ctx context.Context, opts site.ListOptions) (site.Page[T], error) {
	return c.c.List(ctx, opts)
}
func (c passed[T]) Create(ctx context.Context, obj T) error       { return c.c.Create(ctx, obj) }
func (c passed[T]) Update(ctx context.Context, obj T) error       { return c.c.Update(ctx, obj) }
func (c passed[T]) Delete(ctx context.Context, name string) error { return c.c.Delete(ctx, name) }
