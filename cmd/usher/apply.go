package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"io/fs"
	"text/tabwriter"

	"github.com/usher-vdi/usher/internal/atomicfile"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/datadir"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/siteyaml"
)

func (m *Main) apply(ctx context.Context, args []string) error {
	fs := m.flagSet("apply", "-f FILE [--dry-run] [--prune] [--data DIR]\n\n"+
		"Makes the site match FILE, all or nothing. An apply that would delete objects the file leaves\n"+
		"out refuses, naming how many of each kind, unless --prune is given or it is confirmed on a terminal.")
	data := m.dataFlag(fs)
	db := m.dbFlag(fs)
	file := fs.String("f", "", "site file to apply (- for standard input)")
	dryRun := fs.Bool("dry-run", false, "print the changes without making them")
	quiet := fs.Bool("q", false, "print only the summary, not every change")
	prune := fs.Bool("prune", false, "delete the site's objects that the file leaves out (without it, an apply that would delete refuses, unless confirmed on a terminal)")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *file == "" {
		return usageError{"-f FILE is required"}
	}
	name, raw, err := m.readInput(*file)
	if err != nil {
		return err
	}
	doc, err := siteyaml.Decode(name, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	cfg := doc.Config
	if err := cfg.Validate(); err != nil {
		return doc.Annotate(err)
	}

	mode := createSiteDB
	if *dryRun {
		mode = emptyIfMissing
	}
	store, err := m.openSiteDB(ctx, *data, *db, mode)
	if err != nil {
		return err
	}
	defer store.Close()

	var plan *site.Plan
	var version int64
	run := store.Update
	if *dryRun {
		run = store.View
	}
	do := func(prune bool) error {
		return run(ctx, func(tx site.Tx) error {
			var err error
			if plan, err = site.ApplyConfig(ctx, tx, cfg, *dryRun); err != nil {
				return err
			}
			if version, err = tx.ConfigVersion(ctx); err != nil || *dryRun {
				return err
			}
			if d := deletions(plan); d != "" && !prune {
				return errWouldDelete{d} // rolls the transaction back
			}
			return site.RecordPlan(ctx, tx, site.ActorApply, plan)
		})
	}
	err = do(*prune)
	var wd errWouldDelete
	if errors.As(err, &wd) && *file != "-" && m.confirm(fmt.Sprintf("%s would delete %s; delete them? [y/N] ", name, wd.what)) {
		err = do(true)
	}
	if errors.As(err, &wd) {
		return fmt.Errorf("%s would delete %s (nothing was changed): run again with --prune, or --dry-run to see them", name, wd.what)
	}
	if err != nil {
		return fmt.Errorf("apply %s: %w (nothing was changed)", name, doc.Annotate(err))
	}
	if !*quiet {
		fmt.Fprint(m.Stdout, plan.String())
	}
	c, u, d := plan.Counts()
	if plan.Settings != nil {
		u++
	}
	if plan.Directory != nil {
		u++
	}
	switch {
	case plan.Empty():
		fmt.Fprintf(m.Stdout, "%s: the site already matches (configuration version %d)\n", name, version)
	case *dryRun:
		fmt.Fprintf(m.Stdout, "dry run: would create %d, update %d, delete %d objects\n", c, u, d)
	default:
		fmt.Fprintf(m.Stdout, "applied %s: created %d, updated %d, deleted %d objects (configuration version %d)\n", name, c, u, d, version+1)
	}
	return nil
}

// errWouldDelete refuses an apply that would delete what, without
// --prune.
type errWouldDelete struct{ what string }

func (e errWouldDelete) Error() string { return "would delete " + e.what }

// deletions says what plan deletes, counted by kind in the plan's order
// ("3 machines, 1 catalog"), or "" when it deletes nothing.
func deletions(plan *site.Plan) string {
	var kinds []site.Kind
	n := map[site.Kind]int{}
	for _, c := range plan.Changes {
		if c.Op != site.OpDelete {
			continue
		}
		if n[c.Kind] == 0 {
			kinds = append(kinds, c.Kind)
		}
		n[c.Kind]++
	}
	var parts []string
	for _, k := range kinds {
		word := strings.ReplaceAll(string(k), "-", " ")
		if n[k] != 1 {
			word += "s"
		}
		parts = append(parts, fmt.Sprintf("%d %s", n[k], word))
	}
	return strings.Join(parts, ", ")
}

// confirm asks a yes-or-no question on a terminal: true only when
// standard input is one and the answer is y or yes.
func (m *Main) confirm(question string) bool {
	f, ok := m.Stdin.(*os.File)
	if !ok {
		return false
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	fmt.Fprint(m.Stderr, question)
	line, _ := bufio.NewReader(f).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

func (m *Main) readInput(file string) (string, []byte, error) {
	if file == "-" {
		b, err := io.ReadAll(io.LimitReader(m.Stdin, 256<<20))
		return "<stdin>", b, err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return file, nil, fmt.Errorf("read site file: %w", err)
	}
	return file, b, nil
}

func (m *Main) export(ctx context.Context, args []string) error {
	fs := m.flagSet("export", "[-o FILE] [--data DIR]")
	data := m.dataFlag(fs)
	db := m.dbFlag(fs)
	out := fs.String("o", "-", "file to write (- for standard output)")
	secrets := fs.Bool("with-secrets", false, "include users' password hashes and the directory's bind password")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	store, err := m.openSiteDB(ctx, *data, *db, mustExist)
	if err != nil {
		return err
	}
	defer store.Close()
	var cfg *site.Config
	if err := store.View(ctx, func(tx site.Tx) (err error) {
		cfg, err = site.LoadConfig(ctx, tx)
		return err
	}); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := siteyaml.EncodeWith(&buf, cfg, siteyaml.EncodeOptions{WithSecrets: *secrets}); err != nil {
		return err
	}
	if *out == "-" {
		_, err := m.Stdout.Write(buf.Bytes())
		return err
	}
	return atomicfile.WriteFile(*out, buf.Bytes(), 0o600)
}

// siteDBMode says what openSiteDB does when the data directory holds no
// site DB.
type siteDBMode int

const (
	mustExist      siteDBMode = iota // fail, naming the path and how to make one
	createSiteDB                     // create an empty one
	emptyIfMissing                   // create nothing: open an empty site in a temporary directory
)

// openSiteDB opens the site DB of a data directory for a one-shot command
// (apply, export, admin), beside a running usher serve if there is one:
// SQLite's WAL lets both use it. It names the site DB on standard error,
// since the default data directory may not be the one the user means.
func (m *Main) openSiteDB(ctx context.Context, data, db string, mode siteDBMode) (*siteDB, error) {
	if db != "" {
		if err := server.CheckDB(db); err != nil {
			return nil, usageError{err.Error()}
		}
		st, where, err := server.OpenStore(ctx, server.StoreConfig{DB: db})
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(m.Stderr, "site DB: %s\n", where)
		return &siteDB{st, nil}, nil
	}
	path, err := filepath.Abs(filepath.Join(data, datadir.SiteDBFile))
	if err != nil {
		return nil, err
	}
	_, err = os.Stat(path)
	missing := errors.Is(err, fs.ErrNotExist)
	switch {
	case err != nil && !missing:
		return nil, fmt.Errorf("site DB %s: %w", path, err)
	case !missing:
		fmt.Fprintf(m.Stderr, "site DB: %s\n", path)
	case mode == mustExist:
		return nil, fmt.Errorf("no site DB at %s: pick the data directory that holds one with --data DIR or USHER_DATA, "+
			"or make one there with 'usher serve --data %s' or 'usher apply -f site.yaml --data %s'", path, data, data)
	case mode == createSiteDB:
		fmt.Fprintf(m.Stderr, "site DB: %s (new: there was none)\n", path)
	case mode == emptyIfMissing:
		fmt.Fprintf(m.Stderr, "site DB: %s does not exist; comparing with an empty site, and creating nothing\n", path)
		tmp, err := os.MkdirTemp("", "usher-empty-site-")
		if err != nil {
			return nil, err
		}
		st, _, err := server.OpenStore(ctx, server.StoreConfig{SQLite: filepath.Join(tmp, datadir.SiteDBFile)})
		if err != nil {
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("open an empty site: %w", err)
		}
		return &siteDB{st, func() { os.RemoveAll(tmp) }}, nil
	}
	st, _, err := server.OpenStore(ctx, server.StoreConfig{DataDir: data})
	if err != nil {
		return nil, err
	}
	return &siteDB{st, nil}, nil
}

// siteDB is a site DB opened by openSiteDB; Close also removes the
// temporary directory of an empty site.
type siteDB struct {
	site.Store
	cleanup func()
}

func (d *siteDB) Close() error {
	err := d.Store.Close()
	if d.cleanup != nil {
		d.cleanup()
	}
	return err
}

const adminUsage = `SUBCOMMAND [flags]

Manage the accounts of the admin API in a site DB (--data DIR).

Subcommands:
  add NAME [--password-stdin]             add an account (a password is generated and printed unless --password-stdin)
  list                                    list the accounts
  reset-password NAME [--password-stdin]  set a new password (generated and printed unless --password-stdin)
  remove NAME [--force]                   remove an account; the last one only with --force
  enrol-token MACHINE [--ttl D]           print a single-use enrolment token for a machine's VDA
                                          (usher vda --enrolment-token); the machine then no longer
                                          enrols with the site's enrolment secret
  revoke-credential MACHINE               revoke a machine's credential: its VDA is refused until it enrols again
  rotate-secret enrolment|token-key       replace a site secret in the site DB: the enrolment secret (VDAs enrolled
                                          with the old one must enrol again) or the key that signs tokens (every
                                          user and admin logs on again); brokers take it when they restart
  unlock NAME [--server URL] [--kind K]   clear a locked-out user's (or admin's) lock on the running server,
                                          through its admin API (and site-wide on a PostgreSQL site)
  outage status|force|clear [--server URL]
                                          show a running broker's Local Host Cache, or force outage mode on
                                          (broker from the local copy, leaving the site DB alone) or off

Run 'usher admin SUBCOMMAND -h' for a subcommand's flags.`

func (m *Main) admin(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" {
		m.subUsage(args, "admin", adminUsage)
		if len(args) == 0 {
			return usageError{"which subcommand? add, list, reset-password or remove"}
		}
		return flag.ErrHelp
	}
	switch args[0] {
	case "add":
		return m.adminSetPassword(ctx, args[1:], true)
	case "reset-password":
		return m.adminSetPassword(ctx, args[1:], false)
	case "list":
		return m.adminList(ctx, args[1:])
	case "remove":
		return m.adminRemove(ctx, args[1:])
	case "enrol-token":
		return m.adminEnrolToken(ctx, args[1:])
	case "revoke-credential":
		return m.adminRevokeCredential(ctx, args[1:])
	case "unlock":
		return m.adminUnlock(ctx, args[1:])
	case "outage":
		return m.adminOutage(ctx, args[1:])
	case "rotate-secret":
		return m.adminRotateSecret(ctx, args[1:])
	}
	return usageError{fmt.Sprintf("unknown subcommand %q: add, list, reset-password, remove, enrol-token, revoke-credential, rotate-secret, unlock or outage", args[0])}
}

// adminSetPassword adds an admin account (add) or sets the password of an
// existing one (reset-password).
func (m *Main) adminSetPassword(ctx context.Context, args []string, add bool) error {
	sub := "reset-password"
	if add {
		sub = "add"
	}
	fs := m.flagSet("admin "+sub, "NAME [--password-stdin] [--data DIR]")
	data := m.dataFlag(fs)
	db := m.dbFlag(fs)
	fromStdin := fs.Bool("password-stdin", false, "read the password from standard input (default: generate and print one)")
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"admin " + sub + " needs a NAME"}
	}
	name := fs.Arg(0)
	password := auth.RandomSecret(15)
	if *fromStdin {
		b, err := io.ReadAll(io.LimitReader(m.Stdin, 4096))
		if err != nil {
			return err
		}
		password = string(bytes.TrimRight(b, "\r\n"))
		if len(password) < 8 {
			return fmt.Errorf("password is shorter than 8 characters")
		}
	}
	hash, err := auth.HashPassword(password, auth.DefaultParams)
	if err != nil {
		return err
	}
	// add may make the site DB, so that an admin can be created before
	// the first usher serve; the other subcommands need an existing one.
	mode := mustExist
	if add {
		mode = createSiteDB
	}
	store, err := m.openSiteDB(ctx, *data, *db, mode)
	if err != nil {
		return err
	}
	defer store.Close()
	err = store.Update(ctx, func(tx site.Tx) error {
		rec := site.ChangeRecord{Actor: site.ActorCLI, Op: site.OpCreate, Kind: site.KindAdmin, Name: name}
		if add {
			if err := tx.Admins().Create(ctx, site.Admin{Name: name, PasswordHash: hash, CreatedAt: time.Now().UTC()}); err != nil {
				return err
			}
		} else {
			a, err := tx.Admins().Get(ctx, name)
			if err != nil {
				return err
			}
			a.PasswordHash = hash
			if err := tx.Admins().Update(ctx, a); err != nil {
				return err
			}
			rec.Op, rec.Name, rec.Fields = site.OpUpdate, a.Name, []string{"password_hash"}
		}
		return tx.History().Record(ctx, rec)
	})
	if err != nil {
		return err
	}
	done := "added"
	if !add {
		done = "has a new password"
	}
	if *fromStdin {
		fmt.Fprintf(m.Stdout, "admin %q %s\n", name, done)
	} else {
		fmt.Fprintf(m.Stdout, "admin %q %s: %s\n", name, done, password)
	}
	return nil
}

