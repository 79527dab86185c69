package sitetest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

// Cheap are argon2id parameters that keep tests fast. Never use them
// outside tests.
var Cheap = auth.Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1, SaltLen: 16, KeyLen: 32}

// Credentials of the sites New builds.
const (
	// UserPassword is every user's password.
	UserPassword = "user password"
	// Admin is the admin account, with AdminPassword.
	Admin         = "admin"
	AdminPassword = "correct horse"
	// ControlToken is the control token of machines Register registers.
	ControlToken = "token-0123456789abcdef"
)

// Options shape a site. The zero value is the demo site, unregistered,
// with a broker of default configuration.
type Options struct {
	// Config is the site's configuration; nil is demo.Site(). Users
	// without a password hash get UserPassword.
	Config *site.Config
	// Settings, when set, changes the site settings before the broker
	// starts.
	Settings func(*site.Settings)
	// Registered registers every machine with the broker as an ICA host at
	// 10.0.G.N:1494, its control URL naming the machine (see MachineOf).
	Registered bool
	// Broker, when set, changes the broker's configuration before it
	// starts; Store and Control are already set.
	Broker func(*broker.Config)
	// NoBroker leaves the site without a broker (Site.Broker is nil), for
	// tests that start their own.
	NoBroker bool
}

// Site is a test site.
type Site struct {
	Store   *sqlitestore.Store
	Broker  *broker.Broker
	Control *Control
	// Config is the configuration applied (with password hashes).
	Config *site.Config
	// Path is the site DB's file.
	Path string
}

// New builds a site in tb's temporary directory; the store closes when the
// test ends.
func New(tb testing.TB, o Options) *Site {
	tb.Helper()
	ctx := context.Background()
	s := &Site{Path: filepath.Join(tb.TempDir(), "site.db"), Control: NewControl()}
	var err error
	// The demo site comes from a template, registered with a broker
	// already when asked: a broker started on it loads the registrations.
	preRegistered := o.Config == nil && o.Registered
	if o.Config == nil {
		t := demoTemplates[o.Registered]
		s.Config = t.config(tb)
		err = t.copyTo(s.Path)
		if err == nil {
			s.Store, err = sqlitestore.Open(ctx, s.Path, sqlitestore.Options{})
		}
	} else {
		s.Config, err = withPasswords(o.Config)
		if err == nil {
			s.Store, err = build(ctx, s.Path, s.Config)
		}
	}
	if err != nil {
		tb.Fatalf("sitetest: %v", err)
	}
	tb.Cleanup(func() { s.Store.Close() })
	if o.Settings != nil {
		err := s.Store.Update(ctx, func(tx site.Tx) error {
			st, err := tx.Settings(ctx)
			if err != nil {
				return err
			}
			o.Settings(&st)
			return tx.SetSettings(ctx, st)
		})
		if err != nil {
			tb.Fatalf("sitetest: settings: %v", err)
		}
	}
	if o.NoBroker {
		return s
	}
	// Registration's addresses are made up, not the machines' own.
	bc := broker.Config{Store: s.Store, Control: s.Control, AllowAddressChange: true}
	if o.Broker != nil {
		o.Broker(&bc)
	}
	if s.Broker, err = broker.New(ctx, bc); err != nil {
		tb.Fatalf("sitetest: broker: %v", err)
	}
	if o.Registered && !preRegistered {
		for i, m := range s.Config.Machines {
			if err := s.Broker.Register(ctx, Registration(i, m.Name)); err != nil {
				tb.Fatalf("sitetest: register %s: %v", m.Name, err)
			}
		}
	}
	return s
}

// Registration is the registration of the i-th machine of a site: an ICA
// host at 10.0.G.N:1494 whose control URL names it.
func Registration(i int, machine string) broker.Registration {
	return broker.Registration{Machine: machine, Address: fmt.Sprintf("10.0.%d.%d:1494", i/100, i%100+1), Protocol: "ica",
		Control: broker.Control{Machine: machine, URL: controlPrefix + machine, Token: ControlToken}}
}

const controlPrefix = "http://vda.invalid/"

// MachineOf returns the machine a control endpoint of Registration names.
func MachineOf(c broker.Control) string { return strings.TrimPrefix(c.URL, controlPrefix) }

// register registers every machine of cfg in store, through a broker.
func register(ctx context.Context, store site.Store, cfg *site.Config) error {
	b, err := broker.New(ctx, broker.Config{Store: store, Control: NewControl(), AllowAddressChange: true})
	if err != nil {
		return err
	}
	for i, m := range cfg.Machines {
		if err := b.Register(ctx, Registration(i, m.Name)); err != nil {
			return fmt.Errorf("register %s: %w", m.Name, err)
		}
	}
	return nil
}

// withPasswords returns a copy of cfg whose users without a hash have
// UserPassword, all sharing one hash.
func withPasswords(cfg *site.Config) (*site.Config, error) {
	c := *cfg
	c.Users = append([]site.User(nil), cfg.Users...)
	hash := ""
	for i := range c.Users {
		if c.Users[i].PasswordHash != "" {
			continue
		}
		if hash == "" {
			var err error
			if hash, err = auth.HashPassword(UserPassword, Cheap); err != nil {
				return nil, err
			}
		}
		c.Users[i].PasswordHash = hash
	}
	return &c, nil
}

