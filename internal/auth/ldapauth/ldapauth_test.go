package ldapauth

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/dirserver"
	"github.com/usher-vdi/usher/internal/dirserver/dirservertest"
)

// counting is a Metrics that counts.
type counting struct {
	mu        sync.Mutex
	ops       map[Op]int
	byServer  map[string]int // operations other than dials, by server
	maxOpen   map[string]int
	hits, mis int
}

func newCounting() *counting {
	return &counting{ops: map[Op]int{}, byServer: map[string]int{}, maxOpen: map[string]int{}}
}

func (m *counting) Operation(server string, op Op, _ Result, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops[op]++
	if op != OpDial {
		m.byServer[server]++
	}
}

func (m *counting) Pool(server string, _, open int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxOpen[server] = max(m.maxOpen[server], open)
}

func (m *counting) GroupCache(hit bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if hit {
		m.hits++
	} else {
		m.mis++
	}
}

// ldapOps returns the number of LDAP operations (every one but dials).
func (m *counting) ldapOps() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for op, c := range m.ops {
		if op != OpDial {
			n += c
		}
	}
	return n
}

func (m *counting) count(op Op) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops[op]
}

// testConfig is a Config for d's servers at urls, with uid as the user
// attribute and short timeouts.
func testConfig(d *dirserver.Directory, urls ...string) Config {
	return Config{
		Servers:          urls,
		CAPEM:            d.CAPEM,
		BindDN:           d.BindDN,
		BindPassword:     d.BindPassword,
		BaseDNs:          []string{dirserver.BaseDN},
		UserAttr:         "uid",
		Domain:           dirserver.Domain,
		UPNSuffix:        dirserver.UPNSuffix,
		DialTimeout:      2 * time.Second,
		OpTimeout:        2 * time.Second,
		PoolSize:         4,
		ReconnectBackoff: 200 * time.Millisecond,
	}
}

func mustNew(tb testing.TB, cfg Config, m Metrics) *Directory {
	tb.Helper()
	d, err := New(cfg, nil, m)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	return d
}

