package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/dirserver"
	"github.com/usher-vdi/usher/internal/dirserver/dirservertest"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/site"
)

// addSiteUser adds a site user of name with password (hashed under p)
// to the directory site, entitled as the demo's domain users are, and
// waits for the broker to serve it.
func (s *directorySite) addSiteUser(t *testing.T, name, password string, p auth.Params) {
	t.Helper()
	ctx := t.Context()
	hash, err := auth.HashPassword(password, p)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Store().Update(ctx, func(tx site.Tx) error {
		_, err := site.Mutate(ctx, tx, func(c *site.Config) error {
			c.Users = append(c.Users, site.User{Name: name, Groups: []string{demo.DomainUsers}, PasswordHash: hash})
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
	if _, ok := s.Broker().Snapshot().User(name); !ok {
		t.Fatalf("the broker does not serve the site user %s after a refresh", name)
	}
}

var cheapParams = auth.Params{Iterations: 1, MemoryKiB: 1024, Parallelism: 1, SaltLen: 16, KeyLen: 32}

// nfuse posts an NFuse request of kind holding inner and returns the
// answer's ErrorId ("" for none) and body.
func (s *directorySite) nfuse(t *testing.T, c *http.Client, kind, inner string) (string, string) {
	t.Helper()
	body := `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE NFuseProtocol SYSTEM "NFuse.dtd"><NFuseProtocol version="5.4">` +
		`<` + kind + `>` + inner + `</` + kind + `></NFuseProtocol>`
	resp, err := c.Post(s.URL()+"/scripts/wpnbr.dll", "text/xml", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if m := errorIDRE.FindSubmatch(b); m != nil {
		return string(m[1]), string(b)
	}
	return "", string(b)
}

// restLogin posts a REST logon through c and returns the status and the
// user answered.
func (s *directorySite) restLogin(t *testing.T, c *http.Client, name, password string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"username": name, "password": password})
	resp, err := c.Post(s.URL()+"/api/v1/login", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ User string }
	b, _ := io.ReadAll(resp.Body)
	json.Unmarshal(b, &out)
	return resp.StatusCode, out.User
}

// adminBasic asks the admin API for the directory settings with basic
// credentials through c, and returns the status.
func (s *directorySite) adminBasic(t *testing.T, c *http.Client, name, password string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", s.URL()+"/api/v1/admin/directory", nil)
	req.SetBasicAuth(name, password)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// userLaunch launches resource for the token's user over REST and
// returns the session's ID.
func (s *directorySite) userLaunch(t *testing.T, token, resource string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", s.URL()+"/api/v1/resources/"+url.PathEscape(resource)+"/launch", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l launched
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(b, &l) != nil || l.SessionID == "" {
		t.Fatalf("launch %s: %d %s", resource, resp.StatusCode, b)
	}
	return l.SessionID
}

// fromAddress returns a client whose connections come from the loopback
// address ip (any of 127.0.0.0/8 is the host's).
func fromAddress(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: time.Minute}
}

// TestShadowDirectoryAccountGetsNothingOfTheSiteUser replays the finding:
// a directory entry (uid=victim) whose name is a site user's logs on with
// the directory's password in every form of the name (DOMAIN\user,
// user@suffix, NFuse's Domain element, other spellings the directory
// matches) over NFuse, REST and the admin API's basic credentials, while
// the site user has a live session. It gets neither the user's
// applications, nor their session, nor a ticket, nor the admin API (the
// entry is in the directory's admin group); the site user and other
// directory users are untouched.
func TestShadowDirectoryAccountGetsNothingOfTheSiteUser(t *testing.T) {
	t.Parallel()
	s := startDirectorySite(t, false)
	office := s.resourcesOf(t, demo.OfficeApps)
	victim := s.engineer // a member of the directory's admin group, too
	pw := s.dir.UserPassword
	const victimPassword = "victim-site-pw-1234"
	c := http.DefaultClient

	// Before the site has a user of that name the entry logs on (and the
	// broker remembers it): that read must not serve it afterwards.
	code, shadowToken, user := s.login(t, dirserver.Domain+`\`+victim, pw)
	if code != 200 || user != victim {
		t.Fatalf("the directory user before the site user exists: %d %q", code, user)
	}
	s.addSiteUser(t, victim, victimPassword, cheapParams)
	// Its token (a bearer token, or the portal's cookie) names the site
	// user's name now: refused.
	if code, got := s.resources(t, shadowToken); code != 401 {
		t.Errorf("the directory user's token once a site user has the name: %d, %d resources; want 401", code, len(got))
	}
	code, token, user := s.login(t, victim, victimPassword)
	if code != 200 || user != victim {
		t.Fatalf("the site user's logon: %d %q", code, user)
	}
	session := s.userLaunch(t, token, office[0])

	forms := []struct{ name, domain string }{
		{victim, ""}, // the site user's name: the site user's password is asked
		{dirserver.Domain + `\` + victim, ""},
		{strings.ToLower(dirserver.Domain) + `\` + strings.ToUpper(victim), ""},
		{victim + "@" + dirserver.UPNSuffix, ""},
		{victim, dirserver.Domain},
		{strings.ToUpper(victim), strings.ToLower(dirserver.Domain)},
		{" " + victim + " ", ""},
		{fullwidth(victim), ""},
		{fullwidth(victim), dirserver.Domain},
	}
	for _, f := range forms {
		creds := cleartextCreds(f.name, pw, f.domain)
		what := fmt.Sprintf("%q (domain %q)", f.name, f.domain)
		if id, body := s.nfuse(t, c, "RequestAppData", `<Scope traverse="subtree"/><DesiredDetails>defaults</DesiredDetails><ServerType>all</ServerType><ClientType>ica30</ClientType>`+creds); id != "failed-credentials" {
			t.Errorf("NFuse applications for %s: ErrorId %q, %d applications; want failed-credentials", what, id, strings.Count(body, "<InName>"))
		}
		if id, body := s.nfuse(t, c, "RequestReconnectSessionData", creds+`<ClientName>shadow</ClientName><ServerType>all</ServerType><ClientType>ica30</ClientType>`); id != "failed-credentials" || strings.Contains(body, session) {
			t.Errorf("NFuse sessions for %s: ErrorId %q, the victim's session listed: %v; want failed-credentials", what, id, strings.Contains(body, session))
		}
		if id, body := s.nfuse(t, c, "RequestAddress", `<Name><AppName>`+office[0]+`</AppName></Name><ClientName>shadow</ClientName>`+creds); id != "failed-credentials" || strings.Contains(body, "<TicketTag>") {
			t.Errorf("NFuse launch for %s: ErrorId %q, a ticket: %v; want failed-credentials", what, id, strings.Contains(body, "<TicketTag>"))
		}
		name := restName(f.name, f.domain)
		if code, user := s.restLogin(t, c, name, pw); code != 401 {
			t.Errorf("REST logon as %q: %d as %q, want 401", name, code, user)
		}
		if code := s.adminBasic(t, c, name, pw); code != 401 {
			t.Errorf("admin basic as %q: %d, want 401", name, code)
		}
	}

	// The site user is untouched: their session is theirs alone.
	if ids := sessionIDsOf(t, s, token); !slices.Equal(ids, []string{session}) {
		t.Errorf("the site user's sessions: %v, want [%s]", ids, session)
	}
	if code, _, user := s.login(t, victim, victimPassword); code != 200 || user != victim {
		t.Errorf("the site user's logon after the attack: %d %q", code, user)
	}
	// Other directory users, the admin group's included, are served.
	if code, _, user := s.login(t, dirserver.Domain+`\`+s.clerk, pw); code != 200 || user != s.clerk {
		t.Errorf("another directory user: %d %q", code, user)
	}
	admin := ""
	for i := 1; i <= s.dir.Users; i++ {
		if n := dirserver.UserName(i); n != victim && dirserver.Team(i) == dirserver.Team(s.dir.Users-10) {
			admin = n // in the engineer's team
			break
		}
	}
	if code := s.adminBasic(t, c, dirserver.Domain+`\`+admin, pw); code != 200 {
		t.Errorf("another member of the admin group on the admin API: %d, want 200", code)
	}
	// Once a site admin has that member's name, the member is refused on
	// the admin API (they would act, and be audited, as the site admin).
	hash, err := auth.HashPassword("site-admin-pw-1234", cheapParams)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Store().Update(t.Context(), func(tx site.Tx) error {
		return tx.Admins().Create(t.Context(), site.Admin{Name: admin, PasswordHash: hash, CreatedAt: time.Now().UTC()})
	}); err != nil {
		t.Fatal(err)
	}
	if code := s.adminBasic(t, c, dirserver.Domain+`\`+admin, pw); code != 401 {
		t.Errorf("a directory admin named as a site admin on the admin API: %d, want 401", code)
	}
	if code := s.adminBasic(t, c, admin, "site-admin-pw-1234"); code != 200 {
		t.Errorf("the site admin of that name: %d, want 200", code)
	}
}

// restName is the REST form of an NFuse user name and Domain.
func restName(name, domain string) string {
	if domain == "" {
		return name
	}
	return domain + `\` + name
}

func sessionIDsOf(t *testing.T, s *directorySite, token string) []string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", s.URL()+"/api/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Sessions []struct{ ID string }
	}
	json.NewDecoder(resp.Body).Decode(&out)
	var ids []string
	for _, x := range out.Sessions {
		ids = append(ids, x.ID)
	}
	return ids
}

// fullwidth spells s's ASCII letters and digits in their fullwidth forms,
// which NFKC (and a directory's string preparation) takes as s.
func fullwidth(s string) string {
	return strings.Map(func(r rune) rune {
		if r > ' ' && r < 0x7f {
			return r - 0x21 + 0xff01
		}
		return r
	}, s)
}

// TestLockoutKeyedByTheDirectoryEntry replays the finding: ten wrong
// passwords in ten spellings of one directory user's name (case, width,
// spaces, domain forms), from ten client addresses, over NFuse, REST and
// the admin API (the user is in the directory's admin group), lock the
// one entry out: the right password is then refused on every path, and
// the guard holds one lock-out, under the entry's key.
func TestLockoutKeyedByTheDirectoryEntry(t *testing.T) {
	t.Parallel()
	s := startDirectorySite(t, false) // no source throttling: one address a path would do
	target := s.engineer
	pw := s.dir.UserPassword
	// The directory's own lock-out (slapd's ppolicy, after
	// dirserver.MaxFailures) is off for the target, as AD's is by default:
	// usher's must hold alone.
	for _, srv := range s.dir.Servers {
		dirservertest.Modify(t, srv, "dn: cn=nolock,ou=policies,"+dirserver.BaseDN+"\nchangetype: add\nobjectClass: organizationalRole\nobjectClass: pwdPolicy\n"+
			"cn: nolock\npwdAttribute: userPassword\npwdLockout: FALSE\n\n"+
			"dn: "+dirserver.UserDN(target)+"\nchangetype: modify\nreplace: pwdPolicySubentry\npwdPolicySubentry: cn=nolock,ou=policies,"+dirserver.BaseDN+"\n")
	}
	spellings := []string{
		target,
		strings.ToUpper(target),
		" " + target,
		target + " ",
		fullwidth(target),
		strings.ToUpper(fullwidth(target)),
		dirserver.Domain + `\ ` + strings.ToUpper(target[:1]) + target[1:],
		target + "\u00a0@" + dirserver.UPNSuffix,
		"  " + strings.ToUpper(target[:2]) + target[2:] + "  ",
		strings.ToLower(dirserver.Domain) + `\` + fullwidth(strings.ToUpper(target)),
	}
	if n := auth.DefaultLockoutThreshold; len(spellings) != n {
		t.Fatalf("%d spellings for a threshold of %d", len(spellings), n)
	}
	for i, name := range spellings {
		c := fromAddress(fmt.Sprintf("127.0.0.%d", 10+i))
		var got, want string
		switch i % 3 {
		case 0:
			code, _ := s.restLogin(t, c, name, "wrong-password")
			got, want = fmt.Sprint("REST ", code), "REST 401"
		case 1:
			id, _ := s.nfuse(t, c, "RequestAppData", `<Scope traverse="subtree"/><DesiredDetails>defaults</DesiredDetails><ServerType>all</ServerType><ClientType>ica30</ClientType>`+cleartextCreds(name, "wrong-password", ""))
			got, want = "NFuse "+id, "NFuse failed-credentials"
		case 2:
			got, want = fmt.Sprint("admin ", s.adminBasic(t, c, name, "wrong-password")), "admin 401"
		}
		if got != want {
			t.Fatalf("wrong password %d as %q: %s, want %s", i+1, name, got, want)
		}
	}
	c := fromAddress("127.0.0.30")
	if code, user := s.restLogin(t, c, target, pw); code != 401 {
		t.Errorf("the right password over REST after ten wrong ones: %d as %q, want 401 (locked out)", code, user)
	}
	if id, _ := s.nfuse(t, c, "RequestAppData", `<Scope traverse="subtree"/><DesiredDetails>defaults</DesiredDetails><ServerType>all</ServerType><ClientType>ica30</ClientType>`+cleartextCreds(target, pw, dirserver.Domain)); id != "failed-credentials" {
		t.Errorf("the right password over NFuse after ten wrong ones: ErrorId %q, want failed-credentials (locked out)", id)
	}
	if code := s.adminBasic(t, c, dirserver.Domain+`\`+target, pw); code != 401 {
		t.Errorf("the right password on the admin API after ten wrong ones: %d, want 401 (locked out)", code)
	}
	locks, err := s.Broker().Lockouts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 || locks[0].Name != target {
		t.Errorf("lock-outs: %+v, want one, of %s", locks, target)
	}
	// Another user is not locked out.
	if code, _ := s.restLogin(t, c, s.clerk, pw); code != 200 {
		t.Errorf("another directory user: %d, want 200", code)
	}
	// An admin clears the lock by another spelling of the name.
	req, _ := http.NewRequestWithContext(t.Context(), "DELETE", s.URL()+"/api/v1/admin/lockouts/"+url.PathEscape(" "+strings.ToUpper(target)), nil)
	req.SetBasicAuth("admin", "demo-pw-1234")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("clear the lock-out as %q: %d, want 204", " "+strings.ToUpper(target), resp.StatusCode)
	}
	if code, user := s.restLogin(t, c, fullwidth(target), pw); code != 200 || user != target {
		t.Errorf("the right password once the lock is cleared: %d as %q, want 200 as %s", code, user, target)
	}
}

// TestRefusedLogonsCostTheSame checks that response time tells no one
// which names exist, with a directory configured: a refused logon of an
// unknown name takes as long as a site user's, a directory user's and (on
// the admin API) a site admin's, each with a wrong password, within a
// ratio of 1.5 between the medians. The kinds take turns, each round
// starting with another, so that the load of a shared machine, which
// changes from one moment to the next, weighs on every kind alike.
func TestRefusedLogonsCostTheSame(t *testing.T) {
	// Cheap hashes (8 MiB, one pass: under the race detector about ten
	// times a directory's round trips on loopback, as argon2id's defaults
	// are to a LAN's). A refusal costs the longer of the hash and the
	// directory's answer, and a directory answers a wrong password of an
	// entry it has (slapd's ppolicy records the failure) more slowly than
	// an unknown name: the hash must dwarf that, as it does in production.
	params := auth.Params{Iterations: 1, MemoryKiB: 8 * 1024, Parallelism: 1, SaltLen: 16, KeyLen: 32}
	s := startDirectorySite(t, false, func(c *server.Config) {
		c.PasswordParams = params
		c.LockoutThreshold = -1 // a locked account costs a decoy as well; this measures wrong passwords
	})
	s.addSiteUser(t, "carol", "carol-pw-1234", params)
	const rounds = 25
	c := http.DefaultClient
	kinds := []refusalKind{
		{"unknown user", func(i int) int {
			code, _ := s.restLogin(t, c, fmt.Sprintf("ghost%04d", i), "wrong-password")
			return code
		}},
		{"site user", func(int) int { code, _ := s.restLogin(t, c, "carol", "wrong-password"); return code }},
		// One wrong password per directory user: slapd's ppolicy locks an
		// entry out after a few, and a locked entry answers 403.
		{"directory user", func(i int) int {
			code, _ := s.restLogin(t, c, dirserver.UserName(100+i), "wrong-password")
			return code
		}},
		{"unknown admin", func(i int) int { return s.adminBasic(t, c, fmt.Sprintf("ghost-admin%04d", i), "wrong-password") }},
		{"site admin", func(int) int { return s.adminBasic(t, c, "admin", "wrong-password") }},
	}
	// A machine shared with other work skews a measurement now and then
	// by more than the ratio allowed (load adds time to whatever runs at
	// that moment); the difference the test is for is tenfold and more
	// (without the decoys, an unknown name answers in one directory
	// round trip). So a measurement that fails is taken again, twice at
	// most, and the logon must pass one.
	var failed []string
	for attempt := range 3 {
		failed = measureRefusals(t, kinds, rounds)
		if len(failed) == 0 {
			return
		}
		t.Logf("measurement %d: %s", attempt+1, strings.Join(failed, "; "))
	}
	t.Errorf("in three measurements, refusals of unknown and known names differ: %s", strings.Join(failed, "; "))
}

// refusalKind is one kind of refused logon: try makes the i-th and
// returns the status answered.
type refusalKind struct {
	name string
	try  func(i int) int
}

// measureRefusals times rounds refusals of each kind, taking turns, and
// returns what differs by more than 1.5 between the medians of an unknown
// name's and a known one's (kinds 0 and 1, 0 and 2, 3 and 4).
func measureRefusals(t *testing.T, kinds []refusalKind, rounds int) (failed []string) {
	t.Helper()
	took := make([][]time.Duration, len(kinds))
	for i := range rounds + 3 {
		// Each round starts with another kind, so that none always
		// follows the same one (a directory still writing the last wrong
		// password's failure, say).
		for j := range kinds {
			k := (i + j) % len(kinds)
			kind := kinds[k]
			start := time.Now()
			if code := kind.try(i); code != 401 {
				t.Fatalf("%s: %d, want 401", kind.name, code)
			}
			if i >= 3 { // the first rounds warm the hashes' memory and the connections
				took[k] = append(took[k], time.Since(start))
			}
		}
	}
	med := make([]time.Duration, len(kinds))
	for k := range kinds {
		med[k] = median(took[k])
	}
	t.Logf("median refusal: unknown user %s, site user %s, directory user %s, unknown admin %s, site admin %s", med[0], med[1], med[2], med[3], med[4])
	for _, pair := range [][2]int{{0, 1}, {0, 2}, {3, 4}} {
		r := float64(med[pair[0]]) / float64(med[pair[1]])
		t.Logf("%s / %s: ratio of the medians %.2f", kinds[pair[0]].name, kinds[pair[1]].name, r)
		if r > 1.5 || r < 1/1.5 {
			failed = append(failed, fmt.Sprintf("an %s's refusal takes %.2f times a %s's (medians %s and %s), want within 1.5",
				kinds[pair[0]].name, r, kinds[pair[1]].name, med[pair[0]], med[pair[1]]))
		}
	}
	return failed
}

func median(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}
