package api

import (
	"context"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

// Broker is what the API asks of the site's broker (a *broker.Broker):
// the user API, the VDA API and the admin API's password checks, lock-outs,
// machine deletes and publication of changes. Errors are the broker's
// (site.Error codes and broker's sentinels), which the handlers turn into
// HTTP statuses.
type Broker interface {
	// Snapshot returns the configuration the broker serves now; never nil.
	Snapshot() *broker.Snapshot
	// Refresh brings the snapshot up to the site DB's configuration
	// version; it fails with EUnavailable when the site DB cannot be read.
	Refresh(ctx context.Context) error
	// Publish serves cfg, the committed configuration at version, at once;
	// it reports false, and keeps what it serves, when cfg is no newer.
	Publish(version int64, cfg *site.Config) bool
	// Guard returns the guard that reserves the broker's password checks.
	Guard() *auth.Guard
	// Admit takes a transaction slot, or returns ErrOverloaded at once
	// when all are taken; the returned function gives the slot back.
	Admit() (func(), error)
	// Begin counts a transaction of op the API runs itself (a login); the
	// returned function ends it with its outcome.
	Begin(op string) func(error)

	// Authenticate verifies a user's password from source ("" is not
	// throttled). Errors: a *ThrottledError before any check;
	// ErrBadCredentials for an unknown user, a wrong password or a locked
	// out account (a *LockedError); ErrAccountDisabled, ErrDirectoryLocked
	// and ErrPasswordExpired after a right password only;
	// ErrDirectoryUnavailable when the directory cannot be reached.
	Authenticate(ctx context.Context, name, password, source string) (*site.User, error)
	// CheckPassword runs verify under the account's lock-out and the
	// source's throttling and returns its verdict, or the refusal: a
	// *auth.ThrottledError or *auth.LockedError, answered as a wrong
	// password.
	CheckPassword(ctx context.Context, kind, name, source string, verify func() bool) (bool, error)
	// User returns the user name stands for; ErrBadCredentials when there
	// is none or they are disabled, ErrDirectoryUnavailable when only the
	// directory could tell.
	User(ctx context.Context, name string) (*site.User, error)
	// DirectoryName reports whether name may be a directory user's.
	DirectoryName(name string) bool
	// DirectoryAdmin reports whether u, a directory user the broker
	// returned, is in one of the directory's admin groups; false for
	// anyone else.
	DirectoryAdmin(u *site.User) bool
	// Lockouts returns the accounts locked out now.
	Lockouts(ctx context.Context) ([]broker.Lockout, error)
	// Unlock clears an account's lock-out and reports whether it was
	// locked out.
	Unlock(ctx context.Context, kind, name string) (bool, error)

	// Resources and EntitlementsOf return what a user may use; an
	// unknown user gets nothing (never nil).
	Resources(ctx context.Context, user string) *broker.Entitlements
	EntitlementsOf(s *broker.Snapshot, user string) *broker.Entitlements
	// Launch places a session. Errors: ErrNotEntitled; ENoCapacity when no
	// machine can take it; EUnavailable when the site DB (or, in an
	// outage, the zone's leader) cannot be reached.
	Launch(ctx context.Context, req broker.LaunchRequest) (*broker.Launch, error)
	// Reconnect launches the resource of one of the user's sessions
	// again; ENotFound when the user has no such session.
	Reconnect(ctx context.Context, user, id, clientName string) (*broker.Launch, error)
	// Logoff ends one of the user's sessions whatever its VDA answers;
	// Disconnect disconnects one through its VDA. ENotFound when the user
	// has no such session.
	Logoff(ctx context.Context, user, id string) error
	Disconnect(ctx context.Context, user, id string) error
	// UserSessions returns a user's live sessions.
	UserSessions(ctx context.Context, user string) ([]site.Session, error)

	// KnowsMachine reports whether a machine is configured.
	KnowsMachine(name string) bool
	// Register records a VDA as ready and reconciles its sessions;
	// ENotFound for a machine not configured, EUnavailable at a broker
	// that hands its zone's brokering to another.
	Register(ctx context.Context, req broker.Registration) error
	// HeartbeatInterval and HeartbeatTimeout are told to VDAs at
	// registration.
	HeartbeatInterval() time.Duration
	HeartbeatTimeout() time.Duration
	// Heartbeat records a VDA's load and returns its load index;
	// ErrNotRegistered for a machine not registered.
	Heartbeat(ctx context.Context, hb broker.Heartbeat) (int, error)
	// SessionEvent applies a VDA's report of a session's change; an event
	// for a session on another machine is refused, a repeated one is
	// harmless.
	SessionEvent(ctx context.Context, ev broker.SessionEvent) error
	// DeleteMachine deletes a machine as actor: EConflict when it has live
	// sessions and not force, ENotFound when it is unknown.
	DeleteMachine(ctx context.Context, name string, force bool, actor string) error
}

// noBroker returns nil for a nil *broker.Broker, so that a Config given
// one serves no broker's API, as one given none.
func noBroker(b Broker) Broker {
	if p, ok := b.(*broker.Broker); ok && p == nil {
		return nil
	}
	return b
}
