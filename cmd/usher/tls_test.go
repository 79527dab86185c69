package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/ctx1"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/tlsconf/tlstest"
)

// nfuseEnumeration is the IMA/FMA test's WCAT request for user0090.
func nfuseEnumeration(password string) string {
	return `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE NFuseProtocol SYSTEM "NFuse.dtd"><NFuseProtocol version="5.4"><RequestAppData><Scope traverse="subtree"></Scope><DesiredDetails>permissions</DesiredDetails><ServerType>all</ServerType><ClientType>ica30</ClientType><ClientType>content</ClientType><Credentials><UserName>user0090</UserName><Password encoding="ctx1">` +
		ctx1.Encode(password) + `</Password><Domain type="NT">DEMO</Domain></Credentials><ClientName>LOADTESTER</ClientName><ClientAddress addresstype="dot">10.10.10.10</ClientAddress></RequestAppData></NFuseProtocol>`
}

// nfuseAddr is the NFuse listener's address in a serve's log.
func nfuseAddr(t *testing.T, log string) string {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "NFuse listening") {
			_, a, _ := strings.Cut(line, "addr=")
			return strings.TrimSpace(a)
		}
	}
	t.Fatalf("no NFuse listener in the log:\n%s", log)
	return ""
}

// curl runs curl with args and returns its output and exit status.
func curl(t *testing.T, args ...string) (string, int) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	out, err := exec.Command("curl", append([]string{"-sS", "--max-time", "30"}, args...)...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// TestServeTLS runs usher serve --demo with a self-signed certificate
// (--tls-cert auto), whose simulated VDAs register over TLS, and reaches
// every listener with real clients that
// verify it: curl --cacert at the portal, the REST API and NFuse (main
// and --nfuse-listen), Go's client, and usher load at the NFuse
// listener. Clients that do not trust it fail with a certificate error.
func TestServeTLS(t *testing.T) {
	data := t.TempDir()
	s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", data, "--tls-cert", "auto", "--nfuse-listen", "127.0.0.1:0",
		"--sim-vdas", "4", "--sim-wait", "1m")
	base := strings.Replace(s.url, "http://", "https://", 1)
	cert := filepath.Join(data, tlsconf.SelfSignedCert)
	banner := s.stdout.String()
	for _, want := range []string{base + "/console", cert, "SHA-256 ", "curl --cacert " + cert, "4 simulated VDAs registered"} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}
	nfuse := "https://" + nfuseAddr(t, s.stderr.String()) + "/scripts/wpnbr.dll"
	body := nfuseEnumeration("demo-pass-1")

	t.Run("curl", func(t *testing.T) {
		for _, c := range []struct {
			name string
			args []string
			want string
		}{
			{"portal", []string{base + "/"}, "/portal/portal.js"},
			{"REST", []string{"-u", "admin:demo-pass-1", base + "/api/v1/admin/applications?limit=5"}, `"total": 400`},
			{"NFuse", []string{"-H", "Content-Type: text/xml", "--data-binary", body, base + "/scripts/wpnbr.dll"}, "<AppData>"},
			{"NFuse listener", []string{"-H", "Content-Type: text/xml", "--data-binary", body, nfuse}, "<AppData>"},
		} {
			out, code := curl(t, append([]string{"-i", "--cacert", cert}, c.args...)...)
			if code != 0 || !strings.Contains(out, c.want) {
				t.Fatalf("%s: curl exit %d:\n%.500s", c.name, code, out)
			}
			if !strings.Contains(strings.ToLower(out), "strict-transport-security: max-age=") {
				t.Errorf("%s: no HSTS header:\n%.500s", c.name, out)
			}
		}
		// Without the certificate: curl's certificate error (60), at once.
		if out, code := curl(t, base+"/healthz"); code != 60 {
			t.Fatalf("curl without --cacert: exit %d, want 60 (certificate problem): %s", code, out)
		}
		// Clear HTTP to the TLS port gets no answer.
		if out, code := curl(t, "http://"+strings.TrimPrefix(s.url, "http://")+"/healthz"); code == 0 {
			t.Fatalf("clear HTTP answered: %s", out)
		}
	})

	t.Run("Go client", func(t *testing.T) {
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tlstest.Pool(t, cert)}}}
		for _, url := range []string{base + "/scripts/wpnbr.dll", nfuse} {
			resp, err := c.Post(url, "text/xml", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || strings.Count(string(raw), "<AppData>") < 400 || resp.Header.Get("Strict-Transport-Security") == "" {
				t.Fatalf("%s: %d, HSTS %q: %.300s", url, resp.StatusCode, resp.Header.Get("Strict-Transport-Security"), raw)
			}
		}
		_, err := (&http.Client{Timeout: 30 * time.Second}).Get(base + "/healthz")
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Fatalf("a client with the system roots: %v, want an unknown authority error", err)
		}
	})

	t.Run("usher load", func(t *testing.T) {
		args := []string{"load", "--target", "nfuse", "--url", nfuse, "--demo-users", "20", "--password", "demo-pass-1",
			"--executor", "fixed", "--concurrency", "4", "--requests", "40", "--threshold", "errors==0"}
		if code, stdout, stderr := run(t, "", append(args, "-q", "--ca", cert)...); code != 0 {
			t.Fatalf("usher load --ca: exit %d\n%s%s", code, stdout, stderr)
		}
		// Without --ca: every transaction fails on the certificate.
		code, stdout, stderr := run(t, "", args...)
		if code != 1 || !strings.Contains(stdout+stderr, "tls-certificate") {
			t.Fatalf("usher load without --ca: exit %d, want 1 naming the certificate\n%s%s", code, stdout, stderr)
		}
		if code, _, stderr := run(t, "", "load", "--target", "nfuse", "--url", nfuse, "--ca", filepath.Join(data, "none.pem")); code != 2 || !strings.Contains(stderr, "none.pem") {
			t.Fatalf("usher load --ca of a missing file: exit %d %s", code, stderr)
		}
	})

	t.Run("bench client", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "body.xml")
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"bench", "coldstart-client", "--url", nfuse, "--body", file, "--requests", "3"}
		code, stdout, stderr := run(t, "", append(args, "--ca", cert)...)
		if code != 0 || !strings.Contains(stdout, `"errors":0`) {
			t.Fatalf("bench coldstart-client --ca: exit %d\n%s%s", code, stdout, stderr)
		}
		if code, stdout, _ := run(t, "", args...); code != 0 || !strings.Contains(stdout, "certificate") {
			t.Fatalf("bench coldstart-client without --ca: exit %d, want its errors to name the certificate: %s", code, stdout)
		}
		if code, _, stderr := run(t, "", "bench", "enumerate", "--ca", cert); code != 2 || !strings.Contains(stderr, "--ca verifies an https") {
			t.Fatalf("bench enumerate --ca without an https --url: exit %d %s", code, stderr)
		}
	})
}

