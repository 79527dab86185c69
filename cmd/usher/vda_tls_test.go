package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/tlsconf/tlstest"
)

// openSite opens a demo site on loopback for agents to enrol with.
func openSite(t *testing.T) *server.Server {
	t.Helper()
	srv, err := server.Open(context.Background(), server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true,
		DemoPassword: "demo-pass-1", HeartbeatInterval: 200 * time.Millisecond, AllowVDAAddressChange: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// exited waits for the agent to exit and returns its status.
func (p *vdaProc) exited(t *testing.T) int {
	t.Helper()
	select {
	case code := <-p.done:
		p.done <- code // for the cleanup
		return code
	case <-time.After(60 * time.Second):
		t.Fatalf("usher vda kept running: %s", p.stderr.String())
	}
	return -1
}

// TestVDARefusesPlainListenerOffLoopback: without TLS, the default
// control listener (:8490, every address) and any other off loopback are
// refused before the agent listens, with a message that says what to
// pass; with --insecure-listen the agent starts, and warns.
func TestVDARefusesPlainListenerOffLoopback(t *testing.T) {
	srv := openSite(t)
	_, secretFile := srv.EnrolmentSecret()
	base := []string{"--broker", srv.URL(), "--machine", "office-vda-01", "--enrolment-secret-file", secretFile,
		"--address", "127.0.0.1:3389"}
	for name, listen := range map[string][]string{
		"default :8490": nil,
		"wildcard":      {"--listen", ":0"},
		"all IPv4":      {"--listen", "0.0.0.0:0"},
	} {
		t.Run(name, func(t *testing.T) {
			p := startVDA(t, append(base, listen...)...)
			if code := p.exited(t); code != 2 {
				t.Fatalf("exit status %d, want 2 (usage): %s", code, p.stderr.String())
			}
			msg := p.stderr.String()
			for _, want := range []string{"not a loopback address and no TLS", "--tls-cert and --tls-key", "--insecure-listen"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the refusal does not say %q: %s", want, msg)
				}
			}
		})
	}

	t.Run("insecure-listen", func(t *testing.T) {
		p := startVDA(t, append(base, "--listen", ":0", "--insecure-listen")...)
		p.controlURL(t)
		if msg := p.stderr.String(); !strings.Contains(msg, "WARNING: the control listener :0 speaks clear HTTP off loopback") {
			t.Fatalf("no loud warning: %s", msg)
		}
		if code := p.stop(t); code != 0 {
			t.Fatalf("exit status %d: %s", code, p.stderr.String())
		}
	})
}

// tlsFront serves the broker srv over TLS with pair's certificate on a
// loopback port until the test ends, as a broker with --tls-cert does,
// and returns its base URL.
func tlsFront(t *testing.T, srv *server.Server, pair tlstest.Pair) string {
	t.Helper()
	target, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: proxy, ErrorLog: log.New(io.Discard, "", 0)} // the refused handshakes
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(tls.NewListener(ln, pair.TLSConfig())) }()
	t.Cleanup(func() { hs.Close(); <-done })
	return "https://" + ln.Addr().String()
}

// machineInfo is what the admin API says of a machine's registration.
type machineInfo struct {
	Registration string `json:"registration"`
	ControlURL   string `json:"control_url"`
	ControlPin   string `json:"control_pin"`
}

func machineStatus(t *testing.T, srv *server.Server, machine string) machineInfo {
	t.Helper()
	_, body := get(t, srv.URL()+"/api/v1/admin/machines/"+machine, "admin", "demo-pass-1")
	var m machineInfo
	json.Unmarshal(body, &m)
	return m
}

// TestVDAAgentRefusesBrokerCertificates runs the agent against brokers
// whose certificates it must refuse (self-signed and not trusted, issued
// for another host, expired) before one it trusts (--broker-ca): each is
// refused with a warning that names it and says why, and the agent goes
// on to the next, and registers with the last.
func TestVDAAgentRefusesBrokerCertificates(t *testing.T) {
	srv := openSite(t)
	_, secretFile := srv.EnrolmentSecret()
	ca := tlstest.NewCA(t, "site")
	now := time.Now()
	bad := []struct{ url, why string }{
		{tlsFront(t, srv, tlstest.SelfSigned(t, t.TempDir(), "stranger", "127.0.0.1")), "not signed by a trusted CA"},
		{tlsFront(t, srv, ca.Valid(t, "elsewhere", "broker.elsewhere.test")), "issued for another host name"},
		{tlsFront(t, srv, ca.Issue(t, "old", []string{"127.0.0.1"}, now.Add(-48*time.Hour), now.Add(-time.Hour))), "expired"},
	}
	good := tlsFront(t, srv, ca.Valid(t, "broker", "127.0.0.1"))
	brokers := []string{}
	for _, b := range bad {
		brokers = append(brokers, b.url)
	}
	agent := startVDA(t, "--broker", strings.Join(append(brokers, good), ","), "--broker-ca", ca.CertFile,
		"--machine", "office-vda-01", "--enrolment-secret-file", secretFile, "--listen", "127.0.0.1:0", "--address", "127.0.0.1:3389")
	agent.controlURL(t)
	waitFor(t, "office-vda-01 registered through the trusted broker", func() bool {
		return machineStatus(t, srv, "office-vda-01").Registration == "registered"
	})
	logs := agent.stderr.String()
	for _, b := range bad {
		if want := "broker " + b.url + ": its TLS certificate is refused: " + b.why; !strings.Contains(logs, want) {
			t.Errorf("the agent's log does not say %q:\n%s", want, logs)
		}
	}
	if code := agent.stop(t); code != 0 {
		t.Fatalf("usher vda exited with %d: %s", code, agent.stderr.String())
	}
}