func (m *Main) adminList(ctx context.Context, args []string) error {
	fs := m.flagSet("admin list", "[--data DIR]")
	data := m.dataFlag(fs)
	db := m.dbFlag(fs)
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	store, err := m.openSiteDB(ctx, *data, *db, mustExist)
	if err != nil {
		return err
	}
	defer store.Close()
	var admins []site.Admin
	if err := store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Admins().List(ctx, site.ListOptions{})
		admins = p.Items
		return err
	}); err != nil {
		return err
	}
	if len(admins) == 0 {
		fmt.Fprintln(m.Stderr, "no admin accounts: the admin API refuses every request; add one with 'usher admin add NAME'")
		return nil
	}
	w := tabwriter.NewWriter(m.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tCREATED")
	for _, a := range admins {
		fmt.Fprintf(w, "%s\t%s\n", a.Name, a.CreatedAt.UTC().Format(time.RFC3339))
	}
	return w.Flush()
}

// adminOn parses an admin subcommand that acts on one named object (an
// admin or a machine, named by what) in a site DB that must exist: flags
// registers the subcommand's own flags. It returns the open site DB, which
// the caller closes, and the name.
func (m *Main) adminOn(ctx context.Context, cmd, what, usage string, args []string, flags func(*flag.FlagSet)) (*siteDB, string, error) {
	fs := m.flagSet("admin "+cmd, what+" "+usage)
	data := m.dataFlag(fs)
	db := m.dbFlag(fs)
	if flags != nil {
		flags(fs)
	}
	if err := parse(fs, args, 1); err != nil {
		return nil, "", err
	}
	if fs.NArg() != 1 {
		return nil, "", usageError{fmt.Sprintf("admin %s needs a %s", cmd, what)}
	}
	store, err := m.openSiteDB(ctx, *data, *db, mustExist)
	if err != nil {
		return nil, "", err
	}
	return store, fs.Arg(0), nil
}