// TestServeListenRule: a clear listener off loopback is refused, naming
// the flag, unless --insecure-listen, which starts it with a warning.
func TestServeListenRule(t *testing.T) {
	for _, args := range [][]string{{"--listen", "0.0.0.0:0"}, {"--nfuse-listen", ":0"}} {
		code, _, stderr := run(t, "", append([]string{"serve", "--data", t.TempDir()}, args...)...)
		if code != 2 || !strings.Contains(stderr, args[0]+" "+args[1]) || !strings.Contains(stderr, "--insecure-listen") || !strings.Contains(stderr, "--tls-cert") {
			t.Fatalf("%v: exit %d, stderr %q; want 2 naming the flag", args, code, stderr)
		}
	}
	s := startServe(t, "--data", t.TempDir(), "--listen", "0.0.0.0:0", "--insecure-listen")
	if !strings.Contains(s.stderr.String(), "INSECURE") {
		t.Fatalf("no warning in the log:\n%s", s.stderr.String())
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.url, "http://"))
	if code, _ := get(t, "http://127.0.0.1:"+port+"/healthz", "", ""); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
}

// TestServeTLSBadPairs: an expired certificate, a key of another
// certificate and a missing key file stop the start with an error that
// names the files.
func TestServeTLSBadPairs(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	good, _ := tlstest.Valid(t, dir, "good")
	_, other := tlstest.Valid(t, dir, "other")
	old, oldKey := tlstest.WritePair(t, dir, "old", now.Add(-48*time.Hour), now.Add(-time.Hour))
	for _, c := range []struct {
		name       string
		cert, key  string
		code       int
		want1, wnt string
	}{
		{"expired", old, oldKey, 1, old, "expired at"},
		{"key of another certificate", good, other, 1, other, "does not match"},
		{"missing key file", good, filepath.Join(dir, "none.key"), 1, "none.key", "no such file"},
		{"no key", good, "", 2, "--tls-key", "go together"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--tls-cert", c.cert}
			if c.key != "" {
				args = append(args, "--tls-key", c.key)
			}
			code, _, stderr := run(t, "", args...)
			if code != c.code || !strings.Contains(stderr, c.want1) || !strings.Contains(stderr, c.wnt) {
				t.Fatalf("exit %d, stderr %q; want %d with %q and %q", code, stderr, c.code, c.want1, c.wnt)
			}
		})
	}
}

