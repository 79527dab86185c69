package broker

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site"
)

// Directory is where the site's users who are not its own come from: an
// LDAP directory or Active Directory (the assembly adapts
// internal/auth/ldapauth). Implementations are safe for concurrent use;
// Authenticate and Lookup may do I/O, and honour ctx.
type Directory interface {
	// Key returns what identifies name's user without asking the
	// directory, the same for every form of one user's name (user,
	// DOMAIN\user, user@suffix) and every spelling the directory matches
	// to the user's entry, or false when name cannot be one of the
	// directory's users. It does no I/O. The broker counts (lock-out)
	// and caches (verified passwords) logons under auth.NameKey of it.
	Key(name string) (string, bool)
	// Authenticate checks name's password and returns the user, whose
	// Name has the key of Key(name) (auth.NameKey): an entry the
	// directory matched to name whose name has another key is refused as
	// an unknown user, so that the key is the entry's. Errors:
	// ErrBadCredentials for an unknown user and a wrong password alike;
	// once the password is right, ErrAccountDisabled,
	// ErrDirectoryLocked or ErrPasswordExpired; an error with code
	// site.EUnavailable when the directory cannot answer.
	Authenticate(ctx context.Context, name, password string) (DirectoryUser, error)
	// Lookup reads name's user again, without a password, with the same
	// errors: ErrBadCredentials is a user the directory no longer has.
	Lookup(ctx context.Context, name string) (DirectoryUser, error)
	// Close releases the directory's connections. Calls after it fail
	// as an unavailable directory's do.
	Close() error
}

// DirectoryUser is a user as the directory describes it.
type DirectoryUser struct {
	DN, Name, DisplayName string
	// Groups and GroupDNs are the user's groups, nested ones included:
	// their names (cn) and DNs, in the same order.
	Groups, GroupDNs []string
	// PasswordChanged changes when the password does ("" when the
	// directory does not say).
	PasswordChanged string
}

// Directory outcomes, beside ErrBadCredentials and ErrAccountDisabled.
// Like ErrAccountDisabled they are only told to a caller who gave the
// right password (or whose directory refused the bind for that reason).
var (
	ErrDirectoryLocked = site.Errorf(site.EForbidden, "account locked out in the directory: ask the help desk to unlock it")
	ErrPasswordExpired = site.Errorf(site.EForbidden, "password expired: change it, then log on again")
	// ErrDirectoryUnavailable is a directory that could not be asked,
	// and for new logons only: users it verified already keep working.
	ErrDirectoryUnavailable = site.Errorf(site.EUnavailable, "the directory cannot be reached; try again shortly")
)

// OpenDirectory opens the directory of a site's settings. The broker calls
// it whenever the settings change (with the settings of an enabled
// directory only) and closes the directory it replaces. It must not do
// I/O: a directory opens its connections when first asked.
type OpenDirectory func(site.Directory) (Directory, error)

// DefaultDirectoryTTL is how long a directory user's entry, as read, is
// served before it is read again in the background, when the settings
// do not say (site.Directory.GroupCacheTTLSeconds): the directory
// client's group cache lasts as long.
const DefaultDirectoryTTL = 5 * time.Minute

// maxDirectoryUsers bounds the directory users the broker remembers:
// past it, those unread for longer than the TTL go, and all of them if
// that is not enough (each then reads the directory at its next request).
const maxDirectoryUsers = 100_000

// directoryState is the directory the broker uses and the users it read
// from it, which go with it when the settings change.
type directoryState struct {
	settings site.Directory
	dir      Directory // nil when the settings are disabled or did not open
	err      error     // why dir is nil for enabled settings
	ttl      time.Duration

	mu    sync.Mutex
	users map[string]*dirEntry // by auth.NameKey of Directory.Key
}

// dirEntry is a directory user as last read: its Identity is served for
// ttl, then while a read in the background brings it up to date.
type dirEntry struct {
	user       *site.User
	groups     DirectoryUser // the groups, as read
	read       time.Time
	refreshing atomic.Bool
}

