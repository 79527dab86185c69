package main

import (
	"context"
	"fmt"
	"os"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/sitegen"
	"github.com/usher-vdi/usher/internal/siteyaml"
)

// scales are the sizes usher demo generates.
var scales = map[string]sitegen.Sizes{"mid": sitegen.MidSize, "demo": sitegen.DemoSize, "large": sitegen.LargeSize}

// demo writes a generated site as YAML, for usher apply, tests and benches.
func (m *Main) demo(_ context.Context, args []string) error {
	fs := m.flagSet("demo", "[--scale mid|demo|large] [--password-stdin] [--out FILE]\n\n"+
		"Writes a generated site configuration as YAML, for 'usher apply -f': mid (60 users, 12 machines), demo\n"+
		"(1,000 users, 57 machines, 400 applications) or large (100,000 users in 200 groups, 40,000 machines in\n"+
		"20 zones, 2,000 applications). The same scale gives the same site. Every tenth user (user0001,\n"+
		"user0011, ...) gets the password read with --password-stdin; without it, nobody can log on.")
	scale := fs.String("scale", "demo", "mid, demo (the site of usher serve --demo) or large")
	fromStdin := fs.Bool("password-stdin", false, "read the users' password from standard input (one line)")
	out := fs.String("out", "", "write here instead of standard output (created 0600: it holds password hashes)")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	n, ok := scales[*scale]
	if !ok {
		return usageError{fmt.Sprintf("--scale %q: want mid, demo or large", *scale)}
	}
	var hash string
	if *fromStdin {
		pw, err := m.passwordLine()
		if err != nil {
			return err
		}
		if len(pw) < 8 {
			return usageError{"the password must have at least 8 characters"}
		}
		if hash, err = auth.HashPassword(pw, auth.DefaultParams); err != nil {
			return err
		}
	}
	cfg := sitegen.Generate(n, hash)
	w := m.Stdout
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	if err := siteyaml.EncodeWith(w, cfg, siteyaml.EncodeOptions{WithSecrets: hash != ""}); err != nil {
		return err
	}
	if *out != "" {
		fmt.Fprintf(m.Stderr, "usher demo: %s site written to %s: %d users, %d machines, %d applications\n", *scale, *out,
			len(cfg.Users), len(cfg.Machines), len(cfg.Applications))
	}
	return nil
}
