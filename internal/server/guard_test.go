package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// These tests replay attacks on logons against a running site, over HTTP.

const demoPassword = "demo-password-1234"

// clock is a fake clock for lock-out and throttling.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func openSite(t *testing.T, edit func(*server.Config)) (*server.Server, *clock) {
	t.Helper()
	clk := &clock{now: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
	cfg := server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true, DemoPassword: demoPassword,
		PasswordParams: sitetest.Cheap, Now: clk.Now}
	if edit != nil {
		edit(&cfg)
	}
	s, err := server.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clk
}

// client returns an HTTP client whose connections come from the loopback
// address from (127.0.0.1, 127.0.0.2, ...), so that a test can be several
// sources.
func client(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 300}}
}

type answer struct {
	status int
	body   string
}

func post(t *testing.T, c *http.Client, url, contentType, body string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return answer{}
	}
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Error(err)
		return answer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b)}
}

func restLogon(t *testing.T, c *http.Client, s *server.Server, user, password string) answer {
	b, _ := json.Marshal(map[string]string{"username": user, "password": password})
	return post(t, c, s.URL()+"/api/v1/login", "application/json", string(b))
}

func nfuseLogon(t *testing.T, c *http.Client, s *server.Server, user, password string) answer {
	body := `<?xml version="1.0" encoding="UTF-8"?><NFuseProtocol version="5.4"><RequestValidateCredentials><Credentials><UserName>` +
		user + `</UserName><Password encoding="cleartext">` + password + `</Password></Credentials></RequestValidateCredentials></NFuseProtocol>`
	return post(t, c, s.URL()+"/scripts/wpnbr.dll", "text/xml", body)
}

func nfuseOK(a answer) bool { return a.status == 200 && !strings.Contains(a.body, "<ErrorId>") }

// hashes returns the password checks and decoy hashes the site has made.
func hashes(s *server.Server) (checks, decoys int64) { return s.Broker().Verified().Hashes() }