// setDirectory opens the directory of cfg's settings when they changed.
// The caller holds refreshMu.
func (b *Broker) setDirectory(cfg *site.Config) {
	cur := b.dir.Load()
	if cur != nil && cur.settings.Equal(cfg.Directory) {
		return
	}
	next := &directoryState{settings: cfg.Directory, ttl: cmp.Or(cfg.Directory.GroupCacheTTL(), DefaultDirectoryTTL),
		users: map[string]*dirEntry{}}
	if cfg.Directory.Enabled && b.cfg.OpenDirectory != nil {
		next.dir, next.err = b.cfg.OpenDirectory(cfg.Directory)
		if next.err != nil {
			b.log.Error("the site's directory settings do not work: directory users cannot log on", "err", next.err)
		}
	}
	b.dir.Store(next)
	if cur != nil && cur.dir != nil {
		cur.dir.Close()
	}
	if cur != nil {
		// Users verified by the old directory must be verified again.
		cur.mu.Lock()
		for key := range cur.users {
			b.cfg.Verified.Forget(guardKey(AccountUser, key))
		}
		cur.mu.Unlock()
	}
}

// directory returns the directory state, and its key for name: ok is
// false when there is no working directory or name cannot be one of its
// users.
func (b *Broker) directory(name string) (st *directoryState, key string, ok bool) {
	st = b.dir.Load()
	if st == nil || st.dir == nil {
		return st, "", false
	}
	k, ok := st.dir.Key(name)
	if !ok {
		return st, "", false
	}
	return st, auth.NameKey(k), true
}

// shadows reports whether a directory user named name, or of key (""
// for none), would share a site user's name in s: such a user is refused
// on every path (logon, a token's or a cookie's user, entitlements,
// sessions, admin groups), and the site user is untouched. Names are
// compared by auth.NameKey, the key a directory matches logons by, which
// is stricter than site.FoldName.
func shadows(s *Snapshot, name, key string) bool {
	if _, ok := s.UserKeyed(auth.NameKey(name)); ok {
		return true
	}
	_, ok := s.UserKeyed(key)
	return key != "" && ok
}

// refuseShadow logs a directory user refused because a site user has
// their name.
func (b *Broker) refuseShadow(name, dn, source string) {
	b.log.Warn("directory logon refused: a site user has the name; a directory user never shares a site user's name",
		"user", name, "dn", dn, "remote", source)
}

// authenticateDirectory is Authenticate for a name that is none of the
// site's users, under the same reservations. A password the directory
// accepted is remembered (auth.VerifiedCache, bound to the entry and its
// password-change time) so that the next logons cost no bind, as long as
// the user's entry read within the TTL (or the last one, while the
// directory cannot be reached) says the account may log on.
//
// A refusal costs what a site user's wrong password does, so that time
// does not tell an unknown name from a site user, a directory user or a
// locked account: one argon2id computation under the site's parameters
// (a decoy). When the directory is asked, the decoy runs beside it from
// the start and a refusal waits for both, so that it costs the longer of
// the two, the hash as a site user's refusal does, not the directory's
// round trips on top of it. A logon the directory accepts waits for it
// too: it costs the hash, as a site user's first logon does.
func (b *Broker) authenticateDirectory(ctx context.Context, st *directoryState, key, name, password, source string) (*site.User, error) {
	var decoy chan struct{}
	beside := func() {
		decoy = make(chan struct{})
		go func() {
			defer close(decoy)
			b.cfg.Verified.Decoy(b.dummyHash, password)
		}()
	}
	u, err := b.authenticateDirectoryEntry(ctx, st, key, name, password, source, beside)
	switch {
	case decoy != nil:
		// Waited for whatever the answer, so that no hash outlives the
		// logon that started it (a storm of logons would leave as many
		// behind, and a closed broker would still be hashing).
		<-decoy
	case errors.Is(err, ErrBadCredentials):
		b.cfg.Verified.Decoy(b.dummyHash, password)
	}
	return u, err
}

