// Package dirserver is a directory server for the benches and the tests:
// Debian's OpenLDAP slapd, started in a temporary directory with a
// generated configuration, a generated CA and server certificate, and an
// LDIF of numbered users in nested groups (teams in departments in
// all-staff, and a cycle), loaded offline with slapadd before the server
// starts; or a Samba Active Directory domain controller provisioned with
// the same users and groups (LaunchSamba).
//
// Each slapd serves ldaps:// on one port and ldap:// (with StartTLS
// offered, not required) on another, both on 127.0.0.1. Launch can start
// several independent servers holding the same data, for failover, and
// each of them can be stopped, started, paused and resumed.
//
// Account states are modelled both ways a directory does it: AD's
// attributes (userAccountControl, lockoutTime, pwdLastSet), which slapd
// stores but does not enforce, and OpenLDAP's ppolicy overlay, which
// locks an account after MaxFailures wrong passwords and refuses the
// binds of an account whose pwdAccountLockedTime is set.
//
// Without slapd (or slapadd, or ldapsearch) Launch returns an error
// wrapping ErrNotInstalled; the caller must Close what it started.
//
// Only commands, internal/bench (usher bench logon-storm --directory) and
// tests import this package; it takes no testing.TB, and it imports no
// LDAP library (it drives slapd, slapadd, ldapsearch and ldapmodify as
// processes). The helpers that skip a test without slapd and stop the
// directory when the test ends are internal/dirserver/dirservertest's,
// which only tests import.
package dirserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvDebug names the environment variable whose value, when set, is
// slapd's debug level (-d: "stats", "conns,trace", "-1"); Logs returns
// what slapd writes.
const EnvDebug = "USHER_DIRSERVER_DEBUG"

// Options say what Launch starts. The zero value is one server with 1,000
// users.
type Options struct {
	// Users is the number of numbered users (user0001...); 0 means 1,000.
	Users int
	// Servers is the number of independent servers with the same data; 0
	// means 1.
	Servers int
}

// Directory is what Launch or LaunchSamba started.
type Directory struct {
	// Servers are the servers, in the order a client should try them.
	Servers []*Server
	// CAPEM is the CA certificate (PEM) that every server's certificate
	// chains to.
	CAPEM []byte
	// BindDN and BindPassword are the service account's.
	BindDN, BindPassword string
	// UserPassword is every user's password.
	UserPassword string
	// Users is the number of numbered users.
	Users int

	root   string // the temporary directory holding every server's files
	unlock func() // releases the machine's Samba lock (StartSamba)
}

// ErrNotInstalled is Launch's error when slapd or one of its tools is
// missing.
var ErrNotInstalled = errors.New("dirserver: slapd or ldap-utils is not installed (Debian: apt-get install slapd ldap-utils)")

// Server is one running slapd.
type Server struct {
	// LDAPS is the ldaps:// URL, StartTLS the ldap:// URL (StartTLS offered).
	LDAPS, StartTLS string

	dir, conf, urls string
	adminPW         string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	logs *logBuffer
}

// logBuffer is slapd's output, written by exec's copying goroutine and
// read by Logs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tools are the programs the harness runs.
var tools = []string{"slapd", "slapadd", "ldapsearch", "ldapmodify"}

// Launch starts opts.Servers slapd servers with the same data, in a
// temporary directory, and returns once each accepts connections on both
// of its ports. It returns an error wrapping ErrNotInstalled when slapd
// or its tools are missing. The caller must Close the directory.
func Launch(opts Options) (*Directory, error) {
	if err := Installed(); err != nil {
		return nil, err
	}
	if opts.Users <= 0 {
		opts.Users = 1000
	}
	if opts.Servers <= 0 {
		opts.Servers = 1
	}
	ca, err := NewCA("usher dirserver CA")
	if err != nil {
		return nil, fmt.Errorf("dirserver: %w", err)
	}
	d := &Directory{
		CAPEM:        ca.PEM,
		BindDN:       ServiceDN,
		BindPassword: "svc-" + randomHex(8),
		UserPassword: "Passw0rd-" + randomHex(4),
		Users:        opts.Users,
	}
	var ldif bytes.Buffer
	if err := writeLDIF(&ldif, opts.Users, d.BindPassword, d.UserPassword); err != nil {
		return nil, fmt.Errorf("dirserver: ldif: %w", err)
	}
	if d.root, err = os.MkdirTemp("", "usher-dirserver-*"); err != nil {
		return nil, fmt.Errorf("dirserver: %w", err)
	}
	adminPW := "admin-" + randomHex(8)
	for i := range opts.Servers {
		s, err := newServer(filepath.Join(d.root, fmt.Sprintf("slapd%d", i)), ca, adminPW, ldif.Bytes())
		if err == nil {
			d.Servers = append(d.Servers, s)
			err = s.start()
		}
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("dirserver: server %d: %w", i, err)
		}
	}
	return d, nil
}