// burst sends n logons for user at once, the right password as the
// right-th, and returns the answers.
func burst(t *testing.T, n, right int, logon func(password string) answer) []answer {
	out := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		pw := fmt.Sprintf("wrong password %d", i)
		if i == right {
			pw = demoPassword
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = logon(pw)
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// TestConcurrentLogonsCannotBeatLockout fires 250 logons for one user at
// once, 249 wrong and the right one among them, over REST and NFuse: at
// most 10 wrong passwords are checked (the right one, checked or not,
// forgets none of their failures), every answer still costs one hash, the
// right password gets in only if it was checked before the account locked,
// and otherwise gets a wrong password's answer.
func TestConcurrentLogonsCannotBeatLockout(t *testing.T) {
	s, _ := openSite(t, func(c *server.Config) { c.SourceFree = -1 })
	var wrong, right atomic.Int64
	s.Broker().Verified().SetVerifier(func(hash, pw string) (bool, error) {
		ok, err := auth.VerifyPassword(hash, pw)
		if ok {
			right.Add(1)
		} else {
			wrong.Add(1)
		}
		return ok, err
	})
	c := client("127.0.0.1")
	for _, tc := range []struct {
		name, user string
		logon      func(user, pw string) answer
		ok         func(answer) bool
	}{
		{"REST", "user0001", func(u, pw string) answer { return restLogon(t, c, s, u, pw) }, func(a answer) bool { return a.status == 200 }},
		{"NFuse", "user0002", func(u, pw string) answer { return nfuseLogon(t, c, s, u, pw) }, nfuseOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checks0, decoys0 := hashes(s)
			wrong0, right0 := wrong.Load(), right.Load()
			out := burst(t, 250, 125, func(pw string) answer { return tc.logon(tc.user, pw) })
			checks1, decoys1 := hashes(s)
			wrongs, rights := wrong.Load()-wrong0, right.Load()-right0
			if wrongs > 10 || rights > 1 {
				t.Fatalf("%d wrong and %d right passwords checked in the burst, want at most 10 and 1", wrongs, rights)
			}
			if total := checks1 - checks0 + decoys1 - decoys0; total != 250 {
				t.Errorf("%d hashes for 250 logons, want one each", total)
			}
			locked := s.Broker().Guard().Locked("user\x00"+tc.user) > 0
			got := tc.ok(out[125])
			if got && rights != 1 {
				t.Fatalf("right password let in without a check")
			}
			if locked != (wrongs == 10) {
				t.Fatalf("%d wrong passwords checked, account locked: %v", wrongs, locked)
			}
			if !got && !locked {
				t.Fatalf("right password refused, account not locked (%d wrong checked)", wrongs)
			}
			for i, a := range out {
				if i != 125 && tc.ok(a) {
					t.Fatalf("wrong password %d let in: %+v", i, a)
				}
			}
			// Refused, the right password gets a wrong one's answer.
			if !got && out[125].body != out[0].body {
				t.Errorf("right password on a locked account answered %q, a wrong one %q", out[125].body, out[0].body)
			}
			if a := tc.logon(tc.user, demoPassword); tc.ok(a) != !locked {
				t.Errorf("after the burst (locked %v) the right password answers %+v", locked, a)
			}
		})
	}
}

// TestLockedAnswersAsUnknown: a locked account and a name that names no
// account get the same status and body, over REST and NFuse, and both cost
// one hash (and no password check), so that timing does not tell them
// apart either.
func TestLockedAnswersAsUnknown(t *testing.T) {
	s, _ := openSite(t, func(c *server.Config) { c.SourceFree = -1 })
	c := client("127.0.0.1")
	for range 10 {
		restLogon(t, c, s, "user0003", "wrong")
	}
	if s.Broker().Guard().Locked("user\x00user0003") == 0 {
		t.Fatal("user0003 not locked after 10 failures")
	}
	for _, tc := range []struct {
		name  string
		logon func(user, pw string) answer
	}{
		{"REST", func(u, pw string) answer { return restLogon(t, c, s, u, pw) }},
		{"NFuse", func(u, pw string) answer { return nfuseLogon(t, c, s, u, pw) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var answers []answer
			for _, user := range []string{"user0003", "no-such-user"} {
				checks0, decoys0 := hashes(s)
				answers = append(answers, tc.logon(user, demoPassword))
				checks1, decoys1 := hashes(s)
				if checks1 != checks0 || decoys1-decoys0 != 1 {
					t.Errorf("%s: %d checks, %d decoys; want 0 and 1", user, checks1-checks0, decoys1-decoys0)
				}
			}
			if answers[0] != answers[1] {
				t.Fatalf("locked: %+v\nunknown: %+v", answers[0], answers[1])
			}
			if a := tc.logon("user0004", "wrong"); a != answers[0] {
				t.Errorf("wrong password: %+v, want %+v", a, answers[0])
			}
		})
	}
}

// TestSourceThrottling: one source spraying wrong passwords over 100
// users, 250 at once, gets at most its free failures and its in-flight
// allowance checked and locks no one; then it waits a doubling delay
// between attempts; another source is not held up.
func TestSourceThrottling(t *testing.T) {
	s, clk := openSite(t, nil)
	c := client("127.0.0.1")
	checks0, _ := hashes(s)
	out := make([]answer, 1000)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = restLogon(t, c, s, fmt.Sprintf("user%04d", 1+i%100), "wrong")
		}()
		if i%250 == 249 { // 250 at a time, under the broker's admission bound
			close(start)
			wg.Wait()
			start = make(chan struct{})
		}
	}
	checks1, _ := hashes(s)
	const most = auth.DefaultSourceFree + auth.DefaultSourceInFlight
	if checks := checks1 - checks0; checks > most {
		t.Fatalf("%d passwords checked for one source, want at most %d", checks, most)
	}
	// Refused before any hashing: throttled, or turned away by the bound
	// on bodies one address may send at once (429).
	throttled, statuses := 0, map[int]int{}
	for _, a := range out {
		statuses[a.status]++
		if a.status == http.StatusServiceUnavailable && strings.Contains(a.body, "too many failed logons from your address") ||
			a.status == http.StatusTooManyRequests {
			throttled++
		}
	}
	// The rest are wrong-password answers: checked (at most `most`, above)
	// or sharing a concurrent check of the same credentials, which adds no
	// guess. Nothing else may come back, and most must be refused.
	if throttled+statuses[http.StatusUnauthorized] != len(out) || throttled < len(out)/2 {
		t.Fatalf("%d of %d refused before hashing (statuses %v), want the rest 401 and at least half refused", throttled, len(out), statuses)
	}
	for i := 1; i <= 100; i++ {
		if s.Broker().Guard().Locked(fmt.Sprintf("user\x00user%04d", i)) > 0 {
			t.Fatalf("user%04d locked out by one source's spray", i)
		}
	}
	// Another source logs on, throttled source or not.
	if a := restLogon(t, client("127.0.0.2"), s, "user0005", demoPassword); a.status != 200 {
		t.Fatalf("another source: %+v", a)
	}
	// The throttled source's right password waits too, over NFuse as well.
	if a := restLogon(t, c, s, "user0006", demoPassword); a.status != http.StatusServiceUnavailable {
		t.Fatalf("throttled source, right password: %+v", a)
	}
	if a := nfuseLogon(t, c, s, "user0007", demoPassword); !strings.Contains(a.body, "retry-required") {
		t.Fatalf("NFuse from a throttled source: %+v", a)
	}

	t.Run("the delay doubles", func(t *testing.T) {
		c := client("127.0.0.3")
		for i := range auth.DefaultSourceFree {
			if a := restLogon(t, c, s, "user0008", "wrong"); a.status != http.StatusUnauthorized {
				t.Fatalf("free failure %d: %+v", i, a)
			}
		}
		for _, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
			if a := restLogon(t, c, s, "user0009", "wrong"); a.status != http.StatusServiceUnavailable {
				t.Fatalf("%s early: %+v", d, a)
			}
			clk.Add(d - time.Millisecond)
			if a := restLogon(t, c, s, "user0009", "wrong"); a.status != http.StatusServiceUnavailable {
				t.Fatalf("%s early: %+v", d, a)
			}
			clk.Add(time.Millisecond)
			if a := restLogon(t, c, s, "user0009", "wrong"); a.status != http.StatusUnauthorized {
				t.Fatalf("after %s: %+v, want a checked wrong password", d, a)
			}
		}
		// After the window the source starts afresh.
		clk.Add(auth.DefaultLockoutWindow)
		if a := restLogon(t, c, s, "user0009", demoPassword); a.status != 200 {
			t.Fatalf("after the window: %+v", a)
		}
	})
}

