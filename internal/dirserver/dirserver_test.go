package dirserver_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/dirserver"
	"github.com/usher-vdi/usher/internal/dirserver/dirservertest"
)

func TestStartLoadsUsersAndRestarts(t *testing.T) {
	begin := time.Now()
	d := dirservertest.Start(t, dirserver.Options{Servers: 2})
	t.Logf("two servers with %d users each started in %v", d.Users, time.Since(begin))
	for _, s := range d.Servers {
		if !strings.HasPrefix(s.LDAPS, "ldaps://127.0.0.1:") || !strings.HasPrefix(s.StartTLS, "ldap://127.0.0.1:") {
			t.Fatalf("urls %q %q", s.LDAPS, s.StartTLS)
		}
		_, total := dirservertest.Connections(t, s)
		if total < 1 {
			t.Fatalf("total connections %d", total)
		}
	}
	// Both ports speak TLS with the generated CA, and the service account
	// sees every user.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, d.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-H", d.Servers[0].LDAPS}, {"-ZZ", "-H", d.Servers[0].StartTLS}} {
		args = append(args, "-x", "-LLL", "-D", d.BindDN, "-w", d.BindPassword, "-b", dirserver.BaseDN,
			"(objectClass=inetOrgPerson)", "1.1")
		cmd := exec.Command("ldapsearch", args...)
		cmd.Env = append(os.Environ(), "LDAPTLS_CACERT="+ca)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ldapsearch %v: %v\n%s\n%s", args, err, out, d.Servers[0].Logs())
		}
		if got, want := strings.Count(string(out), "dn: "), d.Users+7; got != want {
			t.Errorf("ldapsearch %v: %d people, want %d", args[:2], got, want)
		}
	}

	s := d.Servers[0]
	dirservertest.Stop(t, s)
	begin = time.Now()
	dirservertest.StartServer(t, s)
	t.Logf("restarted in %v", time.Since(begin))
	if current, _ := dirservertest.Connections(t, s); current < 1 {
		t.Fatalf("current connections %d after restart", current)
	}
	dirservertest.Modify(t, s, "dn: "+dirserver.UserDN(dirserver.UserName(7))+"\nchangetype: modify\nreplace: displayName\ndisplayName: Seven\n")
}

// TestLaunchAndClose starts a server without a test, as the bench does:
// it runs as its PID says, and Close stops it and removes its files.
func TestLaunchAndClose(t *testing.T) {
	if err := dirserver.Installed(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	d, err := dirserver.Launch(dirserver.Options{Users: 10})
	if err != nil {
		t.Fatal(err)
	}
	s := d.Servers[0]
	pid := s.PID()
	if pid <= 0 {
		t.Fatalf("pid %d", pid)
	}
	exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	if err != nil || filepath.Base(exe) != "slapd" {
		t.Fatalf("process %d is %q (%v), not slapd", pid, exe, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.PID(); got != 0 {
		t.Errorf("pid %d after Close", got)
	}
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
		t.Errorf("slapd %d still runs after Close", pid)
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(s.LDAPS, "ldaps://"), time.Second); err == nil {
		c.Close()
		t.Errorf("%s still answers after Close", s.LDAPS)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
