package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/gateway"
	"github.com/usher-vdi/usher/internal/gateway/gatewaytest"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// TestDisplayThroughTheSite: a site over TLS (the hot path's listener,
// the HTTP server's timeouts) serves a session's display through its
// gateway: the demo's pooled desktops register as vnc machines at a test
// agent through the VDA API, a portal logon launches one, and the
// display_url opens with the ticket on the portal's origin, spliced to
// the agent, and counted on /metrics.
func TestDisplayThroughTheSite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, _ := openSite(t, func(c *server.Config) { c.TLSCert = server.TLSAuto })
	agent := gatewaytest.NewAgent(t)
	agent.SetScript(gatewaytest.Echo)
	pool := x509.NewCertPool()
	pool.AddCert(s.Certificate())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	call := func(path string, body any, header ...string) *http.Response {
		t.Helper()
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+path, bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST %s: %s", path, resp.Status)
		}
		return resp
	}
	decode := func(resp *http.Response, v any) {
		t.Helper()
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}

	secret, _ := s.EnrolmentSecret()
	for i := 1; i <= 5; i++ {
		name := fmt.Sprintf("pooled-vda-%02d", i)
		var er vdaproto.EnrolResponse
		decode(call(vdaproto.PathEnrol, vdaproto.EnrolRequest{Machine: name, Secret: secret}), &er)
		call(vdaproto.PathRegister, vdaproto.RegisterRequest{Machine: name, Address: name + ".demo.internal:5900", Protocol: vdaproto.ProtocolVNC,
			ControlURL: agent.URL(), ControlToken: gatewaytest.Token, ControlPin: agent.Pin()}, "Authorization", "Bearer "+er.Credential).Body.Close()
	}
	logon := call("/api/v1/login", api.LoginRequest{Username: "user0001", Password: demoPassword, SessionCookie: true})
	logon.Body.Close()
	var cookie *http.Cookie
	for _, c := range logon.Cookies() {
		if c.Name == api.SessionCookieName {
			cookie = c
		}
	}
	var l api.LaunchResponse
	decode(call("/api/v1/resources/"+strings.ReplaceAll(demo.PooledDesktop, " ", "%20")+"/launch", nil, "Cookie", cookie.String()), &l)
	if l.DisplayURL != gateway.Path(l.SessionID) {
		t.Fatalf("launch: display_url %q, want the gateway's %q", l.DisplayURL, gateway.Path(l.SessionID))
	}

	c, resp, err := websocket.Dial(ctx, "wss"+strings.TrimPrefix(s.URL(), "https")+l.DisplayURL, &websocket.DialOptions{HTTPClient: hc,
		HTTPHeader:   http.Header{"Origin": {s.URL()}, "Cookie": {cookie.String()}},
		Subprotocols: []string{vdaproto.DisplaySubprotocol, vdaproto.TicketSubprotocol(l.Ticket)}})
	if err != nil {
		t.Fatalf("open the display: %v (%v)", err, resp)
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	msg := bytes.Repeat([]byte("RFB "), 40<<10)
	if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
		t.Fatal(err)
	}
	if _, b, err := c.Read(ctx); err != nil || !bytes.Equal(b, msg) {
		t.Fatalf("echo through the site: %d bytes, %v", len(b), err)
	}
	if code, body := getWith(t, hc, s.URL()+"/metrics"); code != 200 || !strings.Contains(body, "usher_gateway_displays_open 1") ||
		!strings.Contains(body, fmt.Sprintf(`usher_gateway_bytes_total{direction="to_agent"} %d`, len(msg))) {
		t.Errorf("/metrics: %d, want the display counted:\n%s", code, grep(body, "usher_gateway_"))
	}
	c.Close(websocket.StatusNormalClosure, "")
	if agent.Opened() != 1 {
		t.Errorf("the agent opened %d displays, want 1", agent.Opened())
	}
}

func getWith(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// grep returns the lines of s that contain sub.
func grep(s, sub string) string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