// build makes a site DB at path holding cfg and the Admin account.
func build(ctx context.Context, path string, cfg *site.Config) (*sqlitestore.Store, error) {
	store, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		return nil, err
	}
	adminHash, err := auth.HashPassword(AdminPassword, Cheap)
	if err != nil {
		store.Close()
		return nil, err
	}
	err = store.Update(ctx, func(tx site.Tx) error {
		if _, err := site.ApplyConfig(ctx, tx, cfg, false); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		return tx.Admins().Create(ctx, site.Admin{Name: Admin, PasswordHash: adminHash, CreatedAt: time.Now().UTC()})
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	return store, nil
}

// template is a site DB built once and kept in memory, copied for each
// test.
type template struct {
	registered bool
	once       sync.Once
	cfg        *site.Config
	files      map[string][]byte // suffix ("", "-wal") -> content
	err        error
}

// demoTemplates are the demo site, with its machines registered or not.
var demoTemplates = map[bool]*template{false: {}, true: {registered: true}}

func (t *template) config(tb testing.TB) *site.Config {
	tb.Helper()
	t.build()
	if t.err != nil {
		tb.Fatalf("sitetest: demo site: %v", t.err)
	}
	// A fresh copy for each test, with the template's hashes.
	cfg := demo.Site()
	for i := range cfg.Users {
		cfg.Users[i].PasswordHash = t.cfg.Users[i].PasswordHash
	}
	return cfg
}

func (t *template) build() {
	t.once.Do(func() {
		dir, err := os.MkdirTemp("", "sitetest-")
		if err != nil {
			t.err = err
			return
		}
		defer os.RemoveAll(dir)
		if t.cfg, t.err = withPasswords(demo.Site()); t.err != nil {
			return
		}
		path := filepath.Join(dir, "site.db")
		ctx := context.Background()
		store, err := build(ctx, path, t.cfg)
		if err != nil {
			t.err = err
			return
		}
		if t.registered {
			t.err = register(ctx, store, t.cfg)
		}
		if err := store.Close(); t.err == nil {
			t.err = err
		}
		if t.err != nil {
			return
		}
		t.files = map[string][]byte{}
		for _, suffix := range []string{"", "-wal"} {
			b, err := os.ReadFile(path + suffix)
			if errors.Is(err, fs.ErrNotExist) && suffix != "" {
				continue
			}
			if err != nil {
				t.err = err
				return
			}
			t.files[suffix] = b
		}
	})
}

func (t *template) copyTo(path string) error {
	t.build()
	if t.err != nil {
		return t.err
	}
	for suffix, b := range t.files {
		if err := os.WriteFile(path+suffix, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Control is a fake VDA fleet for the broker: it accepts every request
// except prepares on machines told to refuse, and records what it was
// asked. Machines are known by MachineOf their control endpoint.
type Control struct {
	mu          sync.Mutex
	prepared    map[string][]broker.Prepare
	order       []broker.Prepare // every accepted prepare, in order
	refuse      map[string]bool
	gone        map[string]bool // sessions the VDAs no longer hold
	logoffs     []string
	disconnects []string
}

var _ broker.VDAControl = (*Control)(nil)

// NewControl returns a fleet that accepts everything.
func NewControl() *Control {
	return &Control{prepared: map[string][]broker.Prepare{}, refuse: map[string]bool{}, gone: map[string]bool{}}
}

// Prepare records req, or fails when the machine refuses.
func (f *Control) Prepare(_ context.Context, c broker.Control, req broker.Prepare) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := MachineOf(c)
	if f.refuse[m] {
		return fmt.Errorf("machine %s refuses", m)
	}
	if req.Reconnect && f.gone[req.SessionID] {
		return fmt.Errorf("machine %s: %w", m, broker.ErrNoSuchSession)
	}
	f.prepared[m] = append(f.prepared[m], req)
	f.order = append(f.order, req)
	return nil
}

// Logoff records the session.
func (f *Control) Logoff(_ context.Context, _ broker.Control, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logoffs = append(f.logoffs, id)
	return nil
}

// Disconnect records the session.
func (f *Control) Disconnect(_ context.Context, _ broker.Control, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disconnects = append(f.disconnects, id)
	return nil
}

// Lose makes the VDAs answer that they hold no session id when asked
// to reconnect it, as after a logoff whose report was lost.
func (f *Control) Lose(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gone[id] = true
}

// Refuse makes machine refuse prepares from now on.
func (f *Control) Refuse(machine string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse[machine] = true
}

// Prepared returns the prepares machine accepted, in order.
func (f *Control) Prepared(machine string) []broker.Prepare {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]broker.Prepare(nil), f.prepared[machine]...)
}

// AllPrepared returns every accepted prepare by machine.
func (f *Control) AllPrepared() map[string][]broker.Prepare {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string][]broker.Prepare, len(f.prepared))
	for m, p := range f.prepared {
		out[m] = append([]broker.Prepare(nil), p...)
	}
	return out
}

// LastPrepared returns the last accepted prepare on any machine.
func (f *Control) LastPrepared() (broker.Prepare, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.order) == 0 {
		return broker.Prepare{}, false
	}
	return f.order[len(f.order)-1], true
}

// Logoffs returns the sessions logged off, in order.
func (f *Control) Logoffs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.logoffs...)
}

// Disconnects returns the sessions disconnected, in order.
func (f *Control) Disconnects() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.disconnects...)
}