// TestVDAAgentOverTLS runs a whole session over TLS both ways: the agent
// verifies the broker with --broker-ca, serves its control listener with
// --tls-cert, and registers its certificate's pin; the broker prepares
// the session pinned to it, and a client presents the ticket over TLS.
// Then the agent's certificate is rotated under the client's kept
// connection: the agent registers the new pin, the kept connection goes
// on working, and the broker reaches the agent on the new certificate.
func TestVDAAgentOverTLS(t *testing.T) {
	srv := openSite(t)
	_, secretFile := srv.EnrolmentSecret()
	ca := tlstest.NewCA(t, "site")
	front := tlsFront(t, srv, ca.Valid(t, "broker", "127.0.0.1"))
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "vda.crt"), filepath.Join(dir, "vda.key")
	first, second := tlstest.SelfSigned(t, dir, "vda-1", "127.0.0.1"), tlstest.SelfSigned(t, dir, "vda-2", "127.0.0.1")
	first.Install(t, certFile, keyFile)

	agent := startVDA(t, "--broker", front, "--broker-ca", ca.CertFile, "--machine", "office-vda-01",
		"--enrolment-secret-file", secretFile, "--listen", "127.0.0.1:0", "--address", "127.0.0.1:3389",
		"--tls-cert", certFile, "--tls-key", keyFile)
	addr := strings.TrimPrefix(agent.controlURL(t), "http://")
	control := "https://" + addr
	waitFor(t, "office-vda-01 registered with its pin", func() bool {
		m := machineStatus(t, srv, "office-vda-01")
		return m.Registration == "registered" && m.ControlPin == tlsconf.Fingerprint(first.Leaf.Raw)
	})
	if m := machineStatus(t, srv, "office-vda-01"); m.ControlURL != control {
		t.Fatalf("control URL %q, want %q", m.ControlURL, control)
	}

	// The client trusts the agent's two certificates, and keeps its
	// connection.
	pool := x509.NewCertPool()
	pool.AddCert(first.Leaf)
	pool.AddCert(second.Leaf)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	var conns atomic.Int32
	trace := &httptrace.ClientTrace{ConnectStart: func(string, string) { conns.Add(1) }}
	present := func(ticket string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", control+"/connect", strings.NewReader(`{"ticket":"`+ticket+`","client_name":"laptop-42"}`))
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("present the ticket: %v", err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.TLS.PeerCertificates[0].Subject.CommonName
	}

	token := login(t, front, ca)
	l := launchOver(t, front, ca, token)
	if code, cn := present(l.Ticket); code != 200 || cn != "vda-1" {
		t.Fatalf("present the ticket: %d from %q", code, cn)
	}
	waitFor(t, "the session active at the broker", func() bool { return sessionState(t, front, ca, token) == "active" })

	second.Install(t, certFile, keyFile)
	waitFor(t, "the new certificate pinned", func() bool {
		m := machineStatus(t, srv, "office-vda-01")
		return m.Registration == "registered" && m.ControlPin == tlsconf.Fingerprint(second.Leaf.Raw)
	})
	if !strings.Contains(agent.stderr.String(), "the control listener's certificate changed; registering again") {
		t.Errorf("the agent did not say it pinned the new certificate: %s", agent.stderr.String())
	}
	// The broker reaches the agent on the new certificate: a disconnect
	// and a reconnection (a new prepare).
	if code, body := postJSONWith(t, front, ca, "/api/v1/sessions/"+l.SessionID+"/disconnect", token, ""); code != 204 {
		t.Fatalf("disconnect after the rotation: %d %s", code, body)
	}
	waitFor(t, "the disconnect at the broker", func() bool { return sessionState(t, front, ca, token) == "disconnected" })
	r := launchOver(t, front, ca, token)
	if !r.Reconnected || r.SessionID != l.SessionID {
		t.Fatalf("the launch after the rotation did not go back to the session: %+v", r)
	}
	// The client's connection of before the rotation still carries it.
	if code, cn := present(r.Ticket); code != 200 || cn != "vda-1" {
		t.Fatalf("the kept connection after the rotation: %d from %q, want 200 from vda-1 (the connection of before)", code, cn)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("the client dialled %d times, want its one connection kept", n)
	}
	if code := agent.stop(t); code != 0 {
		t.Fatalf("usher vda exited with %d: %s", code, agent.stderr.String())
	}
}