// TestServeTLSHangup rotates usher serve's certificate through
// Main.Hangup (SIGHUP's path in the process): a connection kept alive
// from before keeps working on its handshake, new handshakes get the new
// certificate, and a bad pair is refused while the last good serves on.
func TestServeTLSHangup(t *testing.T) {
	dir := t.TempDir()
	aCert, aKey := tlstest.Valid(t, dir, "a")
	bCert, bKey := tlstest.Valid(t, dir, "b")
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	tlstest.Replace(t, aCert, aKey, cert, key)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hup := make(chan struct{})
	reloaded := make(chan struct{}, 1)
	addr := make(chan string, 1)
	stderr := &syncBuffer{}
	m := &Main{Stdin: strings.NewReader(""), Stdout: &syncBuffer{}, Stderr: stderr, Getenv: func(string) string { return "" },
		Listening: func(_, a string) { addr <- a }, Hangup: hup, Reloaded: func() { reloaded <- struct{}{} }}
	done := make(chan int, 1)
	go func() {
		done <- m.Run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--tls-cert", cert, "--tls-key", key})
	}()
	var base string
	select {
	case a := <-addr:
		base = "https://" + a
	case code := <-done:
		t.Fatalf("serve exited with %d: %s", code, stderr)
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not listen")
	}
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited with %d: %s", code, stderr)
		}
	}()

	pool := tlstest.Pool(t, aCert)
	pool.AppendCertsFromPEM(mustRead(t, bCert))
	kept := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer kept.CloseIdleConnections()
	subject := func(c *http.Client) (string, bool) {
		t.Helper()
		var reused bool
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}), "GET", base+"/healthz", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].Subject.CommonName, reused
	}
	fresh := func() string {
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
		got, _ := subject(c)
		return got
	}
	if got, _ := subject(kept); got != "a" {
		t.Fatalf("first certificate %q", got)
	}
	hangup := func() {
		hup <- struct{}{}
		select {
		case <-reloaded:
		case <-time.After(30 * time.Second):
			t.Fatal("no reload after the hangup")
		}
	}
	tlstest.Replace(t, bCert, bKey, cert, key)
	hangup()
	if got := fresh(); got != "b" {
		t.Fatalf("after SIGHUP: certificate %q, want b", got)
	}
	if got, reused := subject(kept); got != "a" || !reused {
		t.Fatalf("the connection of before: %q, reused %v; want a, reused", got, reused)
	}
	tlstest.Replace(t, bCert, aKey, cert, key)
	hangup()
	if !strings.Contains(stderr.String(), "not reloaded") {
		t.Fatalf("a bad pair at SIGHUP was not logged:\n%s", stderr)
	}
	if got := fresh(); got != "b" {
		t.Fatalf("after a bad pair: certificate %q, want b", got)
	}
}

func mustRead(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestServeTLSSIGHUPProcess sends a real SIGHUP to usher serve in its own
// process: it reads its certificate again and goes on serving (SIGHUP
// does not end it), and SIGINT still stops it cleanly.
func TestServeTLSSIGHUPProcess(t *testing.T) {
	dir := t.TempDir()
	aCert, aKey := tlstest.Valid(t, dir, "a")
	bCert, bKey := tlstest.Valid(t, dir, "b")
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	tlstest.Replace(t, aCert, aKey, cert, key)
	port := freePort(t)
	cmd := exec.Command(testSelf[0], append(append([]string{}, testSelf[1:]...), "serve", "--listen", "127.0.0.1:"+port,
		"--data", filepath.Join(dir, "data"), "--tls-cert", cert, "--tls-key", key)...)
	stderr := &syncBuffer{}
	cmd.Stderr, cmd.Stdout = stderr, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	}()
	waitLog := func(want string) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for !strings.Contains(stderr.String(), want) {
			select {
			case <-exited:
				t.Fatalf("usher serve exited (%v) before logging %q:\n%s", waitErr, want, stderr)
			case <-deadline:
				t.Fatalf("usher serve did not log %q:\n%s", want, stderr)
			case <-tick.C:
			}
		}
	}
	waitLog("listening")
	pool := tlstest.Pool(t, aCert)
	pool.AppendCertsFromPEM(mustRead(t, bCert))
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	subject := func() string {
		t.Helper()
		resp, err := c.Get("https://127.0.0.1:" + port + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].Subject.CommonName
	}
	if got := subject(); got != "a" {
		t.Fatalf("first certificate %q", got)
	}
	tlstest.Replace(t, bCert, bKey, cert, key)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog("SIGHUP: tls certificate files read again")
	if got := subject(); got != "b" {
		t.Fatalf("after SIGHUP: certificate %q, want b", got)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		// An interrupted command exits 130, as a shell's does.
		if code := cmd.ProcessState.ExitCode(); code != 130 {
			t.Fatalf("usher serve after SIGINT: %v, want exit status 130\n%s", waitErr, stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("usher serve did not stop at SIGINT")
	}
}

// getTLS GETs url trusting certFile, and returns the status, the HSTS
// header and the body.
func getTLS(t *testing.T, url, certFile string) (int, string, string) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tlstest.Pool(t, certFile)}}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Strict-Transport-Security"), string(b)
}

