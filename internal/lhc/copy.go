package lhc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/usher-vdi/usher/internal/atomicfile"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

// CopyFile is the local copy's file name in the data directory.
const CopyFile = "local-host-cache.db"

// copiedSecrets are the site secrets a copy holds: what brokering needs.
var copiedSecrets = []string{site.SecretTokenKey, site.SecretEnrolment}

// siteState is what a copy holds, as read from the site DB.
type siteState struct {
	version     int64
	config      *site.Config
	secrets     map[string][]byte
	admins      []site.Admin
	statuses    map[string]site.MachineStatus
	credentials map[string]site.MachineCredential
	sessions    []site.Session
	brokers     []site.BrokerRecord
}

// readState reads what a copy holds from the site DB, in one View.
func readState(ctx context.Context, db site.Store) (*siteState, error) {
	st := &siteState{secrets: map[string][]byte{}}
	err := db.View(ctx, func(tx site.Tx) error {
		var err error
		if st.version, err = tx.ConfigVersion(ctx); err != nil {
			return err
		}
		if st.config, err = site.LoadConfig(ctx, tx); err != nil {
			return err
		}
		for _, name := range copiedSecrets {
			v, err := tx.Secret(ctx, name)
			switch site.ErrorCode(err) {
			case "":
				st.secrets[name] = v
			case site.ENotFound:
			default:
				return err
			}
		}
		admins, err := tx.Admins().List(ctx, site.ListOptions{})
		if err != nil {
			return err
		}
		st.admins = admins.Items
		if st.statuses, err = tx.MachineStatuses(ctx); err != nil {
			return err
		}
		if cl, ok := site.TxAs[site.CredentialLister](tx); ok {
			if st.credentials, err = cl.MachineCredentials(ctx); err != nil {
				return err
			}
		} else {
			st.credentials = map[string]site.MachineCredential{}
			for _, m := range st.config.Machines {
				if st.credentials[m.Name], err = tx.MachineCredential(ctx, m.Name); err != nil {
					return err
				}
			}
		}
		sessions, err := tx.Sessions().List(ctx, site.SessionFilter{Live: true}, site.ListOptions{})
		if err != nil {
			return err
		}
		st.sessions = sessions.Items
		brokers, err := tx.Brokers().List(ctx, site.ListOptions{})
		st.brokers = brokers.Items
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the site for the local copy: %w", err)
	}
	return st, nil
}

// writeCopy writes st into a new copy at tmp: put over the last copy
// (replace, which syncs it) once whole, it leaves the last good one in place
// until then, wherever it is cut off. It takes seconds on a large site or
// a loaded machine, so it runs without holding back outage mode, which
// opens the last copy meanwhile; one runs at a time.
func writeCopy(ctx context.Context, tmp string, st *siteState, log *slog.Logger) (err error) {
	if err := removeCopy(tmp); err != nil {
		return fmt.Errorf("local copy: %w", err)
	}
	db, err := sqlitestore.Open(ctx, tmp, sqlitestore.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("local copy: %w", err)
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("local copy: %w", cerr)
		}
		if err != nil {
			removeCopy(tmp)
		}
	}()
	return db.Update(ctx, func(tx site.Tx) error {
		if b, ok := site.TxAs[site.BulkWriter](tx); ok {
			b.WriteInBulk()
		}
		if _, err := site.ApplyConfig(ctx, tx, st.config, false); err != nil {
			return fmt.Errorf("local copy: configuration: %w", err)
		}
		for name, v := range st.secrets {
			if err := tx.SetSecret(ctx, name, v); err != nil {
				return err
			}
		}
		for _, a := range st.admins {
			if err := tx.Admins().Create(ctx, a); err != nil {
				return fmt.Errorf("local copy: admin %q: %w", a.Name, err)
			}
		}
		for name, s := range st.statuses {
			if err := tx.SetMachineStatus(ctx, name, s); err != nil {
				return fmt.Errorf("local copy: status of %q: %w", name, err)
			}
		}
		for name, c := range st.credentials {
			if err := tx.SetMachineCredential(ctx, name, c); err != nil {
				return fmt.Errorf("local copy: credential of %q: %w", name, err)
			}
		}
		for _, s := range st.sessions {
			if err := tx.Sessions().Create(ctx, s); err != nil {
				return fmt.Errorf("local copy: session %s: %w", s.ID, err)
			}
		}
		for _, b := range st.brokers {
			if err := tx.Brokers().Create(ctx, b); err != nil {
				return fmt.Errorf("local copy: broker %q: %w", b.Name, err)
			}
		}
		lc, ok := tx.(site.LocalCopy)
		if !ok {
			return errors.New("local copy: the store cannot hold a copy")
		}
		return lc.SetConfigVersion(ctx, st.version)
	})
}

// removeCopy removes a SQLite file and its companions, if there.
func removeCopy(path string) error {
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// replace puts tmp, a whole copy that writeCopy wrote, in path's place,
// durably (atomicfile.Replace).
func replace(tmp, path string) error {
	if err := atomicfile.Replace(tmp, path); err != nil {
		return fmt.Errorf("local copy: %w", err)
	}
	return nil
}

// copyInfo is what a usable copy holds, read when it is opened.
type copyInfo struct {
	version   int64
	journaled []string
}

// openCopy opens the copy at path, refusing one that is missing or
// unreadable. With whole, its whole configuration is read too, as before
// serving from it: a broker must not broker from nothing. Without, only
// its version and journal are (a broker that starts on a site DB that
// answers needs no more, and a large site's copy is not read for nothing).
func openCopy(ctx context.Context, path string, log *slog.Logger, whole bool) (*sqlitestore.Store, copyInfo, error) {
	var info copyInfo
	if _, err := os.Stat(path); err != nil {
		return nil, info, fmt.Errorf("no local copy of the site at %s: %w", path, err)
	}
	db, err := sqlitestore.Open(ctx, path, sqlitestore.Options{Logger: log})
	if err != nil {
		return nil, info, fmt.Errorf("local copy %s is unusable: %w", path, err)
	}
	err = db.View(ctx, func(tx site.Tx) error {
		var err error
		if info.version, err = tx.ConfigVersion(ctx); err != nil {
			return err
		}
		if whole {
			if _, err := site.LoadConfig(ctx, tx); err != nil {
				return err
			}
		}
		if _, err := tx.Secret(ctx, site.SecretTokenKey); err != nil {
			return fmt.Errorf("token key: %w", err)
		}
		lc, ok := tx.(site.LocalCopy)
		if !ok {
			return errors.New("not a local copy")
		}
		info.journaled, err = lc.Journaled(ctx)
		return err
	})
	if err != nil {
		db.Close()
		return nil, info, fmt.Errorf("local copy %s is unusable: %w", path, err)
	}
	return db, info, nil
}
