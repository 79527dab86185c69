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
// (internal/server), cmd/usher and internal/bench (the directory storm)
// import it; the domain does not.
// Metrics reach the outside through the Metrics interface, so that it
// imports no instrumentation library.
package ldapauth

import (
	"errors"
	"strings"
	"time"
	"unicode"

	"golang.org/x/text/unicode/norm"
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
	// ErrNameMismatch: the directory matched the name to an entry whose
	// user attribute does not have the name's key (auth.NameKey): its
	// matching rule differs from usher's normalisation, and the logon is
	// refused rather than counted under a key another spelling of the same
	// entry would not share. The entry is logged.
	ErrNameMismatch = errors.New("the directory matched the name to an entry of another name")
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
// case, unless attr is userPrincipalName). The name is taken in Unicode
// normal form KC with its spaces trimmed and collapsed (see prepare), so
// that the directory is asked for one spelling of the spellings that share
// a key (auth.NameKey), case aside: its matching rule decides case. It
// returns ErrWrongCredentials for a name that cannot be one of the
// directory's users.
func logonValue(name, attr, domain, upnSuffix string) (string, error) {
	if name == "" || len(name) > MaxNameLength {
		return "", ErrWrongCredentials
	}
	name = prepare(name)
	if name == "" || len(name) > MaxNameLength {
		return "", ErrWrongCredentials
	}
	user := name
	if d, u, ok := strings.Cut(name, `\`); ok {
		if domain == "" || !strings.EqualFold(d, domain) {
			return "", ErrWrongCredentials
		}
		user = prepare(u)
	} else if i := strings.LastIndexByte(name, '@'); i >= 0 {
		local, suffix := prepare(name[:i]), prepare(name[i+1:])
		switch {
		case upnSuffix != "" && strings.EqualFold(suffix, upnSuffix):
			user = local
		case attr == "userPrincipalName" && local != "" && suffix != "":
			return local + "@" + suffix, nil // another of the forest's UPN suffixes: the directory decides
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

// prepare returns s in Unicode normal form KC with every run of spaces
// (any Unicode space) one U+0020 and none at either end: auth.NameKey but
// for case folding, which the directory's matching rule does.
func prepare(s string) string {
	s = norm.NFKC.String(strings.ToValidUTF8(s, "\uFFFD"))
	if strings.IndexFunc(s, isOtherSpace) >= 0 {
		s = strings.Map(func(r rune) rune {
			if isOtherSpace(r) {
				return ' '
			}
			return r
		}, s)
	}
	return strings.Join(strings.Fields(s), " ")
}

func isOtherSpace(r rune) bool { return r != ' ' && unicode.IsSpace(r) }