// TestBlockRolesMetricsTLS: usher stream's --metrics-listen serves TLS
// with its --tls-cert, usher hostcache's and usher target's with
// --metrics-tls-cert; off loopback without TLS each is refused, naming
// the flag, unless --insecure-listen, which warns.
func TestBlockRolesMetricsTLS(t *testing.T) {
	dir := t.TempDir()
	store, _ := importImage(t, dir, "golden", make([]byte, 1<<20))
	cert, key := tlstest.Valid(t, dir, "metrics")

	metrics := startRole(t, "metrics", "stream", "--store", store, "--listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key,
		"--metrics-listen", "127.0.0.1:0")
	if code, hsts, body := getTLS(t, "https://"+metrics+"/metrics", cert); code != 200 || hsts == "" || !strings.Contains(body, "usher_nbd_connections") {
		t.Fatalf("stream metrics over TLS: %d, HSTS %q: %.300s", code, hsts, body)
	}
	// Clear HTTP gets net/http's 400 "client sent an HTTP request to an
	// HTTPS server", never the metrics.
	if resp, err := http.Get("http://" + metrics + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("the stream's TLS metrics listener answered clear HTTP with %s", resp.Status)
		}
	}
	nbdAddr := startRole(t, "nbd", "stream", "--store", store, "--listen", "127.0.0.1:0")

	hc := []string{"hostcache", "--upstream", "nbd://" + nbdAddr, "--dir", filepath.Join(dir, "hc"), "--vm", "vm1=golden",
		"--listen", "unix:" + filepath.Join(dir, "hc.sock")}
	metrics = startRole(t, "metrics", append(hc, "--metrics-listen", "127.0.0.1:0", "--metrics-tls-cert", cert, "--metrics-tls-key", key)...)
	if code, hsts, body := getTLS(t, "https://"+metrics+"/metrics", cert); code != 200 || hsts == "" || !strings.Contains(body, "usher_hostcache") {
		t.Fatalf("hostcache metrics over TLS: %d, HSTS %q: %.300s", code, hsts, body)
	}
	target := []string{"target", "--upstream", "nbd://" + nbdAddr + "/golden", "--cache", "ram", "--ram", "4MiB",
		"--listen", "unix:" + filepath.Join(dir, "target.sock")}
	metrics = startRole(t, "metrics", append(target, "--metrics-listen", "127.0.0.1:0", "--metrics-tls-cert", cert, "--metrics-tls-key", key)...)
	if code, hsts, body := getTLS(t, "https://"+metrics+"/metrics", cert); code != 200 || hsts == "" || !strings.Contains(body, "usher_") {
		t.Fatalf("target metrics over TLS: %d, HSTS %q: %.300s", code, hsts, body)
	}

	for _, args := range [][]string{
		{"stream", "--store", store, "--listen", "127.0.0.1:0", "--metrics-listen", "0.0.0.0:0"},
		append(append([]string{}, hc...), "--dir", filepath.Join(dir, "hc2"), "--metrics-listen", "0.0.0.0:0"),
		append(append([]string{}, target...), "--metrics-listen", "0.0.0.0:0"),
	} {
		code, _, stderr := run(t, "", args...)
		if code != 2 || !strings.Contains(stderr, "--metrics-listen 0.0.0.0:0") || !strings.Contains(stderr, "--insecure-listen") {
			t.Fatalf("%s --metrics-listen 0.0.0.0:0 without TLS: exit %d, stderr %q", args[0], code, stderr)
		}
	}
	_, _, stderr := startRoleStop(t, "metrics", "stream", "--store", store, "--listen", "127.0.0.1:0", "--metrics-listen", "0.0.0.0:0", "--insecure-listen")
	if !strings.Contains(stderr.String(), "INSECURE") {
		t.Fatalf("no warning for an insecure metrics listener:\n%s", stderr)
	}
}

// TestNotReadyTLS: while a broker waits for its site DB, its listener
// answers health checks over TLS with its certificate.
func TestNotReadyTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := tlstest.Valid(t, dir, "broker")
	addr := "127.0.0.1:" + freePort(t)
	stop := notReady(server.Config{Listen: addr, DataDir: dir, TLSCert: cert, TLSKey: key}, errors.New("no site DB"))
	defer stop()
	code, _, body := getTLS(t, "https://"+addr+"/healthz", cert)
	if code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz over TLS: %d %q", code, body)
	}
	if code, _, body := getTLS(t, "https://"+addr+"/readyz", cert); code != 503 || !strings.Contains(body, "starting") {
		t.Fatalf("/readyz over TLS: %d %q", code, body)
	}
}