// authenticateDirectoryEntry is authenticateDirectory but for the cost of
// a refusal. It calls beside just before it asks the directory.
func (b *Broker) authenticateDirectoryEntry(ctx context.Context, st *directoryState, key, name, password, source string, beside func()) (*site.User, error) {
	gkey := guardKey(AccountUser, key)
	if shadows(b.Snapshot(), "", key) {
		// Every entry the name can reach is named as a site user (the
		// directory refuses an entry of another key): refused without
		// asking it. The source is charged, as for an unknown name.
		if mustNotWait(ctx) {
			return nil, ErrWouldWait
		}
		at, err := b.guard.Reserve("", source)
		if err != nil {
			return nil, b.refused(name, source, err)
		}
		at.Fail()
		b.refuseShadow(name, "", source)
		return nil, ErrBadCredentials
	}
	if e := b.entry(st, key); e != nil && b.cfg.Verified.Known(gkey, password, e.user.Directory) {
		if b.cfg.SiteLockout && b.siteClear.fresh(gkey, b.cfg.Now()) {
			at, err := b.guard.Reserve("", source)
			if err != nil {
				return nil, b.refused(e.user.Name, source, err)
			}
			at.Succeed()
			return e.user, nil
		}
		if mustNotWait(ctx) && b.siteWide() {
			return nil, ErrWouldWait
		}
		// No guess to count, but the account's lock is checked.
		if _, err := b.CheckPassword(ctx, AccountUser, key, source, func() bool { return true }); err != nil {
			return nil, b.refused(e.user.Name, source, err)
		}
		return e.user, nil
	}
	if mustNotWait(ctx) {
		return nil, ErrWouldWait
	}
	// Concurrent logons with one password share one bind: the first
	// caller's. Only a wrong password counts as a failed logon; an
	// account the directory refuses for another reason, or a directory
	// that does not answer, is no guess.
	check := func() (bool, error) {
		var derr error
		ok, err := b.CheckPassword(ctx, AccountUser, key, source, func() bool {
			var id DirectoryUser
			id, derr = st.dir.Authenticate(ctx, name, password)
			if derr == nil {
				e := st.put(key, id, b.cfg.Now(), b.cfg.Verified, gkey)
				b.cfg.Verified.Remember(gkey, password, e.user.Directory)
				if b.dir.Load() != st {
					// The settings changed while the directory was asked:
					// the new one must check this password again.
					b.cfg.Verified.Forget(gkey)
				}
			}
			return !errors.Is(derr, ErrBadCredentials)
		})
		if err == nil && derr != nil {
			return false, derr
		}
		return ok, err
	}
	beside()
	ok, err, shared := b.cfg.Verified.Share(gkey, password, "directory", check)
	if shared && errors.Is(err, auth.ErrThrottled) {
		ok, err = check() // the first caller's source was throttled, not necessarily ours
	}
	switch {
	case site.ErrorCode(err) == site.EUnavailable:
		b.log.Warn("directory logon failed: the directory cannot be reached", "user", name, "err", err)
		return nil, ErrDirectoryUnavailable
	case errors.Is(err, ErrAccountDisabled), errors.Is(err, ErrDirectoryLocked), errors.Is(err, ErrPasswordExpired):
		b.log.Info("directory logon refused", "user", name, "why", err)
		st.drop(key)
		return nil, err
	case err != nil:
		return nil, b.refused(name, source, err)
	case !ok:
		return nil, ErrBadCredentials
	}
	e := st.get(key)
	if e == nil { // dropped meanwhile: the settings changed
		return nil, ErrDirectoryUnavailable
	}
	if shadows(b.Snapshot(), e.user.Name, "") {
		st.drop(key)
		b.cfg.Verified.Forget(gkey)
		b.refuseShadow(e.user.Name, e.groups.DN, source)
		return nil, ErrBadCredentials
	}
	return e.user, nil
}

