package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/usher-vdi/usher/internal/auth/ldapauth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

// directoryCmd runs the directory subcommands: only "test" so far.
func (m *Main) directoryCmd(ctx context.Context, args []string) error {
	const usage = "test USER [--password-stdin] [--data DIR | --db URL]"
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help") {
		m.subUsage(args, "directory", usage+"\n\nRun 'usher directory test -h' for its flags.")
		return flag.ErrHelp
	}
	if len(args) == 0 || args[0] != "test" {
		return usageError{"usage: usher directory " + usage}
	}
	return m.directoryTest(ctx, args[1:])
}

// directoryTest shows what usher sees of a user in the site's directory:
// the entry, the account's state, the groups (nested ones included), the
// site groups they match by name and what the user may then use. With
// --password-stdin it checks the password too; the password is never
// printed.
func (m *Main) directoryTest(ctx context.Context, args []string) error {
	fs := m.flagSet("directory test", "USER [--password-stdin] [--data DIR | --db URL]")
	data := m.dataFlag(fs)
	db := m.dbFlag(fs)
	fromStdin := fs.Bool("password-stdin", false, "check USER's password too, read from standard input (it is never printed)")
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"directory test needs a USER (user, DOMAIN\\user or user@suffix)"}
	}
	name := fs.Arg(0)
	password := ""
	if *fromStdin {
		var err error
		if password, err = m.passwordLine(); err != nil {
			return err
		}
		if password == "" {
			return usageError{"--password-stdin: standard input holds no password"}
		}
	}
	store, err := m.openSiteDB(ctx, *data, *db, mustExist)
	if err != nil {
		return err
	}
	defer store.Close()
	var cfg *site.Config
	var version int64
	if err := store.View(ctx, func(tx site.Tx) (err error) {
		if cfg, err = site.LoadConfig(ctx, tx); err != nil {
			return err
		}
		version, err = tx.ConfigVersion(ctx)
		return err
	}); err != nil {
		return err
	}
	if !cfg.Directory.Enabled {
		return errors.New("the site's directory is not enabled: describe it in the site file's directory: section (usher apply) or with PUT /api/v1/admin/directory")
	}
	log := slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir, err := ldapauth.New(ldapauth.ConfigFrom(cfg.Directory), log, nil)
	if err != nil {
		return fmt.Errorf("the site's directory settings: %w", err)
	}
	defer dir.Close()
	if err := dir.Check(ctx); err != nil {
		return err
	}
	var id ldapauth.Identity
	if *fromStdin {
		id, err = dir.Authenticate(ctx, name, password)
	} else {
		id, err = dir.Lookup(ctx, name)
	}
	state := "enabled"
	switch {
	case err == nil:
	case errors.Is(err, ldapauth.ErrAccountDisabled):
		state = "disabled: logons are refused (NFuse account-disabled)"
	case errors.Is(err, ldapauth.ErrAccountLocked):
		state = "locked out: logons are refused (NFuse account-locked-out)"
	case errors.Is(err, ldapauth.ErrPasswordExpired):
		state = "password expired: logons are refused until it is changed"
	default:
		return fmt.Errorf("%s: %w", name, err)
	}
	if id.DN == "" {
		return fmt.Errorf("%s: %w", name, err)
	}
	w := m.Stdout
	fmt.Fprintf(w, "user:         %s\n", id.Name)
	fmt.Fprintf(w, "entry:        %s\n", id.DN)
	fmt.Fprintf(w, "display name: %s\n", id.DisplayName)
	fmt.Fprintf(w, "account:      %s\n", state)
	switch {
	case !*fromStdin:
		fmt.Fprintf(w, "password:     not checked (--password-stdin checks it)\n")
	case err == nil:
		fmt.Fprintf(w, "password:     right\n")
	}
	fmt.Fprintf(w, "groups (%d, nested ones included):\n", len(id.Groups))
	for i, g := range id.Groups {
		fmt.Fprintf(w, "  %s (%s)\n", g, id.GroupDNs[i])
	}
	// A site group stands for a directory group by its DN when it has
	// one, else by name (as account names match: in any case).
	snap := broker.NewSnapshot(version, cfg)
	matched := snap.DirectoryGroups(id.Groups, id.GroupDNs)
	fmt.Fprintf(w, "site groups (%d): %s\n", len(matched), strings.Join(matched, ", "))
	e := snap.EntitlementsOfMember(id.Name, matched)
	fmt.Fprintf(w, "may use (%d):\n", len(e.Resources))
	for _, r := range e.Resources {
		fmt.Fprintf(w, "  %s (%s %s)\n", r.DisplayName, r.Kind, r.Name)
	}
	return nil
}
