// Command usher is an open-source delivery controller for virtual apps and
// desktops. One binary plays every role: the site (`usher serve`, the
// all-in-one site; `usher broker`, one broker of a site on PostgreSQL),
// its configuration (`usher apply`, `usher export`, `usher demo`, `usher
// admin`, `usher directory`), the session host agent (`usher vda`), image
// streaming (`usher stream`, `usher target`, `usher hostcache`, `usher
// image`) and the benches and load generator (`usher bench`, `usher
// load`). Run `usher help` for the list.
//
// It turns flags into Configs: internal/server's for the site roles,
// internal/streamrole's, internal/targetrole's and internal/hostcacherole's
// for the block roles; it assembles no adapter itself
// (internal/layout_test.go keeps that true). Nothing imports it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
)

func main() { os.Exit(runProcess()) }

// runProcess runs usher as this process, with its arguments, standard
// streams and signals, and returns the exit status: the command's, or 130
// when SIGINT stopped it (the shell's 128+2, so that a script sees the
// interrupt). SIGTERM, a service manager's stop, is an orderly shutdown:
// the command's own status, 0 when it stopped cleanly.
func runProcess() int {
	ctx, stop := signalContext()
	defer stop()
	m := &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	code := m.Run(ctx, os.Args[1:])
	var se signalError
	if errors.As(context.Cause(ctx), &se) && se.sig == os.Interrupt {
		return 130
	}
	return code
}

// signalError is the cause of the program's context when a signal ended
// it.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "stopped by " + e.sig.String() }

// signalContext is the program's context: done at SIGINT or SIGTERM,
// which stop a command cleanly, with a signalError as its cause. (SIGHUP
// is the commands' own: those that serve TLS read their certificate
// again.) After the first signal the handler is gone, so that a second
// Ctrl-C kills a command that does not stop.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			cancel(signalError{sig})
		case <-done:
		}
		signal.Stop(ch)
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() { close(done) })
		cancel(context.Canceled)
	}
}

// Main is the usher program. Tests run it in-process with their own
// streams, arguments and context.
type Main struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// Listening, when set, is told each address a server listens on, by
	// name ("http"); tests use it to find a port-0 listener.
	Listening func(name, addr string)
	// Hangup, when set, stands in for SIGHUP: each value sent makes the
	// running command read its TLS certificate files again. Unset, a
	// command serving TLS takes SIGHUP itself while it runs.
	Hangup <-chan struct{}
	// Reloaded, when set, is told after each reload that a hangup asked
	// for, whatever came of it.
	Reloaded func()
	// Self is the command line that runs this program again, for the
	// benches' clients in their own processes; nil means this executable.
	Self []string
	// flagSetMade, when set, is told of each flag set a command makes
	// (usher completion lists the flags so).
	flagSetMade func(*flag.FlagSet)
}

// self returns the command line that runs this program again, or nil
// when the executable cannot be found.
func (m *Main) self() []string {
	if m.Self != nil {
		return m.Self
	}
	if exe, err := os.Executable(); err == nil {
		return []string{exe}
	}
	return nil
}

// usageError is a command-line mistake: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// flagError is a mistake in a command's flags: exit status 2, one line
// that names the flag as typed and says how to see the command's flags.
type flagError struct{ msg string }

func (e flagError) Error() string { return e.msg }

type command struct {
	name, summary string
	run           func(m *Main, ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"serve", "run the all-in-one site: broker, embedded site DB, admin API (--demo for the demo site)", (*Main).serve},
		{"broker", "run one broker of a site whose site DB is PostgreSQL (--db), in a zone (--zone), under a name (--name)", (*Main).broker},
		{"apply", "make the site match a YAML file (-f site.yaml), all or nothing", (*Main).apply},
		{"export", "write the site configuration as YAML", (*Main).export},
		{"demo", "write a generated site as YAML (--scale mid|demo|large), for apply, tests and benches", (*Main).demo},
		{"admin", "manage admin accounts of the admin API (admin add NAME)", (*Main).admin},
		{"directory", "show what usher sees of a user in the site's LDAP or AD directory (directory test USER)", (*Main).directoryCmd},
		{"vda", "run the VDA agent on a session host, or --simulate N simulated VDAs", (*Main).vda},
		{"bench", "run a seed experiment end to end and report beside the published figures (launch, logon-storm, enumerate, ...)", (*Main).bench},
		{"load", "drive load at an NFuse, REST or HTTP endpoint and report per step (--target, --executor)", (*Main).load},
		{"stream", "serve disk images over NBD with versions, a RAM cache and server-side write caches", (*Main).stream},
		{"target", "device-side NBD proxy with a write cache (RAM, RAM+overflow, disk) in front of a stream", (*Main).target},
		{"hostcache", "a host's persistent read cache (IntelliCache): every VM of the host reads its image through it", (*Main).hostcacheCmd},
		{"image", "manage the image store: import, version, promote, merge, list, inspect", (*Main).imageCmd},
		{"version", "print the version and the VCS revision it was built from", (*Main).version},
		{"completion", "print a shell completion script for usher (completion bash|zsh|fish)", (*Main).completion},
	}
}