func (m *Main) adminRemove(ctx context.Context, args []string) error {
	var force *bool
	store, name, err := m.adminOn(ctx, "remove", "NAME", "[--force] [--data DIR]", args, func(fs *flag.FlagSet) {
		force = fs.Bool("force", false, "remove the last admin account too (the admin API then refuses every request)")
	})
	if err != nil {
		return err
	}
	defer store.Close()
	last := false
	err = store.Update(ctx, func(tx site.Tx) error {
		a, err := tx.Admins().Get(ctx, name)
		if err != nil {
			return err
		}
		p, err := tx.Admins().List(ctx, site.ListOptions{Limit: 1})
		if err != nil {
			return err
		}
		if last = p.Total <= 1; last && !*force {
			return fmt.Errorf("admin %q is the last admin account: without one the admin API refuses every request; add another first, or pass --force", name)
		}
		if err := tx.Admins().Delete(ctx, a.Name); err != nil {
			return err
		}
		return tx.History().Record(ctx, site.ChangeRecord{Actor: site.ActorCLI, Op: site.OpDelete, Kind: site.KindAdmin, Name: a.Name})
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "admin %q removed\n", name)
	if last {
		fmt.Fprintln(m.Stderr, "no admin accounts are left: the admin API refuses every request until 'usher admin add NAME'")
	}
	return nil
}

// adminEnrolToken prints a single-use enrolment token for a machine.
func (m *Main) adminEnrolToken(ctx context.Context, args []string) error {
	var ttl *time.Duration
	store, name, err := m.adminOn(ctx, "enrol-token", "MACHINE", "[--ttl D] [--data DIR]", args, func(fs *flag.FlagSet) {
		ttl = fs.Duration("ttl", site.DefaultEnrolmentTokenTTL, "how long the token waits for its VDA")
	})
	if err != nil {
		return err
	}
	defer store.Close()
	if *ttl <= 0 {
		return usageError{"--ttl must be positive"}
	}
	var token string
	var exp time.Time
	err = store.Update(ctx, func(tx site.Tx) (err error) {
		token, exp, err = site.NewMachineEnrolmentToken(ctx, tx, name, time.Now(), *ttl)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(m.Stdout, token)
	fmt.Fprintf(m.Stderr, "single-use enrolment token for machine %q, valid until %s: usher vda --machine %s --enrolment-token TOKEN; "+
		"the machine no longer enrols with the site's enrolment secret\n", name, exp.Format(time.RFC3339), name)
	return nil
}

// adminRotateSecret replaces a site secret with a new random one.
func (m *Main) adminRotateSecret(ctx context.Context, args []string) error {
	store, name, err := m.adminOn(ctx, "rotate-secret", "SECRET (enrolment or token-key)", "[--data DIR] [--db URL]", args, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	var value []byte
	switch name {
	case site.SecretEnrolment:
		value = []byte(auth.RandomSecret(24))
	case site.SecretTokenKey:
		value = make([]byte, 32)
		rand.Read(value)
	default:
		return usageError{fmt.Sprintf("admin rotate-secret: unknown secret %q: enrolment or token-key", name)}
	}
	err = store.Update(ctx, func(tx site.Tx) error {
		if err := tx.SetSecret(ctx, name, value); err != nil {
			return err
		}
		return tx.History().Record(ctx, site.ChangeRecord{Actor: site.ActorCLI, Op: site.OpUpdate, Kind: site.KindSecret, Name: name})
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "site secret %q rotated; each broker takes it when it restarts\n", name)
	return nil
}

// adminRevokeCredential revokes a machine's credential.
func (m *Main) adminRevokeCredential(ctx context.Context, args []string) error {
	store, name, err := m.adminOn(ctx, "revoke-credential", "MACHINE", "[--data DIR]", args, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Update(ctx, func(tx site.Tx) error { return site.RevokeMachineCredential(ctx, tx, name) }); err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "machine %q: credential revoked\n", name)
	return nil
}
