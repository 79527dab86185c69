package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
	"github.com/usher-vdi/usher/internal/siteyaml"
)

func (m *Main) apply(ctx context.Context, args []string) error {
	fs := m.flagSet("apply", "-f FILE [--dry-run] [--data DIR]")
	data := m.dataFlag(fs)
	file := fs.String("f", "", "site file to apply (- for standard input)")
	dryRun := fs.Bool("dry-run", false, "print the changes without making them")
	quiet := fs.Bool("q", false, "print only the summary, not every change")
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

	store, err := openSiteDB(ctx, *data)
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
	err = run(ctx, func(tx site.Tx) error {
		var err error
		if plan, err = site.ApplyConfig(ctx, tx, cfg, *dryRun); err != nil {
			return err
		}
		version, err = tx.ConfigVersion(ctx)
		return err
	})
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
	out := fs.String("o", "-", "file to write (- for standard output)")
	secrets := fs.Bool("with-secrets", false, "include users' password hashes")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(*data, siteDBFile)); err != nil {
		return fmt.Errorf("no site DB in %s (run 'usher apply' or 'usher serve' first): %w", *data, unwrapPath(err))
	}
	store, err := openSiteDB(ctx, *data)
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
	return writeFileAtomic(*out, buf.Bytes(), 0o600)
}

// openSiteDB opens the site DB of a data directory for a one-shot command
// (apply, export, admin), beside a running usher serve if there is one:
// SQLite's WAL lets both use it.
func openSiteDB(ctx context.Context, data string) (*sqlitestore.Store, error) {
	dir, err := openDataDir(data, false)
	if err != nil {
		return nil, err
	}
	return dir.openStore(ctx, sqlitestore.Options{})
}

// writeFileAtomic writes data to a temporary file beside path and renames
// it over path, so a reader never sees half a file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func (m *Main) admin(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "add" {
		return usageError{"usage: usher admin add NAME [--password-stdin] [--data DIR]"}
	}
	fs := m.flagSet("admin add", "NAME [--password-stdin] [--data DIR]")
	data := m.dataFlag(fs)
	fromStdin := fs.Bool("password-stdin", false, "read the password from standard input (default: generate and print one)")
	if err := parse(fs, args[1:], 1); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"admin add needs a NAME"}
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
	store, err := openSiteDB(ctx, *data)
	if err != nil {
		return err
	}
	defer store.Close()
	err = store.Update(ctx, func(tx site.Tx) error {
		return tx.Admins().Create(ctx, site.Admin{Name: name, PasswordHash: hash, CreatedAt: time.Now().UTC()})
	})
	if err != nil {
		return err
	}
	if *fromStdin {
		fmt.Fprintf(m.Stdout, "admin %q added\n", name)
	} else {
		fmt.Fprintf(m.Stdout, "admin %q added with password %s\n", name, password)
	}
	return nil
}
