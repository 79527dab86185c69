package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

const hardeningPassword = "pw-hardening-1234"

// openSite starts a demo site on a loopback port with simVDAs simulated
// VDAs (-1 for all of them).
func openHardened(t *testing.T, simVDAs int) *server.Server {
	t.Helper()
	ctx := context.Background()
	s, err := server.Open(ctx, server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true,
		DemoPassword: hardeningPassword, SimVDAs: simVDAs, SimLogonDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if simVDAs != 0 {
		if err := s.WaitRegistered(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// call sends a request with a JSON body (when body is not nil) and the
// given headers; it returns the status and the body.
func call(t *testing.T, method, url string, body any, header ...string) (int, []byte, http.Header) {
	t.Helper()
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// slowBody opens a connection from local address from, sends the headers
// of a POST whose body is to be length bytes and, once the server asks
// for the body (100 Continue, which net/http sends when the handler first
// reads it), one byte of it. It returns the connection, held open, and the
// status line the server answered the headers with.
func slowBody(t *testing.T, from, to, path, contentType string) (net.Conn, string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", to)
	if err != nil {
		t.Error(err)
		return nil, ""
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n", path, to, contentType)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		t.Errorf("slow body from %s: no answer to the headers: %v", from, err)
		return nil, ""
	}
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "HTTP/1.1 100 ") {
		c.Write([]byte("{"))
	}
	return c, line
}

// TestSlowBodiesHoldNoBrokeringSlot replays the slow-body attack: more
// connections than the broker has transaction slots (256) send the
// headers and one byte of a login or NFuse body, from ten addresses (so
// that no per-address bound stops them); a normal login and an NFuse
// logon must still succeed at once. Then one address over the per-address
// bound is refused at once.
func TestSlowBodiesHoldNoBrokeringSlot(t *testing.T) {
	s := openHardened(t, 0)
	addr := s.Addr()

	var (
		mu    sync.Mutex
		conns []net.Conn
		lines = map[string]int{}
	)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	attack := func(from, path, contentType string, n int) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				c, line := slowBody(t, from, addr, path, contentType)
				mu.Lock()
				defer mu.Unlock()
				if c != nil {
					conns = append(conns, c)
				}
				lines[path+" "+line]++
			})
		}
		wg.Wait()
	}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() { attack(fmt.Sprintf("127.0.0.%d", 10+i), "/api/v1/login", "application/json", 30) })
	}
	wg.Go(func() { attack("127.0.0.30", "/scripts/wpnbr.dll", "text/xml", 60) })
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for line, n := range lines {
		if !strings.Contains(line, " 100 ") {
			t.Errorf("%d slow bodies were answered %q, want 100 Continue", n, line)
		}
	}
	if got := lines["/api/v1/login HTTP/1.1 100 Continue"]; got != 300 {
		t.Fatalf("%d of 300 slow REST logins are sending their bodies: %v", got, lines)
	}

	// A normal login, then a launchable answer from NFuse, while 360
	// bodies are still being sent.
	code, body, _ := call(t, "POST", s.URL()+"/api/v1/login", api.LoginRequest{Username: `DEMO\user0001`, Password: hardeningPassword})
	if code != 200 || !strings.Contains(string(body), `"token"`) {
		t.Fatalf("login during the attack: %d %s", code, body)
	}
	nf := `<?xml version="1.0" encoding="UTF-8"?><NFuseProtocol version="5.4"><RequestValidateCredentials><Credentials>` +
		`<UserName>user0002</UserName><Password encoding="cleartext">` + hardeningPassword + `</Password><Domain type="NT">DEMO</Domain>` +
		`</Credentials></RequestValidateCredentials></NFuseProtocol>`
	req, _ := http.NewRequest("POST", s.URL()+"/scripts/wpnbr.dll", strings.NewReader(nf))
	req.Header.Set("Content-Type", "text/xml")
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "<ResponseValidateCredentials>") || strings.Contains(string(body), "<ErrorId>") {
		t.Fatalf("NFuse logon during the attack: %s", body)
	}

	t.Run("one address over the bound is refused at once", func(t *testing.T) {
		mu.Lock()
		clear(lines)
		mu.Unlock()
		attack("127.0.0.40", "/api/v1/login", "application/json", api.DefaultMaxBodyReadersPerAddress+8)
		if got, want := lines["/api/v1/login HTTP/1.1 100 Continue"], api.DefaultMaxBodyReadersPerAddress; got != want {
			t.Errorf("%d bodies from one address being sent, want %d: %v", got, want, lines)
		}
		if got, want := lines["/api/v1/login HTTP/1.1 429 Too Many Requests"], 8; got != want {
			t.Errorf("%d refused with 429, want %d: %v", got, want, lines)
		}
	})
}

