package api

import (
	"context"
	"crypto/hmac"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

// AdminAudience is the token audience of the admin API. User tokens carry
// another audience, so they never open the admin API.
const AdminAudience = "admin"

type adminKey struct{}

// adminCaller is an authenticated admin: the name, and the expiry of the
// bearer token the admin came with (zero for a password).
type adminCaller struct {
	name    string
	expires time.Time
	// credential is what the admin's tokens are bound to: an admin
	// account's password hash, a directory admin's site.User.Credential.
	credential string
}

func withAdmin(ctx context.Context, a adminCaller) context.Context {
	return context.WithValue(ctx, adminKey{}, a)
}

// adminFrom returns the authenticated admin's name.
func adminFrom(ctx context.Context) string {
	a, _ := ctx.Value(adminKey{}).(adminCaller)
	return a.name
}

// adminCredential returns what the authenticated admin's tokens are
// bound to.
func adminCredential(ctx context.Context) string {
	a, _ := ctx.Value(adminKey{}).(adminCaller)
	return a.credential
}

// adminActor is the authenticated admin as the change history names the
// author of a change.
func adminActor(ctx context.Context) string { return site.AdminActor(adminFrom(ctx)) }

// adminTokenExpiry returns the expiry of the token the admin came with,
// zero when the admin gave a password.
func adminTokenExpiry(ctx context.Context) time.Time {
	a, _ := ctx.Value(adminKey{}).(adminCaller)
	return a.expires
}

var errUnauthorized = site.Errorf(site.EUnauthorized, "authentication required")

// authenticate checks the caller against the route's AuthKind and returns
// the request with the caller in its context.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, kind AuthKind) (*http.Request, error) {
	switch kind {
	case AuthNone:
		return r, nil
	case AuthUser:
		user, err := s.authenticateUser(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="usher"`)
			return r, err
		}
		return r.WithContext(withUser(r.Context(), user)), nil
	case AuthVDA:
		caller, err := s.authenticateVDA(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="usher vda"`)
			return r, err
		}
		return r.WithContext(withMachine(r.Context(), caller)), nil
	default:
		admin, err := s.authenticateAdmin(r)
		if err != nil {
			// No Basic challenge: a browser would prompt, then resend the
			// credentials with requests that other sites' pages make.
			w.Header().Set("WWW-Authenticate", `Bearer realm="usher admin"`)
			return r, err
		}
		return r.WithContext(withAdmin(r.Context(), admin)), nil
	}
}

// bearer returns the request's bearer token, or "".
func bearer(r *http.Request) string {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(token)
}

// authenticateAdmin accepts HTTP basic credentials of an admin account or an
// admin bearer token issued under the admin's current password. Password
// checks are reserved with the guard, as users' are: an admin account
// locks out, and a source that fails too often is throttled (an
// EOverloaded error, before any check). Every other failure, a locked
// account's included, is the same bare 401; the log tells which.
// checkAdminPassword runs verify under the lock-out's reservations: the
// broker's (site-wide where the brokers share it), or this server's guard
// when it has no broker.
func (s *Server) checkAdminPassword(ctx context.Context, name, source string, verify func() bool) (bool, error) {
	if s.cfg.Broker != nil {
		return s.cfg.Broker.CheckPassword(ctx, broker.AccountAdmin, name, source, verify)
	}
	key := lockoutAdmin + "\x00" + name
	at, err := s.cfg.Guard.Reserve(key, source)
	if err != nil {
		return false, err
	}
	if !verify() {
		if at.Fail() {
			s.cfg.Verified.Forget(key)
			s.log.WarnContext(ctx, "admin locked out after failed logons", "admin", name, "remote", source)
		}
		return false, nil
	}
	if err := at.Succeed(); err != nil {
		s.cfg.Verified.Forget(key)
		return false, err
	}
	return true, nil
}