// Installed returns nil when slapd and its tools are installed, else an
// error wrapping ErrNotInstalled that names the one missing.
func Installed() error { return installed(tools) }

// installed returns nil when every one of tools is installed, else an
// error wrapping ErrNotInstalled that names the one missing.
func installed(tools []string) error {
	for _, tool := range tools {
		if _, err := lookPath(tool); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrNotInstalled, tool, err)
		}
	}
	return nil
}

// Close kills every server (SIGKILL) and removes their files. It returns
// the error of the removal, if any; a second Close does nothing.
func (d *Directory) Close() error {
	for _, s := range d.Servers {
		s.kill()
	}
	if d.unlock != nil {
		d.unlock()
		d.unlock = nil
	}
	if d.root == "" {
		return nil
	}
	err := os.RemoveAll(d.root)
	d.root = ""
	return err
}

func lookPath(tool string) (string, error) {
	if p, err := exec.LookPath(tool); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", tool) // slapd and slapadd, off a non-root PATH
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// newServer writes a server's configuration, certificates and database
// (slapadd) into dir, on two free ports.
func newServer(dir string, ca *CA, adminPW string, ldif []byte) (*Server, error) {
	if err := os.MkdirAll(filepath.Join(dir, "db"), 0o700); err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := ca.Issue()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	s := &Server{
		LDAPS:    fmt.Sprintf("ldaps://127.0.0.1:%d", ports[0]),
		StartTLS: fmt.Sprintf("ldap://127.0.0.1:%d", ports[1]),
		dir:      dir,
		conf:     filepath.Join(dir, "slapd.conf"),
		adminPW:  adminPW,
	}
	s.urls = s.LDAPS + "/ " + s.StartTLS + "/"
	files := map[string][]byte{
		"ca.pem":     ca.PEM,
		"server.pem": certPEM,
		"server.key": keyPEM,
		"ad.schema":  []byte(adSchema),
		"data.ldif":  ldif,
		"slapd.conf": []byte(config(dir, adminPW)),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	slapadd, _ := lookPath("slapadd")
	out, err := exec.Command(slapadd, "-q", "-f", s.conf, "-l", filepath.Join(dir, "data.ldif")).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("slapadd: %v\n%s", err, out)
	}
	return s, nil
}

// config returns slapd.conf for a server in dir. A test's directory
// lives as long as the test: its database is written without fsync
// (dbnosync).
func config(dir, adminPW string) string {
	return fmt.Sprintf(`include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include %[1]s/ad.schema
modulepath /usr/lib/ldap
moduleload back_mdb
moduleload ppolicy
pidfile %[1]s/slapd.pid
argsfile %[1]s/slapd.args
TLSCACertificateFile %[1]s/ca.pem
TLSCertificateFile %[1]s/server.pem
TLSCertificateKeyFile %[1]s/server.key
sizelimit 5000

database mdb
suffix "%[2]s"
rootdn "%[3]s"
rootpw %[4]s
directory %[1]s/db
maxsize 268435456
dbnosync
index objectClass eq
index uid,cn,sAMAccountName,userPrincipalName eq
index member eq
access to dn.base="" by * read
access to attrs=userPassword by anonymous auth by self write by * none
access to * by dn.exact="%[5]s" read by self read by * none
overlay ppolicy
ppolicy_default "%[6]s"
ppolicy_use_lockout

database monitor
access to * by dn.exact="%[3]s" read by * none
`, dir, BaseDN, AdminDN, adminPW, ServiceDN, PolicyDN)
}

// freePorts returns n ports that were free on 127.0.0.1 a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Start starts the server again after Stop, on the same ports.
func (s *Server) Start() error {
	if err := s.start(); err != nil {
		return fmt.Errorf("dirserver: %w", err)
	}
	return nil
}

// Stop stops the server (SIGTERM) and waits for it to exit; its clients'
// connections close.
func (s *Server) Stop() error { return s.stop(syscall.SIGTERM) }

// Kill kills the server (SIGKILL) and waits for it to exit.
func (s *Server) Kill() error { return s.stop(syscall.SIGKILL) }

// Pause stops the server's process (SIGSTOP) without closing anything: its
// ports accept connections that nothing answers, as a hung server does.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("dirserver: %s is not running", s.LDAPS)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("dirserver: signal %s: %w", s.LDAPS, err)
	}
	return nil
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("%s is already running", s.LDAPS)
	}
	slapd, err := lookPath("slapd")
	if err != nil {
		return err
	}
	var lastErr error
	for range 50 { // the port may linger a moment after a stop
		s.logs = new(logBuffer)
		level := os.Getenv(EnvDebug)
		if level == "" {
			level = "0"
		}
		cmd := exec.Command(slapd, "-f", s.conf, "-h", s.urls, "-d", level)
		cmd.Stdout, cmd.Stderr = s.logs, s.logs
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start slapd: %w", err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		if lastErr = waitReady(done, s.LDAPS, s.StartTLS); lastErr == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		cmd.Process.Kill()
		<-done
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("slapd on %s did not start: %v\n%s", s.urls, lastErr, s.logs)
}

