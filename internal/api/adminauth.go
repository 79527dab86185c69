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
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		claims, err := s.cfg.Signer.Verify(strings.TrimSpace(token), AdminAudience)
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
