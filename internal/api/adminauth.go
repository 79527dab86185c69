package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site"
)

// AdminAudience is the token audience of the admin API. User tokens carry
// another audience, so they never open the admin API.
const AdminAudience = "admin"

type adminKey struct{}

func withAdmin(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, adminKey{}, name)
}

// adminFrom returns the authenticated admin's name.
func adminFrom(ctx context.Context) string {
	name, _ := ctx.Value(adminKey{}).(string)
	return name
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
		machine, err := s.authenticateVDA(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="usher vda"`)
			return r, err
		}
		return r.WithContext(withMachine(r.Context(), machine)), nil
	default:
		admin, err := s.authenticateAdmin(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Basic realm="usher admin", Bearer realm="usher admin"`)
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
// admin bearer token. Every failure is the same bare 401.
func (s *Server) authenticateAdmin(r *http.Request) (string, error) {
	ctx := r.Context()
	if name, password, ok := r.BasicAuth(); ok {
		var hash string
		err := s.cfg.Store.View(ctx, func(tx site.Tx) error {
			a, err := tx.Admins().Get(ctx, name)
			hash = a.PasswordHash
			return err
		})
		switch site.ErrorCode(err) {
		case "":
		case site.ENotFound:
			auth.VerifyPassword(s.dummyHash, password) // same cost as a wrong password
			return "", errUnauthorized
		default:
			return "", err
		}
		if ok, _ := s.cfg.Verified.Verify("admin\x00"+name, password, hash); !ok {
			s.log.InfoContext(ctx, "admin authentication failed", "admin", name, "remote", r.RemoteAddr)
			return "", errUnauthorized
		}
		return name, nil
	}
	if token := bearer(r); token != "" {
		claims, err := s.cfg.Signer.Verify(token, AdminAudience)
		if err != nil {
			return "", errUnauthorized
		}
		err = s.cfg.Store.View(ctx, func(tx site.Tx) error {
			_, err := tx.Admins().Get(ctx, claims.Subject)
			return err
		})
		switch site.ErrorCode(err) {
		case "":
			return claims.Subject, nil
		case site.ENotFound: // the admin was deleted after the token was issued
			return "", errUnauthorized
		default:
			return "", err
		}
	}
	return "", errUnauthorized
}
