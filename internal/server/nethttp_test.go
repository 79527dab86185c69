package server_test

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/sitetest"
	"github.com/usher-vdi/usher/internal/tlsconf/tlstest"
)

// TestNetHTTPServesTheSite opens a demo site over TLS with
// Config.HTTPServer net/http: a user logs on, enumerates and launches
// over REST and over NFuse (on the main listener and on NFuse's), every
// answer with HSTS, and a client address past MaxConnsPerClient is
// refused as with the hot path, and counted.
func TestNetHTTPServesTheSite(t *testing.T) {
	t.Parallel()
	// The simulated VDAs' connections come from 127.0.0.1 too.
	const perClient = 200
	ctx := t.Context()
	s, err := server.Open(ctx, server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NFuseListen: "127.0.0.1:0",
		HTTPServer: server.HTTPServerNetHTTP, TLSCert: server.TLSAuto, Demo: true, DemoPassword: demoPassword,
		PasswordParams: sitetest.Cheap, SimVDAs: -1, SimLogonDelay: -1, MaxConnsPerClient: perClient})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if reg, total := s.WaitSimulated(ctx, time.Minute); reg != total {
		t.Fatalf("%d of %d simulated VDAs registered", reg, total)
	}
	c := tlsClient(tlstest.Pool(t, s.TLSCertFile()))
	do := func(t *testing.T, method, url, body string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(body, "<") {
			req.Header.Set("Content-Type", "text/xml")
		} else if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("Strict-Transport-Security"); !strings.HasPrefix(got, "max-age=") {
			t.Errorf("%s %s: Strict-Transport-Security %q", method, url, got)
		}
		if resp.TLS == nil {
			t.Errorf("%s %s: not over TLS", method, url)
		}
		return resp.StatusCode, string(b)
	}

	t.Run("REST", func(t *testing.T) {
		code, body := do(t, "POST", s.URL()+"/api/v1/login", `{"username":"user0001","password":"`+demoPassword+`"}`)
		var lr struct{ Token string }
		if code != 200 || json.Unmarshal([]byte(body), &lr) != nil || lr.Token == "" {
			t.Fatalf("logon: %d %.300s", code, body)
		}
		code, body = do(t, "GET", s.URL()+"/api/v1/resources", "", "Authorization", "Bearer "+lr.Token)
		var res struct{ Resources []struct{ Name string } }
		if code != 200 || json.Unmarshal([]byte(body), &res) != nil || len(res.Resources) == 0 {
			t.Fatalf("enumeration: %d %.300s", code, body)
		}
		code, body = do(t, "POST", s.URL()+"/api/v1/resources/"+url.PathEscape(res.Resources[0].Name)+"/launch", "", "Authorization", "Bearer "+lr.Token)
		var l launched
		if code != 200 || json.Unmarshal([]byte(body), &l) != nil || l.SessionID == "" || l.Machine == "" {
			t.Fatalf("launch of %s: %d %.300s", res.Resources[0].Name, code, body)
		}
	})

	creds := cleartextCreds("user0002", demoPassword, "")
	for _, base := range []string{s.URL(), s.NFuseURL()} {
		t.Run("NFuse "+base, func(t *testing.T) {
			nfuse := func(kind, inner string) string {
				t.Helper()
				code, body := do(t, "POST", base+"/scripts/wpnbr.dll", `<?xml version="1.0" encoding="UTF-8"?><NFuseProtocol version="5.4"><`+kind+`>`+inner+`</`+kind+`></NFuseProtocol>`)
				if m := errorIDRE.FindStringSubmatch(body); code != 200 || m != nil {
					t.Fatalf("%s: %d %.300s", kind, code, body)
				}
				return body
			}
			body := nfuse("RequestAppData", `<Scope traverse="subtree"/><DesiredDetails>defaults</DesiredDetails><ServerType>all</ServerType><ClientType>ica30</ClientType>`+creds)
			apps := inNameRE.FindAllStringSubmatch(body, -1)
			if len(apps) == 0 {
				t.Fatalf("enumeration: no applications: %.300s", body)
			}
			app := apps[len(apps)-1][1]
			if base == s.NFuseURL() {
				app = apps[0][1]
			}
			if body := nfuse("RequestAddress", `<Name><AppName>`+app+`</AppName></Name><ClientName>nethttp</ClientName>`+creds); !strings.Contains(body, "<TicketTag>") {
				t.Fatalf("launch of %s: no ticket: %.300s", app, body)
			}
		})
	}

	t.Run("connections per client", func(t *testing.T) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.9")}, Timeout: 10 * time.Second}
		for range perClient {
			nc, err := d.DialContext(ctx, "tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
		}
		nc, err := d.DialContext(ctx, "tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("one connection past the bound from 127.0.0.9: read %v, want it closed", err)
		}
		if code, body := do(t, "GET", s.URL()+"/metrics", ""); code != 200 || !strings.Contains(body, `usher_http_connections_refused_total{reason="per_client"} 1`) {
			t.Fatalf("metrics: %d, want 1 refused per client:\n%s", code, grepLines(body, "usher_http_connections"))
		}
	})
}

// grepLines returns the lines of s that hold sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