// directoryUser returns the directory user name stands for, from the last
// read of the directory (see directoryEntry), or from a read now when
// there is none. It returns nil, nil when name is no directory user the
// site may serve.
func (b *Broker) directoryUser(ctx context.Context, name string) (*site.User, error) {
	st, key, ok := b.directory(name)
	if !ok {
		return nil, nil
	}
	if e := b.entry(st, key); e != nil {
		return e.user, nil
	}
	if mustNotWait(ctx) {
		return nil, ErrWouldWait
	}
	id, err := st.dir.Lookup(ctx, name)
	switch {
	case site.ErrorCode(err) == site.EUnavailable:
		return nil, ErrDirectoryUnavailable
	case err != nil:
		return nil, nil
	case shadows(b.Snapshot(), id.Name, ""):
		b.refuseShadow(id.Name, id.DN, "")
		return nil, nil
	}
	return st.put(key, id, b.cfg.Now(), b.cfg.Verified, guardKey(AccountUser, key)).user, nil
}

// directoryEntry returns the broker's last read of name's directory entry,
// nil when it has none, and has it read again in the background once older
// than the TTL.
func (b *Broker) directoryEntry(name string) *dirEntry {
	st, key, ok := b.directory(name)
	if !ok {
		return nil
	}
	return b.entry(st, key)
}

// entry is directoryEntry for the user of key in st. An entry named as
// one of the site's users (one added since the entry was read) is
// forgotten, with its verified passwords, and nil returned.
func (b *Broker) entry(st *directoryState, key string) *dirEntry {
	e := st.get(key)
	if e == nil {
		return nil
	}
	if shadows(b.Snapshot(), e.user.Name, key) {
		st.drop(key)
		b.cfg.Verified.Forget(guardKey(AccountUser, key))
		b.refuseShadow(e.user.Name, e.groups.DN, "")
		return nil
	}
	b.refreshStale(st, key, e)
	return e
}

// refreshStale reads e's entry again in the background once it is older
// than the TTL, one read per user at a time. While the directory cannot
// be reached the last read stands; an account the directory no longer
// lets log on is forgotten, with its verified passwords.
func (b *Broker) refreshStale(st *directoryState, key string, e *dirEntry) {
	if b.cfg.Now().Sub(e.read) < st.ttl || !e.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer e.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		id, err := st.dir.Lookup(ctx, e.user.Name)
		switch {
		case err == nil:
			st.put(key, id, b.cfg.Now(), b.cfg.Verified, guardKey(AccountUser, key))
		case site.ErrorCode(err) == site.EUnavailable:
			b.log.Debug("directory user not read again: the directory cannot be reached; the last read stands", "user", e.user.Name, "err", err)
		default:
			b.log.Info("directory user may no longer log on; forgotten", "user", e.user.Name, "why", err)
			st.drop(key)
			b.cfg.Verified.Forget(guardKey(AccountUser, key))
		}
	}()
}

func (st *directoryState) get(key string) *dirEntry {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.users[key]
}

// put remembers id as read at now, and returns its entry. When the
// password changed since the last read, the passwords verified before are
// forgotten.
func (st *directoryState) put(key string, id DirectoryUser, now time.Time, verified *auth.VerifiedCache, gkey string) *dirEntry {
	e := &dirEntry{
		user: &site.User{Name: id.Name, DisplayName: id.DisplayName,
			Directory: "directory\x00" + id.DN + "\x00" + id.PasswordChanged},
		groups: id, read: now,
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if old := st.users[key]; old != nil && old.user.Directory != e.user.Directory {
		verified.Forget(gkey)
	}
	if _, ok := st.users[key]; !ok && len(st.users) >= maxDirectoryUsers {
		maps.DeleteFunc(st.users, func(_ string, e *dirEntry) bool { return now.Sub(e.read) >= st.ttl })
		if len(st.users) >= maxDirectoryUsers {
			clear(st.users)
		}
	}
	st.users[key] = e
	return e
}

func (st *directoryState) drop(key string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.users, key)
}

// User returns the user name stands for: one of the site's, or one of
// its directory's (read from the directory when the broker has not read
// the entry yet). It returns ErrBadCredentials when there is no such
// user, or when the user is disabled; ErrDirectoryUnavailable when only
// the directory could tell. A directory user's Directory field is set.
func (b *Broker) User(ctx context.Context, name string) (*site.User, error) {
	if u, ok := b.Snapshot().User(name); ok {
		if u.Disabled {
			return nil, ErrBadCredentials
		}
		return u, nil
	}
	u, err := b.directoryUser(ctx, name)
	if err != nil {
		return nil, err
	}
	if u == nil {
		return nil, ErrBadCredentials
	}
	return u, nil
}