func ctxTimeout(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

func TestLogonValue(t *testing.T) {
	long := strings.Repeat("a", MaxNameLength+1)
	for _, tc := range []struct {
		name, attr, want string
		err              error
	}{
		{"alice", "uid", "alice", nil},
		{`USHER\alice`, "uid", "alice", nil},
		{`usher\alice`, "sAMAccountName", "alice", nil},
		{`OTHER\alice`, "uid", "", ErrWrongCredentials},
		{`\alice`, "uid", "", ErrWrongCredentials},
		{`USHER\`, "uid", "", ErrWrongCredentials},
		{"alice@usher.test", "uid", "alice", nil},
		{"alice@USHER.TEST", "uid", "alice", nil},
		{"alice@other.test", "uid", "", ErrWrongCredentials},
		{"@usher.test", "uid", "", ErrWrongCredentials},
		{"alice", "userPrincipalName", "alice@usher.test", nil},
		{`USHER\alice`, "userPrincipalName", "alice@usher.test", nil},
		{"alice@usher.test", "userPrincipalName", "alice@usher.test", nil},
		{"alice@other.test", "userPrincipalName", "alice@other.test", nil},
		{`USHER\a\b`, "uid", `a\b`, nil},
		{"*", "uid", "*", nil}, // escaped by the search, not refused here
		{" alice ", "uid", "alice", nil},
		{"ａｌｉｃｅ", "uid", "alice", nil}, // fullwidth
		{"ＡＬＩＣＥ", "uid", "ALICE", nil}, // case is the directory's matching rule's
		{"alice\u3000smith", "uid", "alice smith", nil},
		{`USHER\ alice`, "uid", "alice", nil},
		{"alice @ usher.test", "uid", "alice", nil},
		{"   ", "uid", "", ErrWrongCredentials},
		{"", "uid", "", ErrWrongCredentials},
		{long, "uid", "", ErrWrongCredentials},
	} {
		got, err := logonValue(tc.name, tc.attr, "USHER", "usher.test")
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("logonValue(%q, %s) = %q, %v; want %q, %v", tc.name, tc.attr, got, err, tc.want, tc.err)
		}
	}
}

func TestConfigRefusesWhatCannotWork(t *testing.T) {
	good := Config{Servers: []string{"ldaps://dc1.example.com"}, BindDN: "cn=svc,dc=example,dc=com",
		BindPassword: "s3cret", BaseDNs: []string{"dc=example,dc=com"}}
	if _, err := New(good, nil, nil); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"no servers":       func(c *Config) { c.Servers = nil },
		"https":            func(c *Config) { c.Servers = []string{"https://dc1"} },
		"path":             func(c *Config) { c.Servers = []string{"ldaps://dc1/dc=x"} },
		"no bind password": func(c *Config) { c.BindPassword = "" },
		"no base":          func(c *Config) { c.BaseDNs = nil },
		"bad base":         func(c *Config) { c.BaseDNs = []string{"not a dn"} },
		"user attr":        func(c *Config) { c.UserAttr = "mail" },
		"filter":           func(c *Config) { c.UserFilter = "(objectClass=user" },
		"ca":               func(c *Config) { c.CAPEM = []byte("not pem") },
		"nested":           func(c *Config) { c.NestedGroups = "recursive" },
	} {
		c := good
		mutate(&c)
		_, err := New(c, nil, nil)
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error shows the bind password: %v", name, err)
		}
	}
}

func TestAuthenticateByEveryNameForm(t *testing.T) {
	dir := dirservertest.Start(t, dirserver.Options{})
	srv := dir.Servers[0]
	const i = 42
	name := dirserver.UserName(i)
	for _, tc := range []struct {
		transport, url, attr string
	}{
		{"ldaps", srv.LDAPS, "uid"},
		{"starttls", srv.StartTLS, "uid"},
		{"ldaps", srv.LDAPS, "sAMAccountName"},
		{"starttls", srv.StartTLS, "userPrincipalName"},
	} {
		cfg := testConfig(dir, tc.url)
		cfg.UserAttr = tc.attr
		d := mustNew(t, cfg, nil)
		for _, logon := range []string{name, `USHER\` + name, `usher\` + name, name + "@usher.test", name + "@USHER.TEST"} {
			t.Run(tc.transport+"/"+tc.attr+"/"+logon, func(t *testing.T) {
				id, err := d.Authenticate(ctxTimeout(t, 10*time.Second), logon, dir.UserPassword)
				if err != nil {
					t.Fatal(err)
				}
				wantName := name
				if tc.attr == "userPrincipalName" {
					wantName = name + "@" + dirserver.UPNSuffix
				}
				if id.DN != dirserver.UserDN(name) || id.Name != wantName || id.DisplayName != "User 0042" {
					t.Errorf("identity %+v", id)
				}
				if got, want := sorted(id.Groups), sorted(dirserver.GroupsOf(i)); !slices.Equal(got, want) {
					t.Errorf("groups %v, want %v", got, want)
				}
				if len(id.GroupDNs) != len(id.Groups) || !slices.Contains(id.GroupDNs, dirserver.GroupDN(dirserver.AllStaff)) {
					t.Errorf("group DNs %v", id.GroupDNs)
				}
			})
		}
	}
}

func TestWrongCredentials(t *testing.T) {
	dir := dirservertest.Start(t, dirserver.Options{Users: 100})
	d := mustNew(t, testConfig(dir, dir.Servers[0].LDAPS), nil)
	ctx := ctxTimeout(t, 10*time.Second)
	for name, c := range map[string][2]string{
		"wrong password":         {dirserver.UserName(7), "not-the-password"},
		"unknown user":           {"nobody", dir.UserPassword},
		"empty password":         {dirserver.UserName(7), ""},
		"other domain":           {`OTHER\` + dirserver.UserName(7), dir.UserPassword},
		"other suffix":           {dirserver.UserName(7) + "@other.test", dir.UserPassword},
		"service account's name": {"usher-svc", dir.BindPassword},
	} {
		t.Run(name, func(t *testing.T) {
			id, err := d.Authenticate(ctx, c[0], c[1])
			if !errors.Is(err, ErrWrongCredentials) {
				t.Fatalf("Authenticate(%q) = %+v, %v; want ErrWrongCredentials", c[0], id, err)
			}
			if id.DN != "" {
				t.Errorf("identity %+v with the error", id)
			}
		})
	}
}

func TestAccountStates(t *testing.T) {
	dir := dirservertest.Start(t, dirserver.Options{Users: 100})
	d := mustNew(t, testConfig(dir, dir.Servers[0].StartTLS), nil)
	ctx := ctxTimeout(t, 20*time.Second)
	for _, tc := range []struct {
		name string
		want error
	}{
		{dirserver.Disabled, ErrAccountDisabled},
		{dirserver.LockedAD, ErrAccountLocked},
		{dirserver.LockedPPolicy, ErrAccountLocked},
		{dirserver.Expired, ErrPasswordExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := d.Authenticate(ctx, tc.name, dir.UserPassword); !errors.Is(err, tc.want) {
				t.Errorf("with the password: %v, want %v", err, tc.want)
			}
			if tc.name != dirserver.LockedPPolicy { // slapd refuses that bind whatever the password
				if _, err := d.Authenticate(ctx, tc.name, "wrong"); !errors.Is(err, ErrWrongCredentials) {
					t.Errorf("with a wrong password: %v, want ErrWrongCredentials (no state without the password)", err)
				}
			}
			id, err := d.Lookup(ctx, tc.name)
			if !errors.Is(err, tc.want) || id.DN != dirserver.UserDN(tc.name) {
				t.Errorf("Lookup = %+v, %v; want the identity and %v", id, err, tc.want)
			}
		})
	}
	t.Run("ppolicy locks after wrong passwords", func(t *testing.T) {
		name := dirserver.UserName(99)
		for range dirserver.MaxFailures {
			if _, err := d.Authenticate(ctx, name, "wrong"); !errors.Is(err, ErrWrongCredentials) {
				t.Fatalf("wrong password: %v", err)
			}
		}
		if _, err := d.Authenticate(ctx, name, dir.UserPassword); !errors.Is(err, ErrAccountLocked) {
			t.Fatalf("after %d wrong passwords: %v, want ErrAccountLocked", dirserver.MaxFailures, err)
		}
		dirservertest.Modify(t, dir.Servers[0], "dn: "+dirserver.UserDN(name)+"\nchangetype: modify\ndelete: pwdAccountLockedTime\n")
		if _, err := d.Authenticate(ctx, name, dir.UserPassword); err != nil {
			t.Fatalf("unlocked by the administrator: %v", err)
		}
	})
}

func TestNestedGroups(t *testing.T) {
	dir := dirservertest.Start(t, dirserver.Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	t.Run("three levels and a cycle", func(t *testing.T) {
		d := mustNew(t, testConfig(dir, dir.Servers[0].LDAPS), nil)
		for _, i := range []int{1, 500, dir.Users} {
			id, err := d.Authenticate(ctx, dirserver.UserName(i), dir.UserPassword)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := sorted(id.Groups), sorted(dirserver.GroupsOf(i)); !slices.Equal(got, want) {
				t.Errorf("user %d: groups %v, want %v", i, got, want)
			}
		}
	})
	t.Run("depth limit", func(t *testing.T) {
		cfg := testConfig(dir, dir.Servers[0].LDAPS)
		cfg.MaxNestingDepth = 2
		d := mustNew(t, cfg, nil)
		id, err := d.Authenticate(ctx, dirserver.UserName(1), dir.UserPassword)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sorted(id.Groups), sorted([]string{"team01", "dept01", "cycle-a", "cycle-b"}); !slices.Equal(got, want) {
			t.Errorf("groups within 2 levels %v, want %v", got, want)
		}
	})
	t.Run("in-chain filter", func(t *testing.T) {
		// slapd does not implement AD's in-chain rule (it matches
		// nothing), so this checks the filter sent, not the answer.
		cfg := testConfig(dir, dir.Servers[0].LDAPS)
		cfg.NestedGroups = NestedInChain
		d := mustNew(t, cfg, nil)
		var filters []string
		var mu sync.Mutex
		d.traceFilter = func(f string) { mu.Lock(); filters = append(filters, f); mu.Unlock() }
		if _, err := d.Authenticate(ctx, dirserver.UserName(1), dir.UserPassword); err != nil {
			t.Fatal(err)
		}
		want := "(member:1.2.840.113556.1.4.1941:=" + dirserver.UserDN(dirserver.UserName(1)) + ")"
		if !slices.Contains(filters, want) {
			t.Errorf("filters %q, want one %q", filters, want)
		}
	})
	t.Run("auto is a search on OpenLDAP", func(t *testing.T) {
		m := newCounting()
		d := mustNew(t, testConfig(dir, dir.Servers[0].LDAPS), m)
		if _, err := d.Authenticate(ctx, dirserver.UserName(1), dir.UserPassword); err != nil {
			t.Fatal(err)
		}
		if m.count(OpRootDSE) != 1 || m.count(OpGroupSearch) < 3 {
			t.Errorf("root DSE reads %d, group searches %d", m.count(OpRootDSE), m.count(OpGroupSearch))
		}
	})
}

func TestGroupCache(t *testing.T) {
	dir := dirservertest.Start(t, dirserver.Options{Users: 100})
	m := newCounting()
	cfg := testConfig(dir, dir.Servers[0].LDAPS)
	cfg.GroupCacheTTL = time.Hour
	d := mustNew(t, cfg, m)
	ctx := ctxTimeout(t, 10*time.Second)
	first, err := d.Authenticate(ctx, dirserver.UserName(3), dir.UserPassword)
	if err != nil {
		t.Fatal(err)
	}
	searches := m.count(OpGroupSearch)
	second, err := d.Authenticate(ctx, dirserver.UserName(3), dir.UserPassword)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.count(OpGroupSearch); got != searches {
		t.Errorf("a cached logon did %d group searches", got-searches)
	}
	if !slices.Equal(first.Groups, second.Groups) || m.hits != 1 {
		t.Errorf("groups %v then %v, %d hits", first.Groups, second.Groups, m.hits)
	}
	second.Groups[0] = "changed" // the cache keeps its own copy
	third, _ := d.Authenticate(ctx, dirserver.UserName(3), dir.UserPassword)
	if !slices.Equal(first.Groups, third.Groups) {
		t.Errorf("the cache's groups changed through a caller: %v", third.Groups)
	}
}

// TestInjection sends names with filter metacharacters: each search asks
// for exactly the name given, escaped, and nobody is authenticated.
func TestInjection(t *testing.T) {
	dir := dirservertest.Start(t, dirserver.Options{Users: 100})
	d := mustNew(t, testConfig(dir, dir.Servers[0].LDAPS), nil)
	var mu sync.Mutex
	var filters []string
	d.traceFilter = func(f string) { mu.Lock(); filters = append(filters, f); mu.Unlock() }
	ctx := ctxTimeout(t, 20*time.Second)
	for _, tc := range []struct{ name, filter string }{
		{"*", `(uid=\2a)`},
		{"user*", `(uid=user\2a)`},
		{"s*", `(uid=s\2a)`},
		{"*)(uid=*", `(uid=\2a\29\28uid=\2a)`},
		{"user0001)(|(uid=*", `(uid=user0001\29\28|\28uid=\2a)`},
		{`USHER\user0001\`, `(uid=user0001\5c)`},
		{"user0001\x00", `(uid=user0001\00)`},
		{"user0001\x00)(uid=*", `(uid=user0001\00\29\28uid=\2a)`},
		{"(uid=user0001)", `(uid=\28uid=user0001\29)`},
		{strings.Repeat("a", MaxNameLength+1), ""}, // refused before any search
		{strings.Repeat("*", MaxNameLength), "(uid=" + strings.Repeat(`\2a`, MaxNameLength) + ")"},
	} {
		mu.Lock()
		filters = nil
		mu.Unlock()
		for _, password := range []string{dir.UserPassword, "*"} {
			if id, err := d.Authenticate(ctx, tc.name, password); !errors.Is(err, ErrWrongCredentials) {
				t.Errorf("Authenticate(%.40q) = %+v, %v; want ErrWrongCredentials", tc.name, id, err)
			}
		}
		if id, err := d.Lookup(ctx, tc.name); !errors.Is(err, ErrNotFound) {
			t.Errorf("Lookup(%.40q) = %+v, %v; want ErrNotFound", tc.name, id, err)
		}
		mu.Lock()
		for _, f := range filters {
			if f != tc.filter {
				t.Errorf("name %.40q: filter sent %.80q, want %.80q", tc.name, f, tc.filter)
			}
		}
		if tc.filter != "" && len(filters) == 0 {
			t.Errorf("name %.40q: no search", tc.name)
		}
		mu.Unlock()
	}
	d.traceFilter = nil

	// A name holding '*' matches that one entry and no other.
	id, err := d.Authenticate(ctx, dirserver.Star, dir.UserPassword)
	if err != nil || id.DN != dirserver.UserDN(dirserver.Star) {
		t.Errorf("Authenticate(%q) = %+v, %v", dirserver.Star, id, err)
	}
	// A name matching two entries is refused.
	if _, err := d.Authenticate(ctx, dirserver.Twin, dir.UserPassword); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("twin: %v, want ErrAmbiguous", err)
	}
}

func TestCertificateFromAnotherCA(t *testing.T) {
	dir := dirservertest.Start(t, dirserver.Options{Users: 10})
	other, err := dirserver.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{dir.Servers[0].LDAPS, dir.Servers[0].StartTLS} {
		cfg := testConfig(dir, url)
		cfg.CAPEM = other.PEM
		d := mustNew(t, cfg, nil)
		_, err := d.Authenticate(ctxTimeout(t, 10*time.Second), dirserver.UserName(1), dir.UserPassword)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%s: %v, want ErrUnavailable", url, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, url) || !strings.Contains(msg, "certificate") || strings.Contains(msg, dir.BindPassword) {
			t.Errorf("error %q: want the server and the certificate named, never the bind password", msg)
		}
		if err := d.Check(ctxTimeout(t, 10*time.Second)); err == nil || !strings.Contains(err.Error(), url) {
			t.Errorf("Check: %v", err)
		}
	}
}

// TestPlainOnlyWhenAllowed checks that an ldap:// server is used over
// StartTLS, that one that does not do StartTLS gets no credentials, and
// that plain LDAP works only with AllowPlain.
func TestPlainOnlyWhenAllowed(t *testing.T) {
	dir := dirservertest.Start(t, dirserver.Options{Users: 10})
	ctx := ctxTimeout(t, 10*time.Second)
	for _, allowPlain := range []bool{false, true} {
		cfg := testConfig(dir, dir.Servers[0].StartTLS)
		cfg.AllowPlain = allowPlain
		d := mustNew(t, cfg, nil)
		if _, err := d.Authenticate(ctx, dirserver.UserName(1), dir.UserPassword); err != nil {
			t.Fatalf("AllowPlain %v: %v", allowPlain, err)
		}
		c, err := d.servers[0].acquire(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		_, isTLS := c.l.TLSConnectionState()
		d.servers[0].release(c)
		if isTLS == allowPlain {
			t.Errorf("AllowPlain %v: connection over TLS: %v", allowPlain, isTLS)
		}
	}

	// A server that does not answer StartTLS: no bind is sent.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	received := make(chan []byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			received <- nil
			return
		}
		c.SetDeadline(time.Now().Add(2 * time.Second))
		b, _ := io.ReadAll(io.LimitReader(c, 1024)) // until the client gives up and closes
		c.Close()
		received <- b
	}()
	cfg := testConfig(dir, "ldap://"+l.Addr().String())
	cfg.OpTimeout, cfg.DialTimeout = 300*time.Millisecond, 300*time.Millisecond
	d := mustNew(t, cfg, nil)
	if _, err := d.Authenticate(ctx, dirserver.UserName(1), dir.UserPassword); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a server without StartTLS: %v, want ErrUnavailable", err)
	}
	b := <-received
	if !strings.Contains(string(b), "1.3.6.1.4.1.1466.20037") {
		t.Errorf("the client sent %q, not a StartTLS request", b)
	}
	if strings.Contains(string(b), dir.BindPassword) || strings.Contains(string(b), dir.UserPassword) {
		t.Errorf("a password crossed in the clear: %q", b)
	}
}

func TestFailover(t *testing.T) {
	dir := dirservertest.Start(t, dirserver.Options{Users: 100, Servers: 2})
	s0, s1 := dir.Servers[0], dir.Servers[1]
	m := newCounting()
	cfg := testConfig(dir, s0.LDAPS, s1.StartTLS)
	d := mustNew(t, cfg, m)
	ctx := ctxTimeout(t, 30*time.Second)
	logon := func(i int) time.Duration {
		t.Helper()
		start := time.Now()
		if _, err := d.Authenticate(ctx, dirserver.UserName(i), dir.UserPassword); err != nil {
			t.Fatalf("logon %d: %v", i, err)
		}
		return time.Since(start)
	}
	logon(1)
	if m.byServer[s1.StartTLS] != 0 {
		t.Fatalf("the second server was used while the first was up")
	}
	dirservertest.Stop(t, s0)
	for i := 2; i <= 20; i++ {
		if took := logon(i); took > cfg.OpTimeout {
			t.Errorf("logon %d with the first server down took %v, more than the operation timeout", i, took)
		}
	}
	if m.byServer[s1.StartTLS] == 0 {
		t.Fatalf("the second server was not used")
	}
	used0 := m.byServer[s0.LDAPS]
	dirservertest.StartServer(t, s0)
	// The first server is tried again once its backoff (doubled on every
	// failed retry) has passed, and used from then on.
	deadline := time.Now().Add(5 * time.Second)
	for i := 21; m.byServer[s0.LDAPS] == used0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the first server not used again within 5 s of its return")
		}
		time.Sleep(50 * time.Millisecond)
		logon(i)
	}
	before := m.byServer[s1.StartTLS]
	logon(98)
	logon(99)
	if m.byServer[s1.StartTLS] != before {
		t.Errorf("the second server still used after the first came back: %v", m.byServer)
	}
}

// TestStoppedMidStorm stops the only server while 100 clients log on
// over and over: every logon in flight ends, with ErrUnavailable, within
// the operation timeout, and nothing is left running (TestMain checks
// for leaked goroutines).
func TestStoppedMidStorm(t *testing.T) {
	for _, how := range []string{"stop", "kill", "pause"} {
		t.Run(how, func(t *testing.T) {
			dir := dirservertest.Start(t, dirserver.Options{Users: 100})
			s := dir.Servers[0]
			cfg := testConfig(dir, s.LDAPS)
			cfg.OpTimeout, cfg.PoolSize = time.Second, 8
			d := mustNew(t, cfg, nil)
			ctx := ctxTimeout(t, 30*time.Second)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var ok, unavailable, other int
			var slowest time.Duration
			var otherErr error
			stopped := make(chan struct{})
			for g := range 100 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; ; n++ {
						start := time.Now()
						_, err := d.Authenticate(ctx, dirserver.UserName(1+(g+n)%100), dir.UserPassword)
						took := time.Since(start)
						mu.Lock()
						switch {
						case err == nil:
							ok++
						case errors.Is(err, ErrUnavailable):
							unavailable++
							slowest = max(slowest, took)
						default:
							other++
							otherErr = err
						}
						mu.Unlock()
						if err != nil {
							return
						}
						select {
						case <-stopped:
							if n > 1000 {
								return
							}
						default:
						}
					}
				}()
			}
			// The storm is on once logons succeed (on a loaded machine the
			// first ldaps binds take a while), then the server goes.
			for up := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				mu.Lock()
				n := ok
				mu.Unlock()
				if n >= 20 || time.Now().After(up) {
					break
				}
			}
			switch how {
			case "stop":
				dirservertest.Stop(t, s)
			case "kill":
				dirservertest.Kill(t, s)
			case "pause":
				dirservertest.Pause(t, s)
				defer dirservertest.Resume(t, s)
			}
			close(stopped)
			wg.Wait()
			t.Logf("%s: %d logons, %d unavailable (slowest %v), %d other", how, ok, unavailable, slowest, other)
			if ok == 0 || unavailable == 0 || other != 0 {
				t.Errorf("%d ok, %d unavailable, %d other (%v)", ok, unavailable, other, otherErr)
			}
			// A logon may wait for a pooled connection, then for one
			// operation's timeout, then for a fresh dial's.
			if limit := cfg.OpTimeout + cfg.DialTimeout + time.Second; slowest > limit {
				t.Errorf("slowest failed logon took %v, more than %v", slowest, limit)
			}
			start := time.Now()
			if _, err := d.Authenticate(ctx, dirserver.UserName(1), dir.UserPassword); !errors.Is(err, ErrUnavailable) {
				t.Errorf("after the outage: %v", err)
			} else if took := time.Since(start); took > 100*time.Millisecond {
				t.Errorf("a logon while the server is known down took %v", took)
			}
		})
	}
}

// TestStormUsesThePool logs 50 users on 200 times at once: the server
// sees no more connections than the pool holds.
func TestStormUsesThePool(t *testing.T) {
	dir := dirservertest.Start(t, dirserver.Options{Users: 100})
	s := dir.Servers[0]
	m := newCounting()
	cfg := testConfig(dir, s.LDAPS)
	cfg.PoolSize = 4
	d := mustNew(t, cfg, m)
	ctx := ctxTimeout(t, 30*time.Second)
	_, before := dirservertest.Connections(t, s)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for g := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := d.Authenticate(ctx, dirserver.UserName(1+g%50), dir.UserPassword); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	current, after := dirservertest.Connections(t, s)
	opened := after - before - 1 // less this call's own
	t.Logf("200 logons: %d connections opened, %d open now, %d LDAP operations", opened, current-1, m.ldapOps())
	if opened > cfg.PoolSize || m.count(OpDial) > cfg.PoolSize {
		t.Errorf("%d connections opened (%d dials), pool of %d", opened, m.count(OpDial), cfg.PoolSize)
	}
	if m.maxOpen[s.LDAPS] > cfg.PoolSize {
		t.Errorf("%d connections open at once, pool of %d", m.maxOpen[s.LDAPS], cfg.PoolSize)
	}
}

func TestCheck(t *testing.T) {
	dir := dirservertest.Start(t, dirserver.Options{Users: 10})
	ctx := ctxTimeout(t, 10*time.Second)
	if err := mustNew(t, testConfig(dir, dir.Servers[0].LDAPS, dir.Servers[0].StartTLS), nil).Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	cfg := testConfig(dir, dir.Servers[0].LDAPS, "ldaps://127.0.0.1:1")
	cfg.BindPassword = "wrong-secret-value"
	err := mustNew(t, cfg, nil).Check(ctx)
	if err == nil {
		t.Fatal("Check with a wrong bind password and a closed port: no error")
	}
	msg := err.Error()
	for _, want := range []string{dir.Servers[0].LDAPS, "refuses the service account", "ldaps://127.0.0.1:1", "refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, cfg.BindPassword) {
		t.Errorf("error %q shows the bind password", msg)
	}
}

// BenchmarkAuthenticate logs users on: cold, with a fresh Directory (new
// connections, no cached groups) per logon; warm, with one Directory whose
// group cache holds the user. It reports the LDAP operations and dials
// per logon.
func BenchmarkAuthenticate(b *testing.B) {
	dir := dirservertest.Start(b, dirserver.Options{})
	url := dir.Servers[0].LDAPS
	ctx := context.Background()
	b.Run("cold", func(b *testing.B) {
		m := newCounting()
		n := 0
		for b.Loop() {
			d, err := New(testConfig(dir, url), nil, m)
			if err != nil {
				b.Fatal(err)
			}
			n++
			if _, err := d.Authenticate(ctx, dirserver.UserName(1+n%dir.Users), dir.UserPassword); err != nil {
				b.Fatal(err)
			}
			d.Close()
		}
		b.ReportMetric(float64(m.ldapOps())/float64(n), "ops/logon")
		b.ReportMetric(float64(m.count(OpDial))/float64(n), "dials/logon")
	})
	b.Run("warm", func(b *testing.B) {
		m := newCounting()
		d := mustNew(b, testConfig(dir, url), m)
		for i := range 10 {
			if _, err := d.Authenticate(ctx, dirserver.UserName(1+i), dir.UserPassword); err != nil {
				b.Fatal(err)
			}
		}
		base, dials := m.ldapOps(), m.count(OpDial)
		n := 0
		for b.Loop() {
			n++
			if _, err := d.Authenticate(ctx, dirserver.UserName(1+n%10), dir.UserPassword); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(m.ldapOps()-base)/float64(n), "ops/logon")
		b.ReportMetric(float64(m.count(OpDial)-dials)/float64(n), "dials/logon")
	})
}

// lockedBuffer is a log written from any goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestOneKeyPerEntry checks that every spelling slapd matches to one
// entry (case, width, spaces) reaches it under one key, and that a name
// slapd matches to an entry of another name (a second uid value) is
// refused, with a log line saying why, rather than counted apart.
func TestOneKeyPerEntry(t *testing.T) {
	dir := dirservertest.Start(t, dirserver.Options{Users: 10})
	name := dirserver.UserName(5)
	dirservertest.Modify(t, dir.Servers[0], "dn: "+dirserver.UserDN(name)+"\nchangetype: modify\nadd: uid\nuid: robert\n")
	var logs lockedBuffer
	d, err := New(testConfig(dir, dir.Servers[0].LDAPS), slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx := ctxTimeout(t, 20*time.Second)
	key, err := d.Key(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, logon := range []string{name, strings.ToUpper(name), " " + name, name + "  ", "ｕｓｅｒ０００５", "ＵＳＥＲ0005",
		`USHER\ ` + name, name + "\u3000@usher.test"} {
		if k, err := d.Key(logon); k != key || err != nil {
			t.Errorf("Key(%q) = %q, %v; want %q", logon, k, err, key)
		}
		id, err := d.Authenticate(ctx, logon, dir.UserPassword)
		if err != nil || id.DN != dirserver.UserDN(name) || id.Name != name {
			t.Errorf("Authenticate(%q) = %+v, %v; want %s", logon, id, err, name)
		}
	}
	if id, err := d.Authenticate(ctx, "robert", dir.UserPassword); !errors.Is(err, ErrNameMismatch) {
		t.Errorf("Authenticate by the entry's second uid = %+v, %v; want ErrNameMismatch", id, err)
	}
	if _, err := d.Lookup(ctx, "ROBERT"); !errors.Is(err, ErrNameMismatch) {
		t.Errorf("Lookup by the entry's second uid: %v; want ErrNameMismatch", err)
	}
	if !strings.Contains(logs.String(), "matching rule differs") || !strings.Contains(logs.String(), dirserver.UserDN(name)) {
		t.Errorf("no log line names the refused entry:\n%s", logs.String())
	}
}