// Run runs the command in args and returns the process exit status.
func (m *Main) Run(ctx context.Context, args []string) int {
	if m.Getenv == nil {
		m.Getenv = func(string) string { return "" }
	}
	if len(args) == 2 && args[0] == "help" {
		if !slices.ContainsFunc(commands(), func(c command) bool { return c.name == args[1] }) {
			return m.Run(ctx, args[1:]) // unknown command
		}
		// usher help COMMAND is usher COMMAND -h, on standard output.
		help := *m
		help.Stderr = m.Stdout
		return help.Run(ctx, []string{args[1], "-h"})
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		m.usage(m.Stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = []string{"version"}
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(m, ctx, args[1:])
		var ue usageError
		var fe flagError
		switch {
		case errors.Is(err, flag.ErrHelp):
			return 0
		case err == nil, ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.Cause(ctx))):
			// Stopped by a signal (or the caller): not an error to print.
			return 0
		case errors.As(err, &ue):
			fmt.Fprintf(m.Stderr, "usher %s: %s\n", c.name, ue.msg)
			fmt.Fprintf(m.Stderr, "run 'usher %s -h' for usage\n", c.name)
			return 2
		case errors.As(err, &fe):
			fmt.Fprintf(m.Stderr, "usher %s: %s\n", c.name, fe.msg)
			return 2
		default:
			fmt.Fprintf(m.Stderr, "usher %s: %s\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(m.Stderr, "usher: unknown command %q\n", args[0])
	m.usage(m.Stderr)
	return 2
}

func (m *Main) usage(w io.Writer) {
	fmt.Fprintln(w, "usher: a delivery controller for virtual apps and desktops")
	fmt.Fprintln(w, "\nUsage: usher COMMAND [flags]\n\nCommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nRun 'usher help COMMAND' or 'usher COMMAND -h' for a command's flags;")
	fmt.Fprintln(w, "'usher --version' prints the version.")
}

// flagSet returns a flag set that reports errors instead of exiting and
// prints its usage (-h) on standard output.
func (m *Main) flagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("usher "+name, flag.ContinueOnError)
	fs.SetOutput(m.Stdout)
	if m.flagSetMade != nil {
		m.flagSetMade(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: usher %s %s\n\nFlags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, allowing flags after positional arguments (usher
// admin add NAME --password-stdin), and refuses positional arguments
// beyond max. The positional arguments are left in fs.Args(). For -h it
// prints the usage and returns flag.ErrHelp; for a mistake in the flags
// it returns a one-line flagError (see flagMistake). A flag set with a
// --config flag (configFlag) then takes the flags the command line left
// unset from that file.
func parse(fs *flag.FlagSet, args []string, max int) error {
	// The flag package prints the error and the usage itself; silence it
	// while parsing so that Run prints each once.
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	restore := func() { fs.SetOutput(out); fs.Usage = usage }
	defer restore()
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				restore()
				fs.Usage()
				return err
			}
			return flagMistake(fs, args, err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) > max {
		return usageError{fmt.Sprintf("unexpected argument %q", positional[max])}
	}
	fs.Parse(append([]string{"--"}, positional...))
	return loadConfig(fs)
}

// logFlags are the logging flags shared by long-running commands.
type logFlags struct {
	format, level string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usageError{fmt.Sprintf("--log-level %q is not debug, info, warn or error", l.level)}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(l.format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Sprintf("--log-format %q is not text or json", l.format)}
}

func (m *Main) version(_ context.Context, args []string) error {
	fs := m.flagSet("version", "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintln(m.Stdout, versionLine(version, bi))
	return nil
}

// version is the release this binary is, a semver that scripts/build
// sets from the tag (git describe) with -ldflags "-X main.version=v1.2.3";
// empty in a plain go build.
var version string

// versionLine describes a build: its version (v, or else the module
// version: v1.2.3, a pseudo-version, or (devel) for a build from a work
// tree) and the VCS revision, time and dirty flag that go build stamps
// into it.
func versionLine(v string, bi *debug.BuildInfo) string {
	if bi == nil {
		if v == "" {
			v = "(devel)"
		}
		return "usher " + v + ", no build information"
	}
	if v == "" {
		v = bi.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	line := "usher " + v
	if rev := settings["vcs.revision"]; rev != "" {
		line += " " + settings["vcs"] + " " + rev
		if t := settings["vcs.time"]; t != "" {
			line += " " + t
		}
		if settings["vcs.modified"] == "true" {
			line += " (modified)"
		}
	} else {
		line += ", no VCS revision (built without -buildvcs, or outside a repository)"
	}
	return line + " " + bi.GoVersion
}