// TestCrossSiteAdminRequestsRefused replays a page on another site that
// posts to the admin API with the admin's basic credentials, as a browser
// that cached them would: refused, and nothing is created. Requests from
// the site itself and from non-browser clients pass.
func TestCrossSiteAdminRequestsRefused(t *testing.T) {
	s := openHardened(t, 0)
	admins := s.URL() + "/api/v1/admin/admins"
	basic := "Basic " + basicAuth("admin", hardeningPassword)
	newAdmin := func(name string) api.AdminRequest { return api.AdminRequest{Name: name, Password: "evil-password-123"} }

	for _, tc := range []struct {
		name   string
		header []string
		want   int
	}{
		{"cross-site by Sec-Fetch-Site", []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"same-site is another origin", []string{"Sec-Fetch-Site", "same-site"}, 403},
		{"another Origin", []string{"Origin", "https://evil.example"}, 403},
		{"Origin null", []string{"Origin", "null"}, 403},
		{"no Content-Type", []string{"Content-Type", ""}, 415},
		{"a form's Content-Type", []string{"Content-Type", "text/plain"}, 415},
		{"a JSON look-alike", []string{"Content-Type", "application/jsonp"}, 415},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "evil" + strings.NewReplacer(" ", "-", "'", "").Replace(tc.name)
			code, body, _ := call(t, "POST", admins, newAdmin(name), append([]string{"Authorization", basic}, tc.header...)...)
			if code != tc.want {
				t.Fatalf("POST: %d %s, want %d", code, body, tc.want)
			}
			if code, _, _ := call(t, "GET", admins+"/"+name, nil, "Authorization", basic); code != 404 {
				t.Fatalf("the refused request created admin %s: GET answers %d", name, code)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		header []string
	}{
		{"same origin", []string{"Sec-Fetch-Site", "same-origin", "Origin", s.URL()}},
		{"typed or bookmarked", []string{"Sec-Fetch-Site", "none"}},
		{"Origin of the site", []string{"Origin", s.URL()}},
		{"curl", nil},
		{"charset parameter", []string{"Content-Type", "application/json; charset=utf-8"}},
	} {
		t.Run("allowed: "+tc.name, func(t *testing.T) {
			name := "ok-" + strings.ReplaceAll(tc.name, " ", "-")
			if code, body, _ := call(t, "POST", admins, newAdmin(name), append([]string{"Authorization", basic}, tc.header...)...); code != 201 {
				t.Fatalf("POST: %d %s", code, body)
			}
		})
	}
	t.Run("no Basic challenge", func(t *testing.T) {
		code, _, h := call(t, "GET", s.URL()+"/api/v1/admin/site", nil, "User-Agent", "Mozilla/5.0")
		if code != 401 || strings.Contains(strings.ToLower(h.Get("WWW-Authenticate")), "basic") {
			t.Fatalf("401 challenge: %d %q", code, h.Values("WWW-Authenticate"))
		}
	})
}

func basicAuth(user, password string) string {
	req, _ := http.NewRequest("GET", "http://x/", nil)
	req.SetBasicAuth(user, password)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

// TestLaunchFilesCarryNoInjectedSettings replays settings smuggled into
// launch files through a line break: in a machine's address or an
// application's display name set by an admin (refused), and in the
// address a rogue VDA registers (refused at registration or at launch;
// never written into a launch file).
func TestLaunchFilesCarryNoInjectedSettings(t *testing.T) {
	s := openHardened(t, 0)
	basic := "Basic " + basicAuth("admin", hardeningPassword)
	const injected = "alternate shell:s:cmd.exe /c calc"

	edit := func(path string, change func(map[string]any)) (int, []byte) {
		t.Helper()
		code, body, _ := call(t, "GET", s.URL()+path, nil, "Authorization", basic)
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		var obj map[string]any
		if err := json.Unmarshal(body, &obj); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(path, "/machines/") { // a machine's GET adds its state
			m := site.Machine{}
			raw, _ := json.Marshal(obj)
			json.Unmarshal(raw, &m)
			raw, _ = json.Marshal(m)
			obj = map[string]any{}
			json.Unmarshal(raw, &obj)
		}
		change(obj)
		code, body, _ = call(t, "PUT", s.URL()+path, obj, "Authorization", basic)
		return code, body
	}
	for _, tc := range []struct{ name, path, field, value string }{
		{"machine address", "/api/v1/admin/machines/office-vda-01", "address", "office-vda-01:3389\r\n" + injected},
		{"machine address with LF", "/api/v1/admin/machines/office-vda-01", "address", "office-vda-01:3389\n" + injected},
		{"application display name", "/api/v1/admin/applications/office-writer-001", "display_name", "Writer\r\n" + injected},
		{"application command line", "/api/v1/admin/applications/office-writer-001", "command_line", "writer\r\n" + injected},
		{"desktop display name", "/api/v1/admin/desktops/" + url.PathEscape("My Workstation"), "display_name", "Desk\n" + injected},
	} {
		t.Run("admin API refuses a "+tc.name, func(t *testing.T) {
			code, body := edit(tc.path, func(o map[string]any) {
				if _, ok := o[tc.field]; !ok {
					t.Fatalf("%s has no field %s: %v", tc.path, tc.field, o)
				}
				o[tc.field] = tc.value
			})
			if code != 400 || !strings.Contains(string(body), "control character") {
				t.Fatalf("PUT: %d %s, want 400 naming the control character", code, body)
			}
		})
	}

	t.Run("a rogue registration never reaches a launch file", func(t *testing.T) {
		vda := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, "{}")
		}))
		defer vda.Close()
		secret, _ := s.EnrolmentSecret()
		for _, m := range []string{"assigned-vda-01", "assigned-vda-02"} {
			code, body, _ := call(t, "POST", s.URL()+vdaproto.PathEnrol, vdaproto.EnrolRequest{Machine: m, Secret: secret})
			if code != 200 {
				t.Fatalf("enrol %s: %d %s", m, code, body)
			}
			var er vdaproto.EnrolResponse
			json.Unmarshal(body, &er)
			code, body, _ = call(t, "POST", s.URL()+vdaproto.PathRegister, vdaproto.RegisterRequest{Machine: m,
				Address: m + ":3389\r\n" + injected, ControlURL: vda.URL, ControlToken: "control-token-0123456789"},
				"Authorization", "Bearer "+er.Credential)
			if code != 400 || !strings.Contains(string(body), "address") {
				t.Fatalf("register %s with a CR/LF address: %d %s, want 400 naming the address", m, code, body)
			}
		}
	})
}
