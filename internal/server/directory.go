package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/usher-vdi/usher/internal/auth/ldapauth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

// directoryCheckTimeout bounds the check of a directory's servers made
// when its settings are opened.
const directoryCheckTimeout = 30 * time.Second

// openDirectory returns the broker's OpenDirectory: an LDAP directory
// (ldapauth) for the site's settings. Opening does no I/O; a check of
// every server runs beside it and logs what does not work, naming the
// server (never the bind password), so that a directory misconfigured or
// down is told at start and at every change of its settings.
func openDirectory(log *slog.Logger, metrics ldapauth.Metrics) broker.OpenDirectory {
	log = log.With("component", "directory")
	return func(settings site.Directory) (broker.Directory, error) {
		d, err := ldapauth.New(ldapauth.ConfigFrom(settings), log, metrics)
		if err != nil {
			return nil, err
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), directoryCheckTimeout)
			defer cancel()
			if err := d.Check(ctx); err != nil {
				log.Error("the site's directory does not answer as configured: directory users cannot log on until it does", "err", err)
				return
			}
			log.Info("the site's directory answers", "servers", settings.Servers)
		}()
		return ldapDirectory{d}, nil
	}
}

// ldapDirectory is an ldapauth.Directory as the broker sees it.
type ldapDirectory struct{ d *ldapauth.Directory }

func (l ldapDirectory) Key(name string) (string, bool) {
	k, err := l.d.Key(name)
	return k, err == nil
}

func (l ldapDirectory) Authenticate(ctx context.Context, name, password string) (broker.DirectoryUser, error) {
	id, err := l.d.Authenticate(ctx, name, password)
	return directoryUser(id), directoryErr(err)
}

func (l ldapDirectory) Lookup(ctx context.Context, name string) (broker.DirectoryUser, error) {
	id, err := l.d.Lookup(ctx, name)
	return directoryUser(id), directoryErr(err)
}

func (l ldapDirectory) Close() error { return l.d.Close() }

func directoryUser(id ldapauth.Identity) broker.DirectoryUser {
	return broker.DirectoryUser{DN: id.DN, Name: id.Name, DisplayName: id.DisplayName,
		Groups: id.Groups, GroupDNs: id.GroupDNs, PasswordChanged: id.PasswordChanged}
}

// directoryErr maps ldapauth's errors onto the broker's. A name that
// matches several entries, or an entry of another name (a matching rule
// that differs from usher's normalisation), is refused as a wrong
// password (ldapauth logs the entries); anything unforeseen is an unavailable directory, and
// keeps its text for the log.
func directoryErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ldapauth.ErrWrongCredentials), errors.Is(err, ldapauth.ErrNotFound), errors.Is(err, ldapauth.ErrAmbiguous),
		errors.Is(err, ldapauth.ErrNameMismatch):
		return broker.ErrBadCredentials
	case errors.Is(err, ldapauth.ErrAccountDisabled):
		return broker.ErrAccountDisabled
	case errors.Is(err, ldapauth.ErrAccountLocked):
		return broker.ErrDirectoryLocked
	case errors.Is(err, ldapauth.ErrPasswordExpired):
		return broker.ErrPasswordExpired
	}
	return fmt.Errorf("%w (%v)", broker.ErrDirectoryUnavailable, err)
}