func basicHeader(user, password string) []string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, password)
	return []string{"Authorization", r.Header.Get("Authorization")}
}

func adminToken(t *testing.T, c *http.Client, s *server.Server, ttl int, authz []string) (string, time.Time, answer) {
	t.Helper()
	a := post(t, c, s.URL()+"/api/v1/admin/tokens", "application/json", fmt.Sprintf(`{"ttl_seconds": %d}`, ttl), authz...)
	var tr struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	json.Unmarshal([]byte(a.body), &tr)
	return tr.Token, tr.ExpiresAt, a
}

// TestAdminLockout: 30 wrong admin passwords then the right one is
// refused, as an unknown admin is, both over basic auth and token minting;
// the lock ends after its duration; a source is throttled on admin
// passwords as on users'.
func TestAdminLockout(t *testing.T) {
	s, clk := openSite(t, func(c *server.Config) { c.SourceFree = -1 })
	c := client("127.0.0.1")
	right := basicHeader("admin", demoPassword)
	checks0, _ := hashes(s)
	out := make([]answer, 30)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, out[i] = adminToken(t, c, s, 600, basicHeader("admin", fmt.Sprint("wrong ", i)))
		}()
	}
	wg.Wait()
	if checks1, _ := hashes(s); checks1-checks0 > 10 {
		t.Fatalf("%d admin passwords checked, want at most 10", checks1-checks0)
	}
	_, _, locked := adminToken(t, c, s, 600, right)
	_, _, unknown := adminToken(t, c, s, 600, basicHeader("nobody", demoPassword))
	if locked.status != 401 || locked != unknown {
		t.Fatalf("locked admin: %+v; unknown admin: %+v", locked, unknown)
	}
	if a := get2(t, c, s.URL()+"/api/v1/admin/site", right); a.status != 401 {
		t.Fatalf("locked admin's basic auth on the admin API: %+v", a)
	}
	clk.Add(10 * time.Minute)
	if _, _, a := adminToken(t, c, s, 600, right); a.status != 201 {
		t.Fatalf("after the lock-out: %+v", a)
	}

	t.Run("throttled source", func(t *testing.T) {
		s, _ := openSite(t, nil)
		c := client("127.0.0.1")
		for i := range 10 {
			adminToken(t, c, s, 600, basicHeader(fmt.Sprint("admin", i), "wrong"))
		}
		if _, _, a := adminToken(t, c, s, 600, basicHeader("admin", demoPassword)); a.status != http.StatusServiceUnavailable {
			t.Fatalf("11th admin attempt from one source: %+v", a)
		}
		if _, _, a := adminToken(t, client("127.0.0.2"), s, 600, basicHeader("admin", demoPassword)); a.status != 201 {
			t.Fatalf("another source: %+v", a)
		}
	})
}

