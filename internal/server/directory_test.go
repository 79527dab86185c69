package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/ctx1"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/dirserver"
	"github.com/usher-vdi/usher/internal/dirserver/dirservertest"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/site"
)

// directorySite is a demo site whose users come from a real slapd (two
// servers with the same data: ldaps first, StartTLS second), beside one
// local user. The demo's own users are gone (they are named as the
// directory's are, and a site's users come first). all-staff, which every
// directory user reaches through two levels of nested groups, is entitled
// to the office applications; "engineers" stands for the directory group
// team50 by its DN (spelt in another case, with spaces) and is entitled
// to the engineering applications.
type directorySite struct {
	*server.Server
	dir *dirserver.Directory
	// samba is set for a Samba AD domain controller, else slapd.
	samba bool
	// engineer is a member of the group that "engineers" names by DN,
	// teamDN; clerk is not.
	engineer, clerk, teamDN string
}

const (
	localUser     = "alice"
	localPassword = "alice-pw-1234"
)

// startDirectorySite starts the site on two slapd servers (ldaps first,
// StartTLS second), or with samba on one Samba AD domain controller
// (ldaps, then StartTLS to the same one). opts change the server's
// configuration before it opens.
func startDirectorySite(t *testing.T, samba bool, opts ...func(*server.Config)) *directorySite {
	t.Helper()
	var d *dirserver.Directory
	var servers []string
	userAttr := site.AttrUID
	if samba {
		d = dirservertest.StartSamba(t, dirserver.Options{Users: 40})
		servers = []string{d.Servers[0].LDAPS, d.Servers[0].StartTLS}
		userAttr = site.AttrSAMAccountName
	} else {
		d = dirservertest.Start(t, dirserver.Options{Servers: 2})
		servers = []string{d.Servers[0].LDAPS, d.Servers[1].StartTLS}
	}
	// A member of the last team but one (written with another case and
	// spaces), and one of a team halfway.
	engineer := dirserver.UserName(d.Users - 10)
	ds := &directorySite{dir: d, samba: samba, engineer: engineer, clerk: dirserver.UserName(d.Users / 2),
		teamDN: "CN=" + dirserver.Team(d.Users-10) + ", OU=groups, DC=usher, DC=test"}
	ctx := t.Context()
	params := auth.Params{Iterations: 1, MemoryKiB: 1024, Parallelism: 1, SaltLen: 16, KeyLen: 32}
	cfg := server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true,
		DemoPassword: "demo-pw-1234", SimVDAs: -1, SimLogonDelay: -1, HeartbeatInterval: 200 * time.Millisecond,
		PasswordParams: params, SourceFree: -1} // the refusals below come from one address
	for _, o := range opts {
		o(&cfg)
	}
	s, err := server.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	hash, err := auth.HashPassword(localPassword, cfg.PasswordParams)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Store().Update(ctx, func(tx site.Tx) error {
		_, err := site.Mutate(ctx, tx, func(c *site.Config) error {
			c.Users = []site.User{{Name: localUser, Groups: []string{demo.DomainUsers}, PasswordHash: hash}}
			for i := range c.Machines {
				c.Machines[i].AssignedUser = ""
			}
			var kept []site.Entitlement
			for _, e := range c.Entitlements {
				e.Users = nil
				if len(e.Groups) > 0 {
					kept = append(kept, e)
				}
			}
			c.Entitlements = append(kept,
				site.Entitlement{Name: "all-staff-office", DeliveryGroup: demo.OfficeApps, Groups: []string{dirserver.AllStaff}},
				site.Entitlement{Name: "engineers-apps", DeliveryGroup: demo.EngineeringApps, Groups: []string{"engineers"}})
			c.Groups = append(c.Groups, site.Group{Name: dirserver.AllStaff}, site.Group{Name: "engineers", DN: ds.teamDN})
			c.Directory = site.Directory{Enabled: true, Servers: servers,
				CABundle: string(d.CAPEM), BindDN: d.BindDN, BindPassword: d.BindPassword,
				UserBaseDNs: []string{dirserver.BaseDN}, GroupBaseDNs: []string{dirserver.GroupsDN}, UserAttribute: userAttr,
				NetBIOSDomain: dirserver.Domain, UPNSuffix: dirserver.UPNSuffix, DialTimeoutSeconds: 1, TimeoutSeconds: 2,
				AdminGroups: []string{ds.teamDN}}
			return nil
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Broker().Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitRegistered(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	ds.Server = s
	return ds
}

// login posts a REST logon and returns the status, the token and the
// user name answered.
func (s *directorySite) login(t *testing.T, name, password string) (code int, token, user string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"username": name, "password": password})
	resp, err := http.Post(s.URL()+"/api/v1/login", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Token, User string
	}
	b, _ := io.ReadAll(resp.Body)
	json.Unmarshal(b, &out)
	return resp.StatusCode, out.Token, out.User
}

// resources lists what a token's user may use.
func (s *directorySite) resources(t *testing.T, token string) (int, []string) {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL()+"/api/v1/resources", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Resources []struct{ Name string }
	}
	json.NewDecoder(resp.Body).Decode(&out)
	var names []string
	for _, r := range out.Resources {
		names = append(names, r.Name)
	}
	return resp.StatusCode, names
}

// appData asks for the user's applications over NFuse and returns the
// answer's ErrorId ("" for none) and the applications' names.
func (s *directorySite) appData(t *testing.T, creds string) (string, []string) {
	t.Helper()
	body := `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE NFuseProtocol SYSTEM "NFuse.dtd"><NFuseProtocol version="5.4">` +
		`<RequestAppData><Scope traverse="subtree"/><DesiredDetails>defaults</DesiredDetails><ServerType>all</ServerType><ClientType>ica30</ClientType>` +
		creds + `</RequestAppData></NFuseProtocol>`
	resp, err := http.Post(s.URL()+"/scripts/wpnbr.dll", "text/xml", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if m := errorIDRE.FindSubmatch(b); m != nil {
		return string(m[1]), nil
	}
	var names []string
	for _, m := range inNameRE.FindAllSubmatch(b, -1) {
		names = append(names, string(m[1]))
	}
	return "", names
}

var (
	errorIDRE = regexp.MustCompile(`<ErrorId>([^<]*)</ErrorId>`)
	inNameRE  = regexp.MustCompile(`<InName>([^<]*)</InName>`)
)

func cleartextCreds(user, password, domain string) string {
	d := ""
	if domain != "" {
		d = `<Domain type="NT">` + domain + `</Domain>`
	}
	return `<Credentials><UserName>` + user + `</UserName><Password encoding="cleartext">` + password + `</Password>` + d + `</Credentials>`
}

func ctx1Creds(user, password, domain string) string {
	return `<Credentials><UserName>` + user + `</UserName><Password encoding="ctx1">` + ctx1.Encode(password) +
		`</Password><Domain type="NT">` + domain + `</Domain></Credentials>`
}

// TestDirectoryLogons logs directory users on over REST and NFuse by every
// form of their names, against a real slapd, and checks what they may
// use through nested groups and a group named by DN; the accounts the
// directory refuses; and that the site's own user is untouched.
func TestDirectoryLogons(t *testing.T) { testDirectoryLogons(t, startDirectorySite(t, false)) }

// TestDirectoryLogonsSamba is TestDirectoryLogons against Samba's Active
// Directory domain controller: AD's schema, its in-chain matching rule
// for nested groups, its userAccountControl, lockoutTime and pwdLastSet,
// and its bind errors (data 533, 775, 773).
func TestDirectoryLogonsSamba(t *testing.T) { testDirectoryLogons(t, startDirectorySite(t, true)) }

func testDirectoryLogons(t *testing.T, s *directorySite) {
	office, engineering := s.resourcesOf(t, demo.OfficeApps), s.resourcesOf(t, demo.EngineeringApps)
	pw := s.dir.UserPassword

	t.Run("REST, three name forms", func(t *testing.T) {
		var want []string
		for _, name := range []string{s.engineer, dirserver.Domain + `\` + s.engineer, strings.ToLower(dirserver.Domain) + `\` + s.engineer,
			s.engineer + "@" + dirserver.UPNSuffix} {
			code, token, user := s.login(t, name, pw)
			if code != 200 || user != s.engineer {
				t.Fatalf("logon as %s: %d, user %q; want 200 as %s", name, code, user, s.engineer)
			}
			code, got := s.resources(t, token)
			if code != 200 {
				t.Fatalf("resources of %s: %d", name, code)
			}
			if want == nil {
				want = got
			} else if !slices.Equal(got, want) {
				t.Fatalf("logged on as %s, %s may use %d resources; as another form, %d", name, s.engineer, len(got), len(want))
			}
		}
		// all-staff through team -> department -> all-staff; engineers by DN.
		for _, r := range []string{office[0], engineering[0]} {
			if !slices.Contains(want, r) {
				t.Errorf("%s may not use %q: %v", s.engineer, r, want)
			}
		}
		code, token, _ := s.login(t, s.clerk, pw)
		if code != 200 {
			t.Fatalf("logon as %s: %d", s.clerk, code)
		}
		_, got := s.resources(t, token)
		if !slices.Contains(got, office[0]) || slices.Contains(got, engineering[0]) {
			t.Errorf("%s (not in the engineers' team) may use %v; want the office applications only", s.clerk, got)
		}
	})

	t.Run("NFuse, three name forms, cleartext and ctx1", func(t *testing.T) {
		for _, creds := range []string{
			cleartextCreds(s.engineer, pw, ""),
			cleartextCreds(s.engineer, pw, dirserver.Domain),
			cleartextCreds(dirserver.Domain+`\`+s.engineer, pw, ""),
			cleartextCreds(s.engineer+"@"+dirserver.UPNSuffix, pw, ""),
			ctx1Creds(s.engineer, pw, dirserver.Domain),
		} {
			id, apps := s.appData(t, creds)
			if id != "" || !slices.Contains(apps, engineering[0]) {
				t.Fatalf("%s: ErrorId %q, %d applications; want %q among them", creds, id, len(apps), engineering[0])
			}
		}
	})

	t.Run("refused accounts", func(t *testing.T) {
		cases := []struct {
			name, password string
			rest           int
			nfuse          string
		}{
			{s.engineer, "wrong-password", 401, "failed-credentials"},
			{"nobody-here", pw, 401, "failed-credentials"},
			{"OTHERDOMAIN\\" + s.engineer, pw, 401, "failed-credentials"},
			{dirserver.Disabled, pw, 403, "account-disabled"},
			{dirserver.LockedAD, pw, 403, "account-locked-out"},
			{dirserver.Expired, pw, 403, "must-change-credentials"},
			{dirserver.Twin, pw, 401, "failed-credentials"},
			{"user09*", pw, 401, "failed-credentials"}, // never a wildcard
			{"*", pw, 401, "failed-credentials"},
			{"user0990)(uid=*", pw, 401, "failed-credentials"},
			{dirserver.Star, "wrong-password", 401, "failed-credentials"},
		}
		if !s.samba { // Samba has no ppolicy overlay
			cases = append(cases, struct {
				name, password string
				rest           int
				nfuse          string
			}{dirserver.LockedPPolicy, pw, 403, "account-locked-out"})
		}
		for _, c := range cases {
			if code, _, _ := s.login(t, c.name, c.password); code != c.rest {
				t.Errorf("REST logon as %q: %d, want %d", c.name, code, c.rest)
			}
			if id, _ := s.appData(t, cleartextCreds(c.name, c.password, "")); id != c.nfuse {
				t.Errorf("NFuse logon as %q: ErrorId %q, want %q", c.name, id, c.nfuse)
			}
		}
	})

	t.Run("a name holding a star matches itself only", func(t *testing.T) {
		if s.samba {
			t.Skip("AD refuses a '*' in sAMAccountName")
		}
		if code, _, user := s.login(t, dirserver.Star, pw); code != 200 || user != dirserver.Star {
			t.Errorf("logon as %q: %d as %q", dirserver.Star, code, user)
		}
	})

	t.Run("the site's own user", func(t *testing.T) {
		code, token, user := s.login(t, localUser, localPassword)
		if code != 200 || user != localUser {
			t.Fatalf("local logon: %d %q", code, user)
		}
		if _, got := s.resources(t, token); !slices.Contains(got, office[0]) {
			t.Errorf("the local user may use %v", got)
		}
	})

	t.Run("launch", func(t *testing.T) {
		_, token, _ := s.login(t, s.engineer, pw)
		req, _ := http.NewRequest("POST", s.URL()+"/api/v1/resources/"+url.PathEscape(engineering[0])+"/launch", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), s.engineer) {
			t.Fatalf("launch by a directory user: %d %s", resp.StatusCode, b)
		}
	})

	t.Run("admins from an admin group", func(t *testing.T) {
		admin := func(auth func(*http.Request), method, path string) (int, string) {
			t.Helper()
			req, _ := http.NewRequest(method, s.URL()+path, nil)
			auth(req)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		basic := func(user, password string) func(*http.Request) {
			return func(r *http.Request) { r.SetBasicAuth(user, password) }
		}
		if code, body := admin(basic(dirserver.Domain+`\`+s.engineer, pw), "GET", "/api/v1/admin/directory"); code != 200 || strings.Contains(body, s.dir.BindPassword) {
			t.Fatalf("a member of the admin group on the admin API: %d %.200s", code, body)
		}
		for _, c := range [][2]string{{s.clerk, pw}, {s.engineer, "wrong-password"}, {localUser, localPassword}} {
			if code, _ := admin(basic(c[0], c[1]), "GET", "/api/v1/admin/directory"); code != 401 {
				t.Errorf("%s on the admin API: %d, want 401", c[0], code)
			}
		}
		code, body := admin(basic(s.engineer, pw), "POST", "/api/v1/admin/tokens")
		var tok struct{ Token string }
		json.Unmarshal([]byte(body), &tok)
		if code != 201 || tok.Token == "" {
			t.Fatalf("an admin token for a directory admin: %d %s", code, body)
		}
		bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok.Token) }
		if code, _ := admin(bearer, "GET", "/api/v1/admin/directory"); code != 200 {
			t.Errorf("the directory admin's token: %d", code)
		}
		// A user token is no admin token.
		_, userToken, _ := s.login(t, s.engineer, pw)
		if code, _ := admin(func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+userToken) }, "GET", "/api/v1/admin/directory"); code != 401 {
			t.Errorf("a user token on the admin API: %d", code)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		_, body := get(t, s.URL()+"/metrics")
		for _, want := range []string{`usher_directory_operations_total{op="user_bind",result="ok",server="` + s.dir.Servers[0].LDAPS + `"}`,
			`usher_directory_connections{server="` + s.dir.Servers[0].LDAPS + `",state="open"}`} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

// resourcesOf returns the names of the applications a delivery group
// publishes, in the snapshot's order.
func (s *directorySite) resourcesOf(t *testing.T, group string) []string {
	t.Helper()
	var out []string
	for _, r := range s.Broker().Snapshot().Config().Applications {
		if slices.Contains(r.DeliveryGroups, group) {
			out = append(out, r.Name)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s publishes no application", group)
	}
	return out
}

// TestDirectoryFailoverAndOutage stops the first directory server (new
// logons go to the second), then both in the middle of a storm of
// logons: users already verified keep enumerating, new ones are refused
// fast with retry-required (NFuse) or 503 (REST), and once the directory
// is back new users log on again.
func TestDirectoryFailoverAndOutage(t *testing.T) {
	t.Parallel()
	s := startDirectorySite(t, false)
	pw := s.dir.UserPassword
	verified := []string{"user0101", "user0102", "user0103", "user0104"}
	for _, u := range verified {
		if id, _ := s.appData(t, cleartextCreds(u, pw, "")); id != "" {
			t.Fatalf("%s: %s", u, id)
		}
	}

	dirservertest.Stop(t, s.dir.Servers[0])
	for _, u := range []string{"user0201", "user0202"} {
		if code, _, _ := s.login(t, u, pw); code != 200 {
			t.Fatalf("logon of %s with the first server stopped: %d, want 200 (failover to the second)", u, code)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var verifiedFailed, newOK, newRefused, answered, verifiedInOutage int
	var stopped atomic.Bool
	var slowest time.Duration
	var unexpected []string
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if w%2 == 0 {
					u := verified[(w/2+i)%len(verified)]
					down := stopped.Load()
					id, _ := s.appData(t, cleartextCreds(u, pw, ""))
					mu.Lock()
					answered++
					if id != "" {
						verifiedFailed++
						unexpected = append(unexpected, u+": "+id)
					} else if down {
						verifiedInOutage++
					}
					mu.Unlock()
					continue
				}
				u := dirserver.UserName(301 + (100*w+i)%600)
				start := time.Now()
				id, _ := s.appData(t, cleartextCreds(u, pw, ""))
				took := time.Since(start)
				mu.Lock()
				answered++
				switch id {
				case "":
					newOK++
				case "retry-required":
					newRefused++
					slowest = max(slowest, took)
				default:
					unexpected = append(unexpected, u+": "+id)
				}
				mu.Unlock()
			}
		})
	}
	// The storm is under way (eight answers), then the directory goes
	// down under it until new logons have been refused ten times, and
	// verified users have enumerated in the outage eight times.
	counts := func() (int, int, int) { // answers, new logons refused, verified ones served in the outage
		mu.Lock()
		defer mu.Unlock()
		return answered, newRefused, verifiedInOutage
	}
	poll(t, 30*time.Second, "the storm of logons to be under way", func() bool { n, _, _ := counts(); return n >= 8 })
	stopped.Store(true)
	dirservertest.Stop(t, s.dir.Servers[1])
	poll(t, time.Minute, "new logons refused and verified users served in the outage", func() bool {
		_, refused, served := counts()
		return refused >= 10 && served >= 8
	})
	cancel()
	wg.Wait()
	if verifiedFailed > 0 || len(unexpected) > 0 {
		t.Errorf("during the outage: %d enumerations of verified users failed; unexpected answers: %v", verifiedFailed, unexpected)
	}
	if newRefused == 0 {
		t.Errorf("no new logon was refused with the directory down (%d succeeded)", newOK)
	}
	// Dial timeout 1 s per server; once marked down, refusals are at once.
	if slowest > 3*time.Second {
		t.Errorf("a new logon took %s to be refused with the directory down", slowest)
	}
	t.Logf("outage: %d new logons before it, %d refused (slowest %s); verified users unaffected", newOK, newRefused, slowest)
	if code, _, _ := s.login(t, "user0999", pw); code != 503 {
		t.Errorf("REST logon with the directory down: %d, want 503", code)
	}

	dirservertest.StartServer(t, s.dir.Servers[1])
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _, _ := s.login(t, "user0998", pw)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the directory came back, logons still answer %d", code)
		}
		time.Sleep(200 * time.Millisecond) // a poll interval
	}
}

// syncBuffer is a log the server writes from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestDirectoryMisconfiguredAtStart starts a site whose directory cannot
// work: one server refuses connections, the other presents a certificate
// that the site does not trust. The log says so at start, naming each
// server and never the bind password; directory logons are refused fast
// with 503, and the site's own user logs on.
func TestDirectoryMisconfiguredAtStart(t *testing.T) {
	d := dirservertest.Start(t, dirserver.Options{Users: 10})
	const bindPassword = "s3cret-bind-pw-do-not-log"
	closed := "ldaps://127.0.0.1:1"
	var logs syncBuffer
	params := auth.Params{Iterations: 1, MemoryKiB: 1024, Parallelism: 1, SaltLen: 16, KeyLen: 32}
	dataDir := t.TempDir()
	hash, err := auth.HashPassword(localPassword, params)
	if err != nil {
		t.Fatal(err)
	}
	{
		// The site, with its directory, before the server starts.
		s, err := server.Open(t.Context(), server.Config{DataDir: dataDir, Listen: "127.0.0.1:0", PasswordParams: params})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Store().Update(t.Context(), func(tx site.Tx) error {
			_, err := site.Mutate(t.Context(), tx, func(c *site.Config) error {
				c.Users = append(c.Users, site.User{Name: localUser, PasswordHash: hash})
				c.Directory = site.Directory{Enabled: true, Servers: []string{closed, d.Servers[0].LDAPS},
					BindDN: d.BindDN, BindPassword: bindPassword, UserBaseDNs: []string{dirserver.BaseDN},
					// A handshake that fails on the certificate fails in
					// moments, but a loaded CI machine took over a second to
					// get that far: the dial timeout must not answer first.
					UserAttribute: "uid", DialTimeoutSeconds: 5, TimeoutSeconds: 5}
				return nil
			})
			return err
		})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	s, err := server.Open(t.Context(), server.Config{DataDir: dataDir, Listen: "127.0.0.1:0", PasswordParams: params,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("a site whose directory does not work must still start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "directory does not answer") {
		if time.Now().After(deadline) {
			t.Fatalf("no error about the directory in the log:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond) // a poll interval
	}
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "directory does not answer") {
			line = l
		}
	}
	for _, want := range []string{closed, d.Servers[0].LDAPS, "certificate"} {
		if !strings.Contains(line, want) {
			t.Errorf("the error does not say %q: %s", want, line)
		}
	}
	if strings.Contains(logs.String(), bindPassword) {
		t.Error("the bind password is in the log")
	}
	t.Logf("logged: %s", line)
	ds := &directorySite{Server: s, dir: d}
	start := time.Now()
	if code, _, _ := ds.login(t, "user0001", d.UserPassword); code != 503 {
		t.Errorf("a directory logon: %d, want 503", code)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the refusal took %s", took)
	}
	if code, _, _ := ds.login(t, localUser, localPassword); code != 200 {
		t.Errorf("the site's own user: %d, want 200", code)
	}
	if strings.Contains(logs.String(), bindPassword) {
		t.Error("the bind password is in the log")
	}
}