// waitReady waits until both URLs accept connections, or slapd exits.
func waitReady(done <-chan struct{}, urls ...string) error {
	deadline := time.Now().Add(10 * time.Second)
	for _, u := range urls {
		addr := u[strings.Index(u, "//")+2:]
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-done:
				return errors.New("slapd exited")
			default:
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %w", addr, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

func (s *Server) stop(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	s.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot act on SIGTERM
	s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd, s.done = nil, nil
	return nil
}

func (s *Server) kill() { s.stop(syscall.SIGKILL) }

// PID returns the process ID of the server's slapd, 0 when it is not
// running: what a bench reads the server's CPU time by, from /proc.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Logs returns what slapd wrote since it last started.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		return ""
	}
	return s.logs.String()
}

// Connections returns the number of connections the server has open now
// and the number it has accepted since it started, from its cn=Monitor,
// each counting the one this call opens to ask.
func (s *Server) Connections(ctx context.Context) (current, total int, err error) {
	out, err := s.ldap(ctx, "ldapsearch", nil, "-LLL", "-b", "cn=Connections,cn=Monitor", "-s", "one",
		"(|(cn=Current)(cn=Total))", "monitorCounter")
	if err != nil {
		return 0, 0, err
	}
	var cn string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "dn: "):
			cn = strings.TrimSuffix(strings.TrimPrefix(line, "dn: cn="), ",cn=Connections,cn=Monitor")
		case strings.HasPrefix(line, "monitorCounter: "):
			n, err := strconv.Atoi(strings.TrimPrefix(line, "monitorCounter: "))
			if err != nil {
				return 0, 0, fmt.Errorf("dirserver: monitor: %q", line)
			}
			switch cn {
			case "Current":
				current = n
			case "Total":
				total = n
			}
		}
	}
	if total == 0 {
		return 0, 0, fmt.Errorf("dirserver: no connection counters in cn=Monitor:\n%s", out)
	}
	return current, total, nil
}

// Modify applies an LDIF of changes (ldapmodify's input) as the root DN.
func (s *Server) Modify(ctx context.Context, ldif string) error {
	_, err := s.ldap(ctx, "ldapmodify", strings.NewReader(ldif))
	return err
}

// ldap runs an ldap-utils tool as the root DN over the plain port, for at
// most 10 seconds, and returns its output.
func (s *Server) ldap(ctx context.Context, tool string, stdin *strings.Reader, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	path, err := lookPath(tool)
	if err != nil {
		return "", fmt.Errorf("dirserver: %w", err)
	}
	args = append([]string{"-x", "-H", s.StartTLS, "-D", AdminDN, "-w", s.adminPW}, args...)
	cmd := exec.CommandContext(ctx, path, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.Env = append(os.Environ(), "LDAPNOINIT=1") // the plain port: no TLS, no ldap.conf
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("dirserver: %s on %s: %v\n%s", tool, s.StartTLS, err, out)
	}
	return string(out), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
