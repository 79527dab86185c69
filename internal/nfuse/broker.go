package nfuse

import (
	"context"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

// Broker is what the NFuse service asks of the site's broker (a
// *broker.Broker). Errors are the broker's (site.Error codes and
// broker's sentinels), which the handler turns into ErrorIds.
type Broker interface {
	// Snapshot returns the configuration the broker serves now; never nil.
	Snapshot() *broker.Snapshot
	// Admit takes a transaction slot, or returns ErrOverloaded at once
	// when all are taken (answered retry-required); the returned function
	// gives the slot back.
	Admit() (func(), error)
	// Begin counts a transaction of op the handler runs itself (a
	// login); the returned function ends it with its outcome. Observe
	// records one it measured itself, started at start and ended now.
	Begin(op string) func(error)
	Observe(op string, start time.Time, err error)

	// Authenticate verifies a user's password from source ("" is not
	// throttled). Errors: a *ThrottledError before any check;
	// ErrBadCredentials for an unknown user, a wrong password or a locked
	// out account (a *LockedError); ErrAccountDisabled, ErrDirectoryLocked
	// and ErrPasswordExpired after a right password only;
	// ErrDirectoryUnavailable when the directory cannot be reached.
	Authenticate(ctx context.Context, name, password, source string) (*site.User, error)
	// User returns the user name stands for, for ID-only credentials;
	// ErrBadCredentials when there is none or they are disabled,
	// ErrDirectoryUnavailable when only the directory could tell.
	User(ctx context.Context, name string) (*site.User, error)
	// EntitlementsOf returns what user may use in s; an unknown user gets
	// nothing (never nil).
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
}
