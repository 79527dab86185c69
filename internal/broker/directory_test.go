package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

// dirCheap are argon2id parameters that keep the tests fast.
var dirCheap = auth.Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1, SaltLen: 16, KeyLen: 32}

// Passwords of the tests' users.
const (
	dirSitePassword = "site password"
	alicePassword   = "alice password"
	bobPassword     = "bob password"
)

// Names and DNs of the fake directory.
const (
	dnGroups        = "OU=Groups,DC=usher,DC=test"
	dnDomainUsers   = "CN=Domain-Users," + dnGroups
	dnEngineers     = "CN=Engineers," + dnGroups
	dnStaff         = "CN=Staff," + dnGroups
	dnEngineeringCN = "CN=ENGINEERING," + dnGroups
)

// fakeDirUser is a user of the fake directory.
type fakeDirUser struct {
	id       DirectoryUser
	password string
	refusal  error // why the account may not log on (ErrAccountDisabled...), nil when it may
}

// fakeDirectory is a Directory of a few users, in memory. Key takes
// user, USHER\user and user@usher.test. It counts its calls, can hold
// Authenticate calls until released, and can be taken down.
type fakeDirectory struct {
	mu      sync.Mutex
	users   map[string]*fakeDirUser // by key
	down    bool
	closed  bool
	gate    chan struct{} // when set, Authenticate waits for it to close
	auths   map[string]int
	lookups map[string]int
	closes  int
	// entered receives the key of each Authenticate call that waits at
	// the gate.
	entered chan string
}

var _ Directory = (*fakeDirectory)(nil)

// newFakeDirectory returns a directory of alice (Domain-Users), bob and
// carol (Domain-Users and ENGINEERING, the cn of no DN group of the
// site), erin (Engineers, by DN only) and dave (Staff only).
func newFakeDirectory() *fakeDirectory {
	d := &fakeDirectory{users: map[string]*fakeDirUser{}, auths: map[string]int{}, lookups: map[string]int{},
		entered: make(chan string, 1000)}
	add := func(name, password string, groups, dns []string) {
		d.users[strings.ToLower(name)] = &fakeDirUser{password: password, id: DirectoryUser{
			DN: "CN=" + name + ",OU=Staff,DC=usher,DC=test", Name: name, DisplayName: name + " Example",
			Groups: groups, GroupDNs: dns, PasswordChanged: "133000000000000001"}}
	}
	add("Alice", alicePassword, []string{"Domain-Users"}, []string{dnDomainUsers})
	add("Bob", bobPassword, []string{"Domain-Users", "ENGINEERING"}, []string{dnDomainUsers, dnEngineeringCN})
	add("Carol", "carol password", []string{"domain-users", "engineering"}, []string{dnDomainUsers, dnEngineeringCN})
	add("Erin", "erin password", []string{"Domain-Users", "Engineers"}, []string{dnDomainUsers, " cn = engineers ,  ou=Groups , DC=USHER,dc=test"})
	add("Dave", "dave password", []string{"Staff"}, []string{dnStaff})
	return d
}