// TestBrokerRefusesAStrangerAtTheControlURL: the machine's registered
// control URL leads to a listener with another certificate than the one
// the agent pinned: the broker sends it no control token and no session,
// and says which machine it refused.
func TestBrokerRefusesAStrangerAtTheControlURL(t *testing.T) {
	var logs syncBuffer
	srv, err := server.Open(context.Background(), server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true,
		DemoPassword: "demo-pass-1", HeartbeatInterval: 200 * time.Millisecond, AllowVDAAddressChange: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	_, secretFile := srv.EnrolmentSecret()
	dir := t.TempDir()
	own := tlstest.SelfSigned(t, dir, "vda", "127.0.0.1")

	// The stranger listens with a certificate of its own, and notes every
	// request that reaches it.
	var requests atomic.Int32
	stranger := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	stranger.Config.ErrorLog = log.New(io.Discard, "", 0)
	stranger.TLS = tlstest.SelfSigned(t, dir, "stranger", "127.0.0.1").TLSConfig()
	stranger.StartTLS()
	t.Cleanup(stranger.Close)

	agent := startVDA(t, "--broker", srv.URL(), "--machine", "office-vda-01", "--enrolment-secret-file", secretFile,
		"--listen", "127.0.0.1:0", "--address", "127.0.0.1:3389", "--tls-cert", own.CertFile, "--tls-key", own.KeyFile,
		"--control-url", stranger.URL)
	agent.controlURL(t)
	waitFor(t, "office-vda-01 registered", func() bool { return machineStatus(t, srv, "office-vda-01").Registration == "registered" })

	token := login(t, srv.URL(), nil)
	code, body := postJSON(t, srv.URL()+"/api/v1/resources/office-writer-001/launch", token, `{"client_name":"laptop-42"}`)
	if code == 200 {
		t.Fatalf("a launch on a machine whose control URL shows another certificate succeeded: %s", body)
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("the stranger got %d requests", n)
	}
	if want := `machine \"office-vda-01\" at ` + stranger.URL + `: the control listener's certificate is not the one its VDA registered`; !strings.Contains(logs.String(), want) {
		t.Fatalf("the broker's log does not say %q:\n%s", want, logs.String())
	}
	agent.stop(t)
}

// httpsClient verifies the broker with ca (nil: a clear broker).
func httpsClient(ca *tlstest.CA) *http.Client {
	if ca == nil {
		return http.DefaultClient
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
}

func postJSONWith(t *testing.T, base string, ca *tlstest.CA, path, token, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpsClient(ca).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func login(t *testing.T, base string, ca *tlstest.CA) string {
	t.Helper()
	var login struct{ Token string }
	code, body := postJSONWith(t, base, ca, "/api/v1/login", "", `{"username":"DEMO\\user0001","password":"demo-pass-1"}`)
	if json.Unmarshal(body, &login); code != 200 || login.Token == "" {
		t.Fatalf("login: %d %s", code, body)
	}
	return login.Token
}

type launchAnswer struct {
	SessionID   string `json:"session_id"`
	Machine     string `json:"machine"`
	Ticket      string `json:"ticket"`
	Reconnected bool   `json:"reconnected"`
}

func launchOver(t *testing.T, base string, ca *tlstest.CA, token string) launchAnswer {
	t.Helper()
	code, body := postJSONWith(t, base, ca, "/api/v1/resources/office-writer-001/launch", token, `{"client_name":"laptop-42"}`)
	var l launchAnswer
	json.Unmarshal(body, &l)
	if code != 200 || l.Ticket == "" || l.Machine != "office-vda-01" {
		t.Fatalf("launch: %d %s", code, body)
	}
	return l
}

func sessionState(t *testing.T, base string, ca *tlstest.CA, token string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/api/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpsClient(ca).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct{ Sessions []struct{ ID, State string } }
	json.NewDecoder(resp.Body).Decode(&s)
	if len(s.Sessions) == 0 {
		return "none"
	}
	return s.Sessions[0].State
}