func (s *Server) authenticateAdmin(r *http.Request) (adminCaller, error) {
	ctx := r.Context()
	if name, password, ok := r.BasicAuth(); ok {
		source := clientIP(r)
		var hash string
		err := s.cfg.Store.View(ctx, func(tx site.Tx) error {
			a, err := tx.Admins().Get(ctx, name)
			if err == nil {
				name = a.Name // as stored: one lock-out whatever the case typed
			}
			hash = a.PasswordHash
			return err
		})
		switch site.ErrorCode(err) {
		case "":
		case site.ENotFound:
			if s.cfg.Broker != nil && s.cfg.Broker.DirectoryName(name) {
				return s.directoryAdmin(ctx, name, password, source)
			}
			at, err := s.cfg.Guard.Reserve("", source)
			if err != nil {
				return adminCaller{}, s.adminRefused(ctx, name, source, err)
			}
			s.cfg.Verified.Decoy(s.dummyHash, password) // same cost as a wrong password
			at.Fail()
			return adminCaller{}, errUnauthorized
		default:
			return adminCaller{}, err
		}
		key := lockoutAdmin + "\x00" + name
		verified := false
		ok, err := s.checkAdminPassword(ctx, name, source, func() bool {
			verified = true
			ok, _ := s.cfg.Verified.Verify(key, password, hash)
			return ok
		})
		if err != nil {
			if errors.Is(err, auth.ErrLocked) && !verified {
				s.cfg.Verified.Decoy(hash, password) // a refusal costs what a check does
			}
			return adminCaller{}, s.adminRefused(ctx, name, source, err)
		}
		if !ok {
			s.log.InfoContext(ctx, "admin authentication failed", "admin", name, "remote", r.RemoteAddr)
			return adminCaller{}, errUnauthorized
		}
		return adminCaller{name: name, credential: hash}, nil
	}
	token := bearer(r)
	if token == "" {
		if c, err := r.Cookie(AdminCookieName); err == nil {
			token = c.Value
		}
	}
	if token != "" {
		claims, err := s.cfg.Signer.Verify(token, AdminAudience)
		if err != nil {
			return adminCaller{}, errUnauthorized
		}
		var hash string
		err = s.cfg.Store.View(ctx, func(tx site.Tx) error {
			a, err := tx.Admins().Get(ctx, claims.Subject)
			hash = a.PasswordHash
			return err
		})
		switch site.ErrorCode(err) {
		case "":
		case site.ENotFound: // a directory admin, or an admin deleted after the token was issued
			u, err := s.directoryAdminUser(ctx, claims.Subject)
			if err != nil {
				return adminCaller{}, err
			}
			hash = u.Credential()
		default:
			return adminCaller{}, err
		}
		if !hmac.Equal([]byte(claims.Stamp), []byte(s.cfg.Signer.Stamp(hash))) {
			return adminCaller{}, errUnauthorized // issued under an older password
		}
		return adminCaller{name: claims.Subject, expires: claims.Expires, credential: hash}, nil
	}
	return adminCaller{}, errUnauthorized
}

// directoryAdmin authenticates name, one of the directory's users, as an
// admin: a member of one of the directory's admin groups. The password
// check is a user logon's (Broker.Authenticate: the same lock-out and
// verified cache); a right password of a user in no admin group is the
// same bare 401 as a wrong one.
func (s *Server) directoryAdmin(ctx context.Context, name, password, source string) (adminCaller, error) {
	u, err := s.cfg.Broker.Authenticate(ctx, name, password, source)
	switch {
	case errors.Is(err, broker.ErrThrottled), site.ErrorCode(err) == site.EUnavailable:
		return adminCaller{}, err
	case err != nil:
		s.log.InfoContext(ctx, "directory admin authentication failed", "admin", name, "remote", source, "why", err)
		return adminCaller{}, errUnauthorized
	case !s.cfg.Broker.DirectoryAdmin(u):
		s.log.InfoContext(ctx, "directory user refused on the admin API: in no admin group", "user", u.Name, "remote", source)
		return adminCaller{}, errUnauthorized
	}
	if shadowed, err := s.siteAdminNamed(ctx, u.Name); err != nil || shadowed {
		if shadowed {
			s.log.WarnContext(ctx, "directory admin refused: a site admin has the name; a directory user never shares it", "user", u.Name, "remote", source)
			return adminCaller{}, errUnauthorized
		}
		return adminCaller{}, err
	}
	return adminCaller{name: u.Name, credential: u.Credential()}, nil
}

// siteAdminNamed reports whether one of the site's admin accounts has
// name (as the site DB matches admin names): a directory admin of that
// name would act, and be audited, as the site's admin.
func (s *Server) siteAdminNamed(ctx context.Context, name string) (bool, error) {
	err := s.cfg.Store.View(ctx, func(tx site.Tx) error {
		_, err := tx.Admins().Get(ctx, name)
		return err
	})
	switch site.ErrorCode(err) {
	case "":
		return true, nil
	case site.ENotFound:
		return false, nil
	}
	return false, err
}

// directoryAdminUser returns the directory admin a token names, or
// errUnauthorized when it names none (no such directory user, one in no
// admin group, or an admin account deleted since).
func (s *Server) directoryAdminUser(ctx context.Context, name string) (*site.User, error) {
	if s.cfg.Broker == nil || !s.cfg.Broker.DirectoryName(name) {
		return nil, errUnauthorized
	}
	u, err := s.cfg.Broker.User(ctx, name)
	switch {
	case site.ErrorCode(err) == site.EUnavailable:
		return nil, err
	case err != nil || !s.cfg.Broker.DirectoryAdmin(u):
		return nil, errUnauthorized
	}
	return u, nil
}

// adminRefused logs a guard's refusal and returns what the client is told:
// a bare 401 for a locked account, retry later for a throttled source.
func (s *Server) adminRefused(ctx context.Context, name, source string, err error) error {
	var throttled *auth.ThrottledError
	if errors.As(err, &throttled) {
		s.log.InfoContext(ctx, "admin authentication refused: source throttled", "admin", name, "remote", source, "retry_after", throttled.RetryAfter)
		return &broker.ThrottledError{RetryAfter: throttled.RetryAfter}
	}
	s.log.InfoContext(ctx, "admin authentication refused: account locked out", "admin", name, "remote", source)
	return errUnauthorized
}