// send sends a request (a JSON body unless body is empty) with header's
// name, value pairs and returns the answer.
func send(t *testing.T, c *http.Client, method, url, body string, header []string) answer {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b)}
}

func get2(t *testing.T, c *http.Client, url string, header []string) answer {
	t.Helper()
	return send(t, c, "GET", url, "", header)
}

func put(t *testing.T, c *http.Client, url, body string, header []string) answer {
	t.Helper()
	return send(t, c, "PUT", url, body, header)
}

// TestTokens: a password change revokes the user's (or admin's) tokens; an
// admin token mints no token that outlives it; a token of one kind opens
// nothing of another.
func TestTokens(t *testing.T) {
	s, _ := openSite(t, nil)
	c := client("127.0.0.1")
	admin := basicHeader("admin", demoPassword)
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

	a := restLogon(t, c, s, "user0001", demoPassword)
	var lr struct{ Token string }
	json.Unmarshal([]byte(a.body), &lr)
	if a.status != 200 || lr.Token == "" {
		t.Fatalf("logon: %+v", a)
	}
	if a := get2(t, c, s.URL()+"/api/v1/resources", bearer(lr.Token)); a.status != 200 {
		t.Fatalf("user token: %+v", a)
	}
	if a := get2(t, c, s.URL()+"/api/v1/admin/site", bearer(lr.Token)); a.status != 401 {
		t.Fatalf("user token on the admin API: %+v", a)
	}

	t.Run("user password change revokes", func(t *testing.T) {
		if a := put(t, c, s.URL()+"/api/v1/admin/users/user0001/password", `{"password": "another password"}`, admin); a.status != 204 {
			t.Fatalf("set password: %+v", a)
		}
		if a := get2(t, c, s.URL()+"/api/v1/resources", bearer(lr.Token)); a.status != 401 {
			t.Fatalf("token issued before the password change: %+v", a)
		}
	})

	t.Run("admin tokens", func(t *testing.T) {
		short, shortExp, a := adminToken(t, c, s, 60, admin)
		if a.status != 201 {
			t.Fatalf("mint: %+v", a)
		}
		if a := get2(t, c, s.URL()+"/api/v1/resources", bearer(short)); a.status != 401 {
			t.Fatalf("admin token on the user API: %+v", a)
		}
		long, longExp, a := adminToken(t, c, s, 30*24*3600, bearer(short))
		if a.status != 201 || longExp.After(shortExp) {
			t.Fatalf("token minted with a token expires %v, after its minter's %v (%+v)", longExp, shortExp, a)
		}
		if a := put(t, c, s.URL()+"/api/v1/admin/admins/admin/password", `{"password": "a new admin password"}`, admin); a.status != 204 {
			t.Fatalf("set admin password: %+v", a)
		}
		for _, tok := range []string{short, long} {
			if a := get2(t, c, s.URL()+"/api/v1/admin/site", bearer(tok)); a.status != 401 {
				t.Fatalf("admin token issued before the password change: %+v", a)
			}
		}
		if _, _, a := adminToken(t, c, s, 60, basicHeader("admin", "a new admin password")); a.status != 201 {
			t.Fatalf("new admin password: %+v", a)
		}
	})
}
