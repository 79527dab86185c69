package ldapauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-ldap/ldap/v3"

	"github.com/usher-vdi/usher/internal/auth"
)

// Directory authenticates users against the configured servers. It is
// safe for concurrent use. New does no I/O; connections are opened when
// needed and kept, up to Config.PoolSize per server, until Close.
type Directory struct {
	cfg     Config
	log     *slog.Logger
	metrics Metrics
	servers []*server
	cache   groupCache
	decoyDN string // bound to when the user is unknown, so that both cases cost a bind
	closed  atomic.Bool

	// traceFilter, when set (by tests, before any call), is given the
	// filter of every search sent.
	traceFilter func(string)
}

// New returns a Directory for cfg, or an error saying what in cfg is
// wrong. A nil log discards; nil metrics record nothing.
func New(cfg Config, log *slog.Logger, metrics Metrics) (*Directory, error) {
	cfg = cfg.withDefaults()
	eps, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if metrics == nil {
		metrics = nopMetrics{}
	}
	d := &Directory{
		cfg:     cfg,
		log:     log,
		metrics: metrics,
		cache:   groupCache{ttl: cfg.GroupCacheTTL, m: map[string]cachedGroups{}},
		decoyDN: "cn=usher-no-such-user," + cfg.BaseDNs[0],
	}
	for _, ep := range eps {
		d.servers = append(d.servers, newServer(d, ep))
	}
	return d, nil
}

// Close closes every idle connection; connections in use close when their
// operation ends. Calls after Close return ErrUnavailable.
func (d *Directory) Close() error {
	d.closed.Store(true)
	for _, s := range d.servers {
		s.close()
	}
	return nil
}

// Authenticate checks name's password and returns the user's identity and
// groups. name is user, DOMAIN\user or user@suffix (see Config.Domain and
// Config.UPNSuffix). It returns ErrWrongCredentials for an unknown user or
// a wrong password alike; ErrAccountDisabled, ErrAccountLocked or
// ErrPasswordExpired for an account that may not log on (reported only
// once the password is right, unless the server itself refuses the bind
// for that reason); ErrAmbiguous when the name matches several entries;
// and ErrUnavailable when no server could answer.
func (d *Directory) Authenticate(ctx context.Context, name, password string) (Identity, error) {
	value, err := logonValue(name, d.cfg.UserAttr, d.cfg.Domain, d.cfg.UPNSuffix)
	if err != nil || password == "" { // an empty password would be an unauthenticated bind (RFC 4513 5.1.2)
		return Identity{}, ErrWrongCredentials
	}
	id, err := d.failover(ctx, func(s *server) (Identity, error) { return d.logon(ctx, s, value, password) })
	if err != nil {
		return Identity{}, err
	}
	return id, nil
}

// Key returns the key of the entry name reaches, auth.NameKey of what it
// is looked up by (see Config.UserAttr): the same for every form of one
// user's name (user, DOMAIN\user, user@suffix) and every spelling the
// directory matches to the entry (case, width, spaces), since Authenticate
// and Lookup refuse an entry whose user attribute has another key
// (ErrNameMismatch). It returns ErrWrongCredentials when name cannot be
// one of the directory's users. It does no I/O.
func (d *Directory) Key(name string) (string, error) {
	v, err := logonValue(name, d.cfg.UserAttr, d.cfg.Domain, d.cfg.UPNSuffix)
	if err != nil {
		return "", err
	}
	return auth.NameKey(v), nil
}

// Lookup returns name's identity and groups without a password, for an
// administrator's diagnosis. It returns ErrNotFound for an unknown name,
// and the Identity together with ErrAccountDisabled, ErrAccountLocked or
// ErrPasswordExpired for an account that could not log on; otherwise as
// Authenticate.
func (d *Directory) Lookup(ctx context.Context, name string) (Identity, error) {
	value, err := logonValue(name, d.cfg.UserAttr, d.cfg.Domain, d.cfg.UPNSuffix)
	if err != nil {
		return Identity{}, ErrNotFound
	}
	return d.failover(ctx, func(s *server) (Identity, error) { return d.lookup(ctx, s, value) })
}

