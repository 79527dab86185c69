// Package ldapauth authenticates users against an LDAP directory or
// Active Directory and reads their groups, nested ones included.
//
// A Directory finds a user with a service account, checks the password by
// binding as the user, and reads the user's groups: with AD's in-chain
// matching rule where the server offers it, else with a bounded,
// cycle-safe breadth-first search over member. It keeps a bounded pool of
// connections per server, times out every dial and operation, fails over
// to the next server, and caches group memberships for a TTL.
//
// It is the only package that imports the LDAP library. The assembly
// (internal/server) and the commands import it; the domain does not.
// Metrics reach the outside through the Metrics interface, so that it
// imports no instrumentation library.
package ldapauth

import (
	"errors"
	"strings"
	"time"
)

// Errors that callers branch on, with errors.Is.
var (
	// ErrWrongCredentials: no such user, or the wrong password. The two are
	// not told apart, neither by the error nor, as far as one round trip
	// can hide it, by the time taken.
	ErrWrongCredentials = errors.New("wrong user name or password")
	// ErrAccountDisabled: the password is right but the account is
	// disabled (AD's userAccountControl ACCOUNTDISABLE, or an expired
	// account).
	ErrAccountDisabled = errors.New("account disabled")
	// ErrAccountLocked: the account is locked out (AD's lockoutTime, or
	// OpenLDAP ppolicy's pwdAccountLockedTime).
	ErrAccountLocked = errors.New("account locked out")
	// ErrPasswordExpired: the password has expired or must be changed at
	// the next logon.
	ErrPasswordExpired = errors.New("password expired")
	// ErrAmbiguous: the name matches more than one entry; nobody is
	// authenticated, and the entries are logged.
	ErrAmbiguous = errors.New("user name matches several directory entries")
	// ErrNotFound: Lookup found no entry for the name.
	ErrNotFound = errors.New("no such user in the directory")
	// ErrUnavailable: no server answered in time (every one is down, slow,
	// refuses the service account, or presents a certificate that does not
	// verify). The error's text names each server and what went wrong.
	ErrUnavailable = errors.New("directory unavailable")
)

// Identity is a user as the directory describes it.
type Identity struct {
	// DN is the user's entry.
	DN string
	// Name is the value of the configured user attribute, as the
	// directory spells it.
	Name string
	// DisplayName is displayName, else cn, else Name.
	DisplayName string
	// Groups are the common names (cn) of every group the user belongs
	// to, directly or through nesting; GroupDNs are their DNs, in the
	// same order.
	Groups, GroupDNs []string
	// PasswordChanged changes when the password does: it holds AD's
	// pwdLastSet and OpenLDAP ppolicy's pwdChangedTime, empty when the
	// directory keeps neither.
	PasswordChanged string
}

// Op is a kind of directory operation, for Metrics.
type Op string

// The operations a Directory does.
const (
	OpDial        Op = "dial"         // TCP, TLS or StartTLS: a new connection
	OpServiceBind Op = "service_bind" // bind as the service account
	OpUserBind    Op = "user_bind"    // bind as the user: the password check
	OpUserSearch  Op = "user_search"  // find the user's entry
	OpGroupSearch Op = "group_search" // one search for groups
	OpRootDSE     Op = "root_dse"     // read the server's capabilities, once per connection set-up
)

// Result is how an operation ended, for Metrics.
type Result string

// The results.
const (
	ResultOK          Result = "ok"
	ResultRefused     Result = "refused"     // the server answered with an error (a wrong password, say)
	ResultUnavailable Result = "unavailable" // no answer: network error, timeout, TLS failure
	ResultCanceled    Result = "canceled"    // the caller's context ended
)

// Metrics receives what a Directory does. Implementations must be safe for
// concurrent use and must not block: they are called on the logon path.
type Metrics interface {
	// Operation records one operation on server (its URL as configured),
	// how it ended and how long it took.
	Operation(server string, op Op, result Result, elapsed time.Duration)
	// Pool reports a server's connections, in use and open in all, after
	// every change.
	Pool(server string, inUse, open int)
	// GroupCache records one lookup in the group cache.
	GroupCache(hit bool)
}

type nopMetrics struct{}

func (nopMetrics) Operation(string, Op, Result, time.Duration) {}
func (nopMetrics) Pool(string, int, int)                       {}
func (nopMetrics) GroupCache(bool)                             {}

// logonValue returns the value to look name up by in attr: it accepts
// user, DOMAIN\user (domain must be the configured NetBIOS name, in any
// case) and user@suffix (suffix must be the configured UPN suffix, in any
// case, unless attr is userPrincipalName). It returns ErrWrongCredentials
// for a name that cannot be one of the directory's users.
func logonValue(name, attr, domain, upnSuffix string) (string, error) {
	if name == "" || len(name) > MaxNameLength {
		return "", ErrWrongCredentials
	}
	user := name
	if d, u, ok := strings.Cut(name, `\`); ok {
		if domain == "" || !strings.EqualFold(d, domain) {
			return "", ErrWrongCredentials
		}
		user = u
	} else if i := strings.LastIndexByte(name, '@'); i >= 0 {
		local, suffix := name[:i], name[i+1:]
		switch {
		case upnSuffix != "" && strings.EqualFold(suffix, upnSuffix):
			user = local
		case attr == "userPrincipalName" && local != "" && suffix != "":
			return name, nil // another of the forest's UPN suffixes: the directory decides
		default:
			return "", ErrWrongCredentials
		}
	}
	if user == "" {
		return "", ErrWrongCredentials
	}
	if attr == "userPrincipalName" {
		if upnSuffix == "" {
			return "", ErrWrongCredentials
		}
		return user + "@" + upnSuffix, nil
	}
	return user, nil
}