// EntitlementsOf resolves what user may use in s: a site user's
// entitlements, or a directory user's through the site groups that their
// directory groups stand for (see Snapshot.DirectoryGroups), as last read.
// Unknown users get nothing.
func (b *Broker) EntitlementsOf(s *Snapshot, user string) *Entitlements {
	u, ok := s.User(user)
	if !ok {
		if e := b.directoryEntry(user); e != nil {
			return s.EntitlementsOfMember(e.user.Name, s.DirectoryGroups(e.groups.Groups, e.groups.GroupDNs))
		}
	}
	return s.entitlementsOf(u, ok)
}

// LogonName returns the name to authenticate for a user name as typed
// ("user", "DOMAIN\user" or "user@domain") and a domain given beside it
// (NFuse's Domain element; "" for none). A domain that is the site's own
// (Settings.Domain, in any case) names one of the site's users or the
// directory's by their bare name; any other is kept, in the form
// DOMAIN\user or user@domain, for the site's directory to take or refuse.
// It returns "" for a name that names no one: no user, a DOMAIN\user
// whose domain disagrees with the one beside it, and a name qualified
// twice (a user of DOMAIN\user holding a backslash, a bare user holding
// a backslash or an "@", a domain beside holding a backslash), which
// would otherwise be read again as another user. A name it returns is
// its own logon name: LogonName(siteDomain, name, "") == name.
func LogonName(siteDomain, typed, domain string) string {
	user, given, at := typed, "", false
	if d, u, ok := strings.Cut(typed, `\`); ok {
		if domain != "" && !strings.EqualFold(domain, d) {
			return "" // two domains that disagree
		}
		if strings.Contains(u, `\`) {
			return "" // DOMAIN\DOMAIN\user
		}
		user, given = u, d
	} else if i := strings.LastIndexByte(typed, '@'); i >= 0 {
		user, given, at = typed[:i], typed[i+1:], true
	} else {
		if strings.Contains(domain, `\`) {
			return ""
		}
		given = domain
	}
	switch {
	case user == "":
		return ""
	case given == "" || strings.EqualFold(given, siteDomain):
		if strings.ContainsAny(user, `\@`) {
			return "" // DOMAIN\user@domain, user@domain@DOMAIN
		}
		return user
	case at:
		return user + "@" + given
	}
	return given + `\` + user
}

// CloseDirectory closes the site's directory, for a broker that stops:
// directory users can no longer log on through it.
func (b *Broker) CloseDirectory() {
	if st := b.dir.Load(); st != nil && st.dir != nil {
		st.dir.Close()
	}
}

// DirectoryAdmin reports whether u, a directory user the broker returned,
// belongs (directly or through nesting, as last read) to one of the
// directory's admin groups (site.Directory.AdminGroups: names match a
// group's cn in any case, DNs as NormalizeDN has them).
func (b *Broker) DirectoryAdmin(u *site.User) bool {
	if u == nil || u.Directory == "" {
		return false
	}
	st, key, ok := b.directory(u.Name)
	if !ok {
		return false
	}
	e := b.entry(st, key)
	if e == nil || e.user.Directory != u.Directory {
		return false
	}
	for _, g := range st.settings.AdminGroups {
		if strings.Contains(g, "=") {
			if slices.ContainsFunc(e.groups.GroupDNs, func(dn string) bool { return NormalizeDN(dn) == NormalizeDN(g) }) {
				return true
			}
		} else if slices.ContainsFunc(e.groups.Groups, func(n string) bool { return site.FoldName(n) == site.FoldName(g) }) {
			return true
		}
	}
	return false
}

// DirectoryName reports whether name may be one of the site directory's
// users (whether Authenticate would ask the directory, were name none of
// the site's users).
func (b *Broker) DirectoryName(name string) bool {
	_, _, ok := b.directory(name)
	return ok
}