// Check connects to every server, binds as the service account and reads
// its root DSE. It returns nil when all of them work, else an error naming
// each server that does not and why (never the bind password).
func (d *Directory) Check(ctx context.Context) error {
	var errs []error
	for _, s := range d.servers {
		err := s.withConn(ctx, true, func(c *conn) error {
			_, err := c.rootDSE(ctx)
			return err
		})
		if err != nil {
			errs = append(errs, asDown(s, err))
		}
	}
	return errors.Join(errs...)
}

// failover runs f on each usable server in order until one answers (with
// success or with an answer about the user), marking the ones that fail
// down for their backoff. When none answers it returns an
// *UnavailableError, which is ErrUnavailable.
func (d *Directory) failover(ctx context.Context, f func(*server) (Identity, error)) (Identity, error) {
	if d.closed.Load() {
		return Identity{}, fmt.Errorf("%w: the directory is closed", ErrUnavailable)
	}
	var errs []error
	now := time.Now()
	for _, s := range d.servers {
		if err := s.usable(now); err != nil {
			errs = append(errs, err)
			continue
		}
		id, err := f(s)
		if err == nil || !unavailable(err) {
			s.ok()
			return id, err
		}
		if ctx.Err() != nil {
			return Identity{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
		err = asDown(s, err)
		s.failed(err)
		errs = append(errs, err)
	}
	return Identity{}, &UnavailableError{Errs: errs}
}

// UnavailableError is what Authenticate and Lookup return when no server
// answered: why, for each server. errors.Is(err, ErrUnavailable) holds.
type UnavailableError struct {
	Errs []error
}

func (e *UnavailableError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return ErrUnavailable.Error() + ": " + strings.Join(msgs, "; ")
}

func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }
func (e *UnavailableError) Unwrap() []error      { return e.Errs }

// downError is why a server could not be used; its text starts with the
// server's URL.
type downError struct {
	url string
	err error
}

func (e *downError) Error() string { return e.url + ": " + e.err.Error() }
func (e *downError) Unwrap() error { return e.err }

func asDown(s *server, err error) error {
	var de *downError
	if errors.As(err, &de) {
		return err
	}
	return &downError{url: s.url, err: err}
}

// The attributes read from a user's entry.
const (
	attrDisplayName   = "displayName"
	attrUAC           = "userAccountControl"
	attrLockoutTime   = "lockoutTime"
	attrPwdLastSet    = "pwdLastSet"
	attrAcctExpires   = "accountExpires"
	attrPPolicyLocked = "pwdAccountLockedTime"
	// attrPwdChanged is OpenLDAP ppolicy's operational attribute, set
	// when the password changes (AD's is pwdLastSet).
	attrPwdChanged = "pwdChangedTime"
)

// findUser returns the one entry whose user attribute equals value, nil
// when there is none, ErrAmbiguous for several, or ErrNameMismatch for
// one whose user attribute (its first value, the Identity's Name) has
// another key than value (auth.NameKey): the directory's matching rule
// then differs from usher's, and usher refuses rather than guess which
// logons are of one account.
func (d *Directory) findUser(ctx context.Context, s *server, value string) (*ldap.Entry, error) {
	filter := "(" + d.cfg.UserAttr + "=" + ldap.EscapeFilter(value) + ")"
	if d.cfg.UserFilter != "" {
		filter = "(&" + filter + d.cfg.UserFilter + ")"
	}
	attrs := []string{d.cfg.UserAttr, attrDisplayName, "cn", attrUAC, attrLockoutTime, attrPwdLastSet, attrAcctExpires, attrPPolicyLocked, attrPwdChanged}
	var found []*ldap.Entry
	for _, base := range d.cfg.BaseDNs {
		req := ldap.NewSearchRequest(base, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases, 2, 0, false, filter, attrs, nil)
		var entries []*ldap.Entry
		err := s.withConn(ctx, true, func(c *conn) (err error) {
			entries, err = c.search(ctx, OpUserSearch, req)
			return err
		})
		if err != nil && !(ldap.IsErrorWithCode(err, ldap.LDAPResultSizeLimitExceeded) && len(entries) > 1) &&
			!ldap.IsErrorWithCode(err, ldap.LDAPResultNoSuchObject) {
			return nil, fmt.Errorf("find user: %w", err)
		}
		found = append(found, entries...)
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		if got := found[0].GetEqualFoldAttributeValue(d.cfg.UserAttr); auth.NameKey(got) != auth.NameKey(value) {
			d.log.Warn("ldap matched a user name to an entry whose name usher does not take as the same (the directory's matching rule differs from usher's normalisation); refused",
				"name", value, "attribute", d.cfg.UserAttr, "dn", found[0].DN, "entry_name", got)
			return nil, ErrNameMismatch
		}
		return found[0], nil
	}
	dns := make([]string, len(found))
	for i, e := range found {
		dns[i] = e.DN
	}
	d.log.Warn("ldap user name matches several entries; refused", "name", value, "attribute", d.cfg.UserAttr, "dns", dns)
	return nil, ErrAmbiguous
}

// logon checks value's password on s and returns the identity.
func (d *Directory) logon(ctx context.Context, s *server, value, password string) (Identity, error) {
	entry, err := d.findUser(ctx, s, value)
	if err != nil {
		return Identity{}, err
	}
	dn := d.decoyDN
	if entry != nil {
		dn = entry.DN
	}
	err = d.bindUser(ctx, s, dn, password)
	switch {
	case err != nil && unavailable(err):
		return Identity{}, err
	case entry == nil:
		return Identity{}, ErrWrongCredentials
	case errors.Is(err, ErrWrongCredentials) && entry.GetEqualFoldAttributeValue(attrPPolicyLocked) != "":
		return Identity{}, ErrAccountLocked // ppolicy refused the bind of a locked account
	case err != nil:
		return Identity{}, err
	}
	if err := accountState(entry, true, time.Now()); err != nil {
		return Identity{}, err
	}
	return d.identity(ctx, s, entry)
}

// lookup returns value's identity on s, with its account state as the
// error.
func (d *Directory) lookup(ctx context.Context, s *server, value string) (Identity, error) {
	entry, err := d.findUser(ctx, s, value)
	if err != nil {
		return Identity{}, err
	}
	if entry == nil {
		return Identity{}, ErrNotFound
	}
	id, err := d.identity(ctx, s, entry)
	if err != nil {
		return Identity{}, err
	}
	return id, accountState(entry, false, time.Now())
}

// identity completes entry's Identity with its groups.
func (d *Directory) identity(ctx context.Context, s *server, entry *ldap.Entry) (Identity, error) {
	id := Identity{
		DN:          entry.DN,
		Name:        entry.GetEqualFoldAttributeValue(d.cfg.UserAttr),
		DisplayName: entry.GetEqualFoldAttributeValue(attrDisplayName),
	}
	if id.DisplayName == "" {
		id.DisplayName = entry.GetEqualFoldAttributeValue("cn")
	}
	if last, changed := entry.GetEqualFoldAttributeValue(attrPwdLastSet), entry.GetEqualFoldAttributeValue(attrPwdChanged); last+changed != "" {
		id.PasswordChanged = last + "|" + changed
	}
	if id.DisplayName == "" {
		id.DisplayName = id.Name
	}
	var err error
	id.Groups, id.GroupDNs, err = d.groups(ctx, s, entry.DN)
	if err != nil {
		return Identity{}, err
	}
	return id, nil
}

// bindUser checks password by binding as dn, on a connection that need not
// be the service account's. It returns ErrWrongCredentials,
// ErrAccountLocked, ErrPasswordExpired or ErrAccountDisabled when the
// server refuses and says why (AD's "data NNN", ppolicy's response
// control).
func (d *Directory) bindUser(ctx context.Context, s *server, dn, password string) error {
	var res *ldap.SimpleBindResult
	err := s.withConn(ctx, false, func(c *conn) error {
		c.service = false // whatever the outcome, c is no longer bound as the service account
		return c.do(ctx, OpUserBind, func() (err error) {
			res, err = c.l.SimpleBind(&ldap.SimpleBindRequest{
				Username: dn, Password: password,
				Controls: []ldap.Control{ldap.NewControlBeheraPasswordPolicy()},
			})
			return err
		})
	})
	if err == nil || unavailable(err) {
		return err
	}
	if !ldap.IsErrorWithCode(err, ldap.LDAPResultInvalidCredentials) {
		return fmt.Errorf("bind as user: %w", err)
	}
	if res != nil {
		for _, ctl := range res.Controls {
			if pp, ok := ctl.(*ldap.ControlBeheraPasswordPolicy); ok {
				switch pp.Error {
				case 0, 2: // passwordExpired, changeAfterReset
					return ErrPasswordExpired
				case 1: // accountLocked
					return ErrAccountLocked
				}
			}
		}
	}
	if m := adData.FindStringSubmatch(err.Error()); m != nil {
		switch strings.ToLower(m[1]) {
		case "532", "773": // password expired; must be reset
			return ErrPasswordExpired
		case "533", "701": // account disabled; account expired
			return ErrAccountDisabled
		case "775": // account locked out
			return ErrAccountLocked
		}
	}
	return ErrWrongCredentials
}

// adData finds the sub-error in AD's diagnostic message for a refused bind
// ("... AcceptSecurityContext error, data 775, v4563").
var adData = regexp.MustCompile(`\bdata ([0-9a-fA-F]{3,8})\b`)

// accountState returns the error for an account that may not log on,
// from AD's attributes: userAccountControl's ACCOUNTDISABLE bit (0x2),
// accountExpires in the past, a non-zero lockoutTime, pwdLastSet 0 (must
// change). After a successful bind, ppolicy's pwdAccountLockedTime is
// ignored (the overlay found the lock-out over); without a bind (Lookup),
// its presence means locked.
func accountState(e *ldap.Entry, bound bool, now time.Time) error {
	attr := e.GetEqualFoldAttributeValue
	if uac, err := strconv.ParseInt(attr(attrUAC), 10, 64); err == nil && uac&0x2 != 0 {
		return ErrAccountDisabled
	}
	if exp, err := strconv.ParseInt(attr(attrAcctExpires), 10, 64); err == nil && exp > 0 && exp != 1<<63-1 {
		if now.After(fileTime(exp)) {
			return ErrAccountDisabled
		}
	}
	if lt := attr(attrLockoutTime); lt != "" && lt != "0" {
		return ErrAccountLocked
	}
	if !bound && attr(attrPPolicyLocked) != "" {
		return ErrAccountLocked
	}
	if attr(attrPwdLastSet) == "0" {
		return ErrPasswordExpired
	}
	return nil
}

// fileTime converts a Windows FILETIME (100 ns since 1601-01-01 UTC).
func fileTime(ft int64) time.Time {
	const epochDiff = 116444736000000000 // 1601 to 1970, in 100 ns
	return time.Unix(0, 0).Add(time.Duration(ft-epochDiff) * 100)
}

// withConn runs f on a connection to s (bound as the service account when
// service is true). When f fails on a connection that had been idle and
// turned out dead (the server restarted, say), it drops the idle
// connections and tries once more on a new one.
func (s *server) withConn(ctx context.Context, service bool, f func(*conn) error) error {
	for attempt := 0; ; attempt++ {
		c, err := s.acquire(ctx, service)
		if err != nil {
			return err
		}
		reused := c.reused
		err = f(c)
		s.release(c)
		if err != nil && reused && c.dead && ctx.Err() == nil && attempt == 0 {
			s.dropIdle()
			continue
		}
		return err
	}
}

// search runs req on c.
func (c *conn) search(ctx context.Context, op Op, req *ldap.SearchRequest) ([]*ldap.Entry, error) {
	if t := c.s.d.traceFilter; t != nil {
		t(req.Filter)
	}
	var res *ldap.SearchResult
	err := c.do(ctx, op, func() (err error) {
		if op == OpGroupSearch {
			res, err = c.l.SearchWithPaging(req, 500) // AD returns at most MaxPageSize (1,000) entries unpaged
		} else {
			res, err = c.l.Search(req)
		}
		return err
	})
	if res == nil {
		return nil, err
	}
	return res.Entries, err
}