func (d *fakeDirectory) Key(name string) (string, bool) {
	user := name
	if dom, u, ok := strings.Cut(name, `\`); ok {
		if !strings.EqualFold(dom, "USHER") {
			return "", false
		}
		user = u
	} else if i := strings.LastIndexByte(name, '@'); i >= 0 {
		if !strings.EqualFold(name[i+1:], "usher.test") {
			return "", false
		}
		user = name[:i]
	}
	if user == "" {
		return "", false
	}
	return strings.ToLower(user), true
}

func (d *fakeDirectory) unavailable() error {
	return fmt.Errorf("dial ldaps://dc1.usher.test: connection refused: %w", ErrDirectoryUnavailable)
}

// Authenticate answers at once and, when held, returns the answer only
// once released: a bind that was answered before the directory changed
// and whose caller has not taken the answer yet.
func (d *fakeDirectory) Authenticate(ctx context.Context, name, password string) (DirectoryUser, error) {
	key, ok := d.Key(name)
	d.mu.Lock()
	d.auths[key]++
	gate := d.gate
	id, err := d.answer(key, ok, password)
	d.mu.Unlock()
	if gate != nil {
		d.entered <- key
		select {
		case <-gate:
		case <-ctx.Done():
			return DirectoryUser{}, d.unavailable()
		}
	}
	return id, err
}

// answer is Authenticate's answer. The caller holds d.mu.
func (d *fakeDirectory) answer(key string, ok bool, password string) (DirectoryUser, error) {
	if d.down || d.closed {
		return DirectoryUser{}, d.unavailable()
	}
	u := d.users[key]
	if !ok || u == nil || u.password != password {
		return DirectoryUser{}, ErrBadCredentials
	}
	if u.refusal != nil {
		return DirectoryUser{}, fmt.Errorf("bind %s: %w", u.id.DN, u.refusal)
	}
	return u.id, nil
}

func (d *fakeDirectory) Lookup(ctx context.Context, name string) (DirectoryUser, error) {
	key, ok := d.Key(name)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lookups[key]++
	if d.down || d.closed {
		return DirectoryUser{}, d.unavailable()
	}
	u := d.users[key]
	if !ok || u == nil {
		return DirectoryUser{}, ErrBadCredentials
	}
	if u.refusal != nil {
		return DirectoryUser{}, fmt.Errorf("read %s: %w", u.id.DN, u.refusal)
	}
	return u.id, nil
}

func (d *fakeDirectory) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closes++
	d.closed = true
	return nil
}

// hold makes Authenticate calls wait until the returned function is
// called.
func (d *fakeDirectory) hold() (release func()) {
	gate := make(chan struct{})
	d.mu.Lock()
	d.gate = gate
	d.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			d.gate = nil
			d.mu.Unlock()
			close(gate)
		})
	}
}

func (d *fakeDirectory) setDown(down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = down
}

func (d *fakeDirectory) refuse(key string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.users[key].refusal = err
}

func (d *fakeDirectory) changePassword(key, password, changed string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.users[key].password = password
	d.users[key].id.PasswordChanged = changed
}

// calls returns the Authenticate and Lookup calls made for key.
func (d *fakeDirectory) calls(key string) (auths, lookups int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.auths[key], d.lookups[key]
}

// totals returns every Authenticate and Lookup call made.
func (d *fakeDirectory) totals() (auths, lookups int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.auths {
		auths += n
	}
	for _, n := range d.lookups {
		lookups += n
	}
	return auths, lookups
}

func (d *fakeDirectory) closeCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closes
}

// dirClock is a clock the test moves.
type dirClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *dirClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *dirClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// dirControl accepts every VDA request.
type dirControl struct{}

func (dirControl) Prepare(context.Context, Control, Prepare) error { return nil }
func (dirControl) Logoff(context.Context, Control, string) error   { return nil }
func (dirControl) Disconnect(context.Context, Control, string) error {
	return nil
}

// dirHarness is a broker serving the demo site with an enabled directory
// that opens fake directories.
type dirHarness struct {
	t     *testing.T
	b     *Broker
	clock *dirClock
	cfg   *site.Config

	mu     sync.Mutex
	opened []*fakeDirectory
	// settings are the settings each directory was opened with.
	settings []site.Directory
}

// dirSettings are enabled, valid directory settings whose users'
// entries are read again after 60 seconds.
func dirSettings() site.Directory {
	return site.Directory{Enabled: true, Servers: []string{"ldaps://dc1.usher.test"},
		BindDN: "CN=svc-usher,OU=Service,DC=usher,DC=test", BindPassword: "bind password",
		UserBaseDNs: []string{"OU=Staff,DC=usher,DC=test"}, NetBIOSDomain: "USHER", UPNSuffix: "usher.test",
		GroupCacheTTLSeconds: 60}
}

// dirSite is the demo site, its users with dirSitePassword, its
// directory enabled, and its group engineering standing for the
// directory group of dnEngineers.
func dirSite(t *testing.T) *site.Config {
	t.Helper()
	c := demo.Site()
	hash, err := auth.HashPassword(dirSitePassword, dirCheap)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Users {
		c.Users[i].PasswordHash = hash
	}
	for i := range c.Groups {
		if c.Groups[i].Name == demo.Engineering {
			c.Groups[i].DN = "cn=Engineers, ou=Groups, dc=usher, dc=test"
		}
	}
	c.Directory = dirSettings()
	c.Normalize()
	if err := c.Validate(); err != nil {
		t.Fatalf("the test site is not valid: %v", err)
	}
	return c
}

// emptySiteDB is an empty site DB's files (suffix -> content), made
// once: creating the schema costs far more than copying it.
var emptySiteDB = sync.OnceValues(func() (map[string][]byte, error) {
	dir, err := os.MkdirTemp("", "broker-directory-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "site.db")
	store, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{})
	if err != nil {
		return nil, err
	}
	if err := store.Close(); err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if errors.Is(err, os.ErrNotExist) && suffix != "" {
			continue
		}
		if err != nil {
			return nil, err
		}
		files[suffix] = b
	}
	return files, nil
})

// openEmptySiteDB opens a copy of emptySiteDB in t's temporary
// directory; it closes when the test ends.
func openEmptySiteDB(t *testing.T) *sqlitestore.Store {
	t.Helper()
	files, err := emptySiteDB()
	if err != nil {
		t.Fatalf("empty site DB: %v", err)
	}
	path := filepath.Join(t.TempDir(), "site.db")
	for suffix, b := range files {
		if err := os.WriteFile(path+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	store, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// newDirHarness starts a broker over an empty site DB and publishes
// dirSite to it; mod changes the broker's configuration.
func newDirHarness(t *testing.T, mod func(*Config)) *dirHarness {
	t.Helper()
	ctx := context.Background()
	store := openEmptySiteDB(t)
	var err error
	t.Cleanup(func() { store.Close() })
	h := &dirHarness{t: t, clock: &dirClock{now: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)}}
	cfg := Config{Store: store, Control: dirControl{}, Now: h.clock.Now, PasswordParams: dirCheap,
		StatusSyncInterval: -1, LockoutThreshold: 3, LockoutWindow: time.Hour, LockoutDuration: 5 * time.Minute,
		OpenDirectory: func(s site.Directory) (Directory, error) {
			d := newFakeDirectory()
			h.mu.Lock()
			defer h.mu.Unlock()
			h.opened = append(h.opened, d)
			h.settings = append(h.settings, s)
			return d, nil
		}}
	if mod != nil {
		mod(&cfg)
	}
	if h.b, err = New(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	h.publish(dirSite(t))
	if n := len(h.opened); n != 1 {
		t.Fatalf("an enabled directory opened %d directories, want 1", n)
	}
	return h
}

// publish serves cfg as the next configuration version.
func (h *dirHarness) publish(cfg *site.Config) {
	h.t.Helper()
	if !h.b.Publish(h.b.Snapshot().Version+1, cfg) {
		h.t.Fatal("the broker did not take the configuration")
	}
	h.cfg = cfg
}

// dir returns the directory opened last.
func (h *dirHarness) dir() *fakeDirectory {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.opened[len(h.opened)-1]
}

func (h *dirHarness) logon(name, password string) (*site.User, error) {
	return h.b.Authenticate(context.Background(), name, password, "")
}

// mustLogon logs name on, failing the test on an error.
func (h *dirHarness) mustLogon(name, password string) *site.User {
	h.t.Helper()
	u, err := h.logon(name, password)
	if err != nil {
		h.t.Fatalf("logon %s: %v", name, err)
	}
	return u
}

// entry returns the broker's entry of a directory user's key, nil when
// it has none.
func (h *dirHarness) entry(key string) *dirEntry {
	return h.b.dir.Load().get(key)
}

// waitFor polls cond until it holds, failing the test after 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitRefreshed waits until no background read of key's entry is under
// way.
func (h *dirHarness) waitRefreshed(key string) {
	h.t.Helper()
	waitFor(h.t, "the background read of "+key+" ended", func() bool {
		e := h.entry(key)
		return e == nil || !e.refreshing.Load()
	})
}

// TestDirectoryLogonNameForms: a directory user logs on as user,
// DOMAIN\user and user@suffix, and is the same user, named as the
// directory spells it; the site's own users log on as before, without the
// directory being asked.
func TestDirectoryLogonNameForms(t *testing.T) {
	h := newDirHarness(t, nil)
	d := h.dir()
	var first *site.User
	for _, name := range []string{"alice", `USHER\alice`, "alice@usher.test", `usher\ALICE`, "Alice@USHER.TEST"} {
		u := h.mustLogon(name, alicePassword)
		if u.Name != "Alice" || u.DisplayName != "Alice Example" {
			t.Errorf("%s logs on as %q (%q), want Alice (Alice Example)", name, u.Name, u.DisplayName)
		}
		if !strings.HasPrefix(u.Directory, "directory\x00") {
			t.Errorf("%s: the user's Directory field is %q, want it set", name, u.Directory)
		}
		if first == nil {
			first = u
		} else if u != first {
			t.Errorf("%s is another user than alice: %+v, want %+v", name, u, first)
		}
	}
	if auths, _ := d.calls("alice"); auths != 1 {
		t.Errorf("the directory was asked %d times, want once: every name form is one user", auths)
	}
	for _, name := range []string{`OTHER\alice`, "alice@other.test"} {
		if _, err := h.logon(name, alicePassword); !errors.Is(err, ErrBadCredentials) {
			t.Errorf("%s: %v, want ErrBadCredentials", name, err)
		}
	}

	// The site's users.
	auths, lookups := d.totals()
	local := demo.UserName(1)
	u := h.mustLogon(local, dirSitePassword)
	if u.Name != local || u.Directory != "" {
		t.Errorf("site user %s logs on as %+v", local, u)
	}
	if _, err := h.logon(local, "wrong"); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("site user, wrong password: %v, want ErrBadCredentials", err)
	}
	if got, err := h.b.User(context.Background(), local); err != nil || got.Name != local {
		t.Errorf("User(%s) = %v, %v", local, got, err)
	}
	if a, l := d.totals(); a != auths || l != lookups {
		t.Errorf("site users' logons asked the directory: %d authentications, %d lookups, want %d, %d", a, l, auths, lookups)
	}
}

// TestDirectorySingleFlight: concurrent logons of one user with one
// password cost one bind and all succeed; different users' binds run at
// once.
func TestDirectorySingleFlight(t *testing.T) {
	h := newDirHarness(t, nil)
	d := h.dir()

	t.Run("one user", func(t *testing.T) {
		const n = 50
		release := d.hold()
		defer release()
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				u, err := h.logon("alice", alicePassword)
				if err == nil && u.Name != "Alice" {
					err = fmt.Errorf("logged on as %q", u.Name)
				}
				errs <- err
			})
		}
		select {
		case <-d.entered:
		case <-time.After(5 * time.Second):
			t.Fatal("no logon reached the directory")
		}
		waitFor(t, fmt.Sprintf("%d logons wait for the first one's bind", n-1), func() bool {
			return h.b.cfg.Verified.Waiting() == n-1
		})
		release()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("logon: %v", err)
			}
		}
		if auths, _ := d.calls("alice"); auths != 1 {
			t.Errorf("%d concurrent logons made %d binds, want 1", n, auths)
		}
	})

	t.Run("different users", func(t *testing.T) {
		release := d.hold()
		defer release()
		var wg sync.WaitGroup
		for _, c := range []struct{ name, password string }{{"bob", bobPassword}, {"carol", "carol password"}} {
			wg.Go(func() {
				if _, err := h.logon(c.name, c.password); err != nil {
					t.Errorf("logon %s: %v", c.name, err)
				}
			})
		}
		got := map[string]bool{}
		for len(got) < 2 {
			select {
			case k := <-d.entered:
				got[k] = true
			case <-time.After(5 * time.Second):
				release()
				wg.Wait()
				t.Fatalf("only %v reached the directory while it held them: different users' binds do not run at once", got)
			}
		}
		release()
		wg.Wait()
	})
}

// TestDirectoryVerifiedCache: a password the directory accepted logs on
// again without a bind; a wrong one asks the directory every time and is
// refused.
func TestDirectoryVerifiedCache(t *testing.T) {
	h := newDirHarness(t, nil)
	d := h.dir()
	h.mustLogon("alice", alicePassword)
	for i := range 100 {
		if _, err := h.logon("alice", alicePassword); err != nil {
			t.Fatalf("logon %d: %v", i, err)
		}
	}
	if auths, lookups := d.calls("alice"); auths != 1 || lookups != 0 {
		t.Fatalf("101 logons with one password: %d binds and %d lookups, want 1 and 0", auths, lookups)
	}
	for i := range 2 {
		if _, err := h.logon("alice", "wrong password"); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("wrong password: %v, want ErrBadCredentials", err)
		}
		if auths, _ := d.calls("alice"); auths != 2+i {
			t.Fatalf("wrong password %d: %d binds in all, want %d: a wrong password is not cached", i+1, auths, 2+i)
		}
	}
	e := h.entry("alice")
	if e == nil {
		t.Fatal("alice's entry is gone")
	}
	if h.b.cfg.Verified.Known(guardKey(AccountUser, "alice"), "wrong password", e.user.Directory) {
		t.Error("the wrong password is in the verified cache")
	}
	h.mustLogon("alice", alicePassword)
	if auths, _ := d.calls("alice"); auths != 3 {
		t.Errorf("the right password after wrong ones: %d binds in all, want 3 (from the cache)", auths)
	}
}

// TestDirectoryLockout: usher's own lock-out counts wrong directory
// passwords and then refuses the right one without asking the directory;
// a directory that cannot be reached counts nothing.
func TestDirectoryLockout(t *testing.T) {
	t.Run("wrong passwords lock out", func(t *testing.T) {
		h := newDirHarness(t, nil) // threshold 3
		d := h.dir()
		h.mustLogon("alice", alicePassword) // remembered: the lock must win over the cache
		for i := range 3 {
			if _, err := h.logon("alice", "wrong"); !errors.Is(err, ErrBadCredentials) {
				t.Fatalf("wrong password %d: %v", i+1, err)
			}
		}
		before, _ := d.calls("alice")
		for _, name := range []string{"alice", `USHER\alice`, "alice@usher.test"} {
			_, err := h.logon(name, alicePassword)
			if !errors.Is(err, ErrAccountLocked) || !errors.Is(err, ErrBadCredentials) {
				t.Errorf("%s after 3 wrong passwords: %v, want ErrAccountLocked", name, err)
			}
		}
		if auths, _ := d.calls("alice"); auths != before {
			t.Errorf("a locked-out user's logons asked the directory %d times", auths-before)
		}
		h.clock.Advance(5*time.Minute + time.Second)
		h.mustLogon("alice", alicePassword)
	})

	t.Run("unavailable directory counts nothing", func(t *testing.T) {
		h := newDirHarness(t, nil) // threshold 3
		d := h.dir()
		for range 2 {
			if _, err := h.logon("bob", "wrong"); !errors.Is(err, ErrBadCredentials) {
				t.Fatalf("wrong password: %v", err)
			}
		}
		d.setDown(true)
		for i := range 10 {
			pw := "wrong"
			if i%2 == 0 {
				pw = bobPassword
			}
			_, err := h.logon("bob", pw)
			if site.ErrorCode(err) != site.EUnavailable || errors.Is(err, ErrAccountLocked) {
				t.Fatalf("logon %d while the directory is down: %v, want it unavailable", i+1, err)
			}
		}
		d.setDown(false)
		if u := h.mustLogon("bob", bobPassword); u.Name != "Bob" {
			t.Errorf("bob logs on as %q", u.Name)
		}
		if auths, _ := d.calls("bob"); auths != 13 {
			t.Errorf("%d binds, want 13", auths)
		}
	})
}

// TestDirectoryRefusals: an account the directory refuses after a right
// password gets the directory's reason, or an unavailable error when the
// directory cannot answer; no refusal leaves a password that logs on
// without asking the directory.
func TestDirectoryRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refusal error // nil: the directory is down
	}{
		{"disabled", ErrAccountDisabled},
		{"locked in the directory", ErrDirectoryLocked},
		{"password expired", ErrPasswordExpired},
		{"unavailable", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newDirHarness(t, nil)
			d := h.dir()
			check := func(err error) {
				t.Helper()
				if tc.refusal == nil {
					if site.ErrorCode(err) != site.EUnavailable {
						t.Fatalf("logon: %v, want an unavailable error", err)
					}
					return
				}
				if !errors.Is(err, tc.refusal) {
					t.Fatalf("logon: %v, want %v", err, tc.refusal)
				}
				if site.ErrorCode(err) != site.EForbidden {
					t.Errorf("code %q, want %q", site.ErrorCode(err), site.EForbidden)
				}
			}
			if tc.refusal == nil {
				d.setDown(true)
			} else {
				d.refuse("alice", tc.refusal)
			}
			for i := range 3 {
				_, err := h.logon("alice", alicePassword)
				check(err)
				if auths, _ := d.calls("alice"); auths != i+1 {
					t.Fatalf("refused logon %d: %d binds in all, want %d: a refusal was cached", i+1, auths, i+1)
				}
			}
			if e := h.entry("alice"); e != nil {
				if h.b.cfg.Verified.Known(guardKey(AccountUser, "alice"), alicePassword, e.user.Directory) {
					t.Error("a refused password is in the verified cache")
				}
			}
			// Once the directory lets the account log on, and its entry
			// was read again (a launch asked for the user), a logon
			// still asks the directory.
			if tc.refusal == nil {
				d.setDown(false)
			} else {
				d.refuse("alice", nil)
			}
			if _, err := h.b.User(context.Background(), "alice"); err != nil {
				t.Fatalf("User(alice): %v", err)
			}
			h.mustLogon("alice", alicePassword)
			if auths, _ := d.calls("alice"); auths != 4 {
				t.Errorf("%d binds in all, want 4", auths)
			}
		})
	}
}

// TestDirectoryStaleWhileRevalidate: past the TTL, a user's entry is read
// again in the background; while the directory cannot be reached the last
// read serves (entitlements, User, cached logons); once the directory says
// the account is disabled, the user is forgotten.
func TestDirectoryStaleWhileRevalidate(t *testing.T) {
	h := newDirHarness(t, nil)
	d := h.dir()
	ctx := context.Background()
	h.mustLogon("alice", alicePassword)
	want := h.b.EntitlementsOf(h.b.Snapshot(), "alice")
	if len(want.Resources) == 0 {
		t.Fatal("alice, in Domain-Users, is entitled to nothing")
	}

	// Within the TTL, nothing is read again.
	h.clock.Advance(59 * time.Second)
	h.b.User(ctx, "alice")
	h.b.EntitlementsOf(h.b.Snapshot(), "alice")
	h.waitRefreshed("alice")
	if _, lookups := d.calls("alice"); lookups != 0 {
		t.Fatalf("%d lookups within the TTL, want 0", lookups)
	}

	h.clock.Advance(2 * time.Second) // past the TTL
	d.setDown(true)
	for i := range 3 {
		if got := h.b.EntitlementsOf(h.b.Snapshot(), "alice"); got != want {
			t.Fatalf("%d: alice's entitlements while the directory is down: %d resources, want the last read's %d", i, len(got.Resources), len(want.Resources))
		}
		if u, err := h.b.User(ctx, "alice"); err != nil || u.Name != "Alice" {
			t.Fatalf("%d: User(alice) while the directory is down: %v, %v", i, u, err)
		}
		if _, err := h.logon(`USHER\alice`, alicePassword); err != nil {
			t.Fatalf("%d: logon with the remembered password while the directory is down: %v", i, err)
		}
		h.waitRefreshed("alice")
	}
	auths, lookups := d.calls("alice")
	if auths != 1 {
		t.Errorf("%d binds, want 1: the remembered password serves", auths)
	}
	if lookups == 0 {
		t.Error("the stale entry was not read again")
	}
	if h.entry("alice") == nil {
		t.Fatal("the directory being down forgot alice")
	}

	// The directory is back and says the account is disabled.
	d.setDown(false)
	d.refuse("alice", ErrAccountDisabled)
	h.b.User(ctx, "alice") // starts the read
	waitFor(t, "alice is forgotten", func() bool { return h.entry("alice") == nil })
	if u, err := h.b.User(ctx, "alice"); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("User(alice) once disabled: %v, %v, want ErrBadCredentials", u, err)
	}
	if got := h.b.EntitlementsOf(h.b.Snapshot(), "alice"); len(got.Resources) != 0 {
		t.Errorf("alice, disabled, is entitled to %d resources", len(got.Resources))
	}
	before, _ := d.calls("alice")
	if _, err := h.logon("alice", alicePassword); !errors.Is(err, ErrAccountDisabled) {
		t.Errorf("logon once disabled: %v, want ErrAccountDisabled", err)
	}
	if auths, _ := d.calls("alice"); auths != before+1 {
		t.Errorf("the remembered password of a disabled user logged on without asking the directory (%d binds, want %d)", auths, before+1)
	}
}

// TestDirectoryPasswordChange: once the background read finds the
// password changed, the old one is no longer taken from the cache.
func TestDirectoryPasswordChange(t *testing.T) {
	h := newDirHarness(t, nil)
	d := h.dir()
	ctx := context.Background()
	h.mustLogon("alice", alicePassword)
	old := h.entry("alice").user.Directory

	d.changePassword("alice", "new password", "133000000000000002")
	h.clock.Advance(61 * time.Second)
	h.b.User(ctx, "alice") // starts the read
	waitFor(t, "the new password-change time is read", func() bool {
		e := h.entry("alice")
		return e != nil && e.user.Directory != old
	})
	if h.b.cfg.Verified.Known(guardKey(AccountUser, "alice"), alicePassword, old) {
		t.Error("the old password is still remembered")
	}
	before, _ := d.calls("alice")
	if _, err := h.logon("alice", alicePassword); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("the old password: %v, want ErrBadCredentials", err)
	}
	if auths, _ := d.calls("alice"); auths != before+1 {
		t.Errorf("the old password was taken from the cache (%d binds, want %d)", auths, before+1)
	}
	h.mustLogon("alice", "new password")
	h.mustLogon("alice", "new password")
	if auths, _ := d.calls("alice"); auths != before+2 {
		t.Errorf("%d binds, want %d", auths, before+2)
	}
}

// TestDirectoryEntitlements: site groups stand for directory groups by
// name (any case) or, when they have a DN, by DN only.
func TestDirectoryEntitlements(t *testing.T) {
	h := newDirHarness(t, nil)
	ctx := context.Background()
	for _, name := range []string{"alice", "bob", "carol", "erin", "dave"} {
		if _, err := h.b.User(ctx, name); err != nil {
			t.Fatalf("User(%s): %v", name, err)
		}
	}
	s := h.b.Snapshot()
	names := func(e *Entitlements) []string {
		var out []string
		for _, r := range e.Resources {
			out = append(out, r.Name)
		}
		slices.Sort(out)
		return out
	}
	domainUsers := names(s.EntitlementsOfMember("x", []string{demo.DomainUsers}))
	engineers := names(s.EntitlementsOfMember("y", []string{demo.DomainUsers, demo.Engineering}))
	if len(domainUsers) == 0 || slices.Contains(domainUsers, demo.PooledDesktop) || !slices.Contains(engineers, demo.PooledDesktop) {
		t.Fatalf("the demo site changed: domain-users get %d resources, engineering %v the pooled desktop", len(domainUsers), slices.Contains(engineers, demo.PooledDesktop))
	}

	if got := names(h.b.EntitlementsOf(s, "alice")); !slices.Equal(got, domainUsers) {
		t.Errorf("alice (Domain-Users) gets %d resources, want domain-users' %d", len(got), len(domainUsers))
	}
	// bob is in ENGINEERING by name, but engineering stands for the
	// group of its DN only.
	if got := names(h.b.EntitlementsOf(s, "bob")); !slices.Equal(got, domainUsers) {
		t.Errorf("bob (Domain-Users, ENGINEERING by name) gets %d resources (pooled desktop %v), want domain-users' %d",
			len(got), slices.Contains(got, demo.PooledDesktop), len(domainUsers))
	}
	// erin is in the group of engineering's DN, spelled otherwise.
	if got := names(h.b.EntitlementsOf(s, `USHER\erin`)); !slices.Equal(got, engineers) {
		t.Errorf("erin (the DN of engineering) gets %d resources (pooled desktop %v), want engineering's %d",
			len(got), slices.Contains(got, demo.PooledDesktop), len(engineers))
	}
	if got := names(h.b.EntitlementsOf(s, "dave")); len(got) != 0 {
		t.Errorf("dave, in no site group, gets %v", got)
	}
	if got := names(h.b.EntitlementsOf(s, "nobody")); len(got) != 0 {
		t.Errorf("an unknown user gets %v", got)
	}
	if eb, ec := h.b.EntitlementsOf(s, "bob"), h.b.EntitlementsOf(s, "carol@usher.test"); eb != ec {
		t.Error("bob and carol, of the same groups, got two resolutions")
	}
	if ea, eb := h.b.EntitlementsOf(s, "alice"), h.b.EntitlementsOf(s, "bob"); ea != eb {
		t.Error("alice and bob, of the same site groups, got two resolutions")
	}
	if got := s.DirectoryGroups([]string{"DOMAIN-USERS", "Engineering", "finance"}, []string{"", "", ""}); !slices.Equal(got, []string{demo.DomainUsers, demo.Finance}) {
		t.Errorf("DirectoryGroups by name: %v, want [%s %s]", got, demo.DomainUsers, demo.Finance)
	}
}

// TestDirectoryNormalizeDN: DNs compare whatever their case and the
// spaces around their commas and equals signs.
func TestDirectoryNormalizeDN(t *testing.T) {
	for _, tc := range []struct{ dn, want string }{
		{"CN=Staff,OU=Groups", "cn=staff,ou=groups"},
		{"CN=Staff, OU=Groups", "cn=staff,ou=groups"},
		{" cn = Staff ,  ou= Groups ", "cn=staff,ou=groups"},
		{`CN=Smith\, John,OU=Staff`, `cn=smith\, john,ou=staff`},
	} {
		if got := NormalizeDN(tc.dn); got != tc.want {
			t.Errorf("NormalizeDN(%q) = %q, want %q", tc.dn, got, tc.want)
		}
	}
}

// TestLogonName: a name as typed and the domain beside it.
func TestLogonName(t *testing.T) {
	for _, tc := range []struct{ siteDomain, typed, domain, want string }{
		{"", "alice", "", "alice"},
		{"DEMO", "alice", "", "alice"},
		{"DEMO", `DEMO\alice`, "", "alice"},
		{"DEMO", `demo\alice`, "", "alice"},
		{"DEMO", "alice@demo", "", "alice"},
		{"DEMO", "alice", "demo", "alice"},
		{"DEMO", `DEMO\alice`, "Demo", "alice"},
		{"DEMO", `USHER\alice`, "", `USHER\alice`},
		{"DEMO", "alice@usher.test", "", "alice@usher.test"},
		{"DEMO", "alice", "USHER", `USHER\alice`},
		{"DEMO", `USHER\alice`, "usher", `USHER\alice`},
		{"DEMO", `DEMO\alice`, "HEALTHY", ""},
		{"", `DEMO\`, "", ""},
		{"DEMO", `DEMO\`, "", ""},
		{"DEMO", "@demo", "", ""},
		{"DEMO", "", "", ""},
		{"DEMO", "", "DEMO", ""},
	} {
		if got := LogonName(tc.siteDomain, tc.typed, tc.domain); got != tc.want {
			t.Errorf("LogonName(%q, %q, %q) = %q, want %q", tc.siteDomain, tc.typed, tc.domain, got, tc.want)
		}
	}
}

// TestDirectorySettingsChange: new directory settings close the
// directory they replace and forget its users and their passwords; a
// configuration change that leaves the settings alone keeps both.
func TestDirectorySettingsChange(t *testing.T) {
	h := newDirHarness(t, nil)
	old := h.dir()
	h.mustLogon("alice", alicePassword)
	stamp := h.entry("alice").user.Directory
	gkey := guardKey(AccountUser, "alice")

	// Another change: the same directory, users and passwords.
	cfg := dirSite(t)
	cfg.Settings.Name = "renamed"
	h.publish(cfg)
	if h.dir() != old || old.closeCount() != 0 {
		t.Fatalf("a change that left the directory alone reopened it (%d closes)", old.closeCount())
	}
	h.mustLogon("alice", alicePassword)
	if auths, _ := old.calls("alice"); auths != 1 {
		t.Fatalf("%d binds, want 1", auths)
	}

	// New settings.
	cfg = dirSite(t)
	cfg.Directory.Servers = []string{"ldaps://dc2.usher.test"}
	h.publish(cfg)
	if got := old.closeCount(); got != 1 {
		t.Errorf("the replaced directory was closed %d times, want once", got)
	}
	next := h.dir()
	if next == old {
		t.Fatal("new settings did not open a new directory")
	}
	if got := h.settings[len(h.settings)-1].Servers; !slices.Equal(got, cfg.Directory.Servers) {
		t.Errorf("the new directory was opened with servers %v, want %v", got, cfg.Directory.Servers)
	}
	if h.entry("alice") != nil {
		t.Error("alice's entry outlived the directory it came from")
	}
	if h.b.cfg.Verified.Known(gkey, alicePassword, stamp) {
		t.Error("the password the old directory verified is still remembered")
	}
	h.mustLogon("alice", alicePassword)
	if auths, _ := next.calls("alice"); auths != 1 {
		t.Errorf("the new directory was asked %d times, want once", auths)
	}
	if auths, _ := old.calls("alice"); auths != 1 {
		t.Errorf("the old directory was asked again (%d binds)", auths)
	}

	// Disabled: the directory closes, and its users cannot log on.
	cfg = dirSite(t)
	cfg.Directory.Enabled = false
	h.publish(cfg)
	if got := next.closeCount(); got != 1 {
		t.Errorf("the disabled directory was closed %d times, want once", got)
	}
	if _, err := h.logon("alice", alicePassword); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("logon with the directory disabled: %v, want ErrBadCredentials", err)
	}
	if n := len(h.opened); n != 2 {
		t.Errorf("%d directories opened, want 2", n)
	}
}

// TestCloseDirectory: a broker that stops closes its directory.
func TestCloseDirectory(t *testing.T) {
	h := newDirHarness(t, nil)
	h.b.CloseDirectory()
	if got := h.dir().closeCount(); got != 1 {
		t.Errorf("%d closes, want 1", got)
	}
	if _, err := h.logon("alice", alicePassword); site.ErrorCode(err) != site.EUnavailable {
		t.Errorf("logon through a closed directory: %v, want it unavailable", err)
	}
}

// TestDirectorySettingsChangeDuringLogon: a password that the replaced
// directory verified is verified again by the new one, even when the
// replaced directory's answer came in while its settings changed.
func TestDirectorySettingsChangeDuringLogon(t *testing.T) {
	h := newDirHarness(t, nil)
	old := h.dir()
	release := old.hold()
	defer release()
	done := make(chan error, 1)
	go func() {
		_, err := h.logon("alice", alicePassword)
		done <- err
	}()
	select {
	case <-old.entered: // the old directory answered; the broker has not taken the answer yet
	case <-time.After(5 * time.Second):
		t.Fatal("the logon did not reach the directory")
	}
	cfg := dirSite(t)
	cfg.Directory.Servers = []string{"ldaps://dc2.usher.test"}
	h.publish(cfg)
	next := h.dir()
	release()
	<-done // verified by the old directory: succeeding or not, either will do

	// The new directory has read alice (a launch asked for her), and she
	// logs on with the password the old one verified.
	if _, err := h.b.User(context.Background(), "alice"); err != nil {
		t.Fatalf("User(alice): %v", err)
	}
	h.mustLogon("alice", alicePassword)
	if auths, _ := next.calls("alice"); auths != 1 {
		t.Errorf("the new directory was asked %d times for a password only the replaced one verified, want once", auths)
	}
}

// TestDirectoryDefaultTTL: settings that leave the TTL unset read a
// user's entry again after DefaultDirectoryTTL, not at every request.
func TestDirectoryDefaultTTL(t *testing.T) {
	h := newDirHarness(t, nil)
	cfg := *h.cfg
	cfg.Directory.GroupCacheTTLSeconds = 0
	h.publish(&cfg)
	h.mustLogon("alice", alicePassword)
	d := h.dir()
	for range 10 {
		h.clock.Advance(DefaultDirectoryTTL / 20)
		h.mustLogon("alice", alicePassword)
		h.b.EntitlementsOf(h.b.Snapshot(), "alice")
	}
	h.waitRefreshed("alice") // a read the logons started has ended, and is counted
	if _, lookups := d.calls("alice"); lookups != 0 {
		t.Fatalf("%d reads of the entry within the default TTL, want 0", lookups)
	}
	h.clock.Advance(DefaultDirectoryTTL)
	h.mustLogon("alice", alicePassword)
	h.waitRefreshed("alice")
}
