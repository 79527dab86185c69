package dirserver

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf16"
)

// Samba's Active Directory domain: what StartSamba provisions. Its base
// DN is BaseDN's, and its users and groups live under PeopleDN and
// GroupsDN, as slapd's do, but they are AD objects: users are
// CN=NAME,OU=people,... (SambaUserDN), the logon name is sAMAccountName,
// and there are no ppolicy, Twin or Star accounts (AD refuses a second
// sAMAccountName and a '*' in one).
const (
	SambaRealm = "USHER.TEST"
	// SambaAdminDN is the domain's Administrator, the service account
	// of a Samba directory.
	SambaAdminDN = "CN=Administrator,CN=Users," + BaseDN
	// sambaLockout is the domain's lock-out threshold: LockedAD is locked
	// by as many wrong binds.
	sambaLockout = 5
)

// SambaUserDN returns the DN of a user of a Samba directory.
func SambaUserDN(name string) string { return "CN=" + name + "," + PeopleDN }

// sambaTools are the programs StartSamba runs.
var sambaTools = []string{"samba", "samba-tool", "ldapadd", "ldapmodify", "ldapwhoami"}

// ErrPortsTaken is LaunchSamba's error when something listens on
// 127.0.0.1:389 or :636 already: Samba's LDAP ports cannot be moved.
var ErrPortsTaken = errors.New("dirserver: Samba's LDAP ports are taken")

// LaunchSamba provisions a Samba Active Directory domain controller in a
// temporary directory, with opts.Users users (default 100) in the same
// nested groups as slapd's (Options; Servers must be 0 or 1). The caller
// must Close the directory. Provisioning and loading take about ten
// seconds; one Samba at a time runs on the machine (a file lock), since
// its LDAP ports are 389 and 636. It returns an error wrapping ErrNotInstalled when Samba or
// the LDAP tools are missing, ErrPortsTaken when the ports are.
func LaunchSamba(opts Options) (*Directory, error) {
	if err := installed(sambaTools); err != nil {
		return nil, err
	}
	if opts.Users <= 0 {
		opts.Users = 100
	}
	if opts.Servers > 1 {
		return nil, errors.New("dirserver: one Samba server at most")
	}
	ca, err := NewCA("usher dirserver Samba CA")
	if err != nil {
		return nil, fmt.Errorf("dirserver: %w", err)
	}
	d := &Directory{
		CAPEM:        ca.PEM,
		BindDN:       SambaAdminDN,
		BindPassword: "Adm1n-" + randomHex(8),
		UserPassword: "Passw0rd-" + randomHex(4),
		Users:        opts.Users,
	}
	// One Samba at a time on this machine: tests of several packages
	// run at once, and all need the same ports. Close releases it.
	if d.unlock, err = lockSamba(); err != nil {
		return nil, err
	}
	for _, port := range []string{"389", "636"} {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
			c.Close()
			d.Close()
			return nil, fmt.Errorf("%w: 127.0.0.1:%s answers", ErrPortsTaken, port)
		}
	}
	if d.root, err = os.MkdirTemp("", "usher-sambatest-*"); err != nil {
		d.Close()
		return nil, fmt.Errorf("dirserver: %w", err)
	}
	if err := d.provisionSamba(ca, opts.Users); err != nil {
		d.Close()
		return nil, fmt.Errorf("dirserver: samba: %w", err)
	}
	return d, nil
}

// provisionSamba provisions the domain, starts samba (d's one server) and
// adds the users and groups.
func (d *Directory) provisionSamba(ca *CA, users int) error {
	certPEM, keyPEM, err := ca.Issue()
	if err != nil {
		return err
	}
	tlsDir := filepath.Join(d.root, "tls")
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"ca.pem": ca.PEM, "cert.pem": certPEM, "key.pem": keyPEM} {
		if err := os.WriteFile(filepath.Join(tlsDir, name), b, 0o600); err != nil {
			return err
		}
	}
	conf := filepath.Join(d.root, "etc", "smb.conf")
	// A test's domain lives as long as the test: its databases need no
	// fsync (TDB_NO_FSYNC, as Samba's own test suite runs).
	env := append(os.Environ(), "TDB_NO_FSYNC=1")
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		return cmd
	}
	if out, err := command("samba-tool", "domain", "provision", "--realm="+SambaRealm, "--domain="+Domain,
		"--server-role=dc", "--dns-backend=NONE", "--adminpass="+d.BindPassword, "--targetdir="+d.root,
		"--option=interfaces=lo", "--option=bind interfaces only=yes", "--option=tls enabled=yes",
		"--option=tls keyfile="+filepath.Join(tlsDir, "key.pem"), "--option=tls certfile="+filepath.Join(tlsDir, "cert.pem"),
		"--option=tls cafile="+filepath.Join(tlsDir, "ca.pem"), "--option=rpc server dynamic port range="+sambaRPCPorts()).CombinedOutput(); err != nil {
		return fmt.Errorf("provision: %v\n%s", err, out)
	}
	if out, err := command("samba-tool", "domain", "passwordsettings", "set", "-s", conf, "--complexity=off",
		"--min-pwd-age=0", fmt.Sprintf("--account-lockout-threshold=%d", sambaLockout)).CombinedOutput(); err != nil {
		return fmt.Errorf("password settings: %v\n%s", err, out)
	}
	s := &Server{LDAPS: "ldaps://127.0.0.1:636", StartTLS: "ldap://127.0.0.1:389", dir: d.root, logs: new(logBuffer)}
	cmd := command("samba", "-i", "-M", "single", "-s", conf)
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start samba: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	d.Servers = []*Server{s}
	if err := waitReady(done, s.LDAPS, s.StartTLS); err != nil {
		return fmt.Errorf("samba did not start: %v\n%s", err, s.logs)
	}
	tool := func(stdin, name string, args ...string) error {
		cmd := exec.Command(name, append([]string{"-x", "-H", s.LDAPS, "-D", d.BindDN, "-w", d.BindPassword}, args...)...)
		cmd.Env = append(os.Environ(), "LDAPTLS_CACERT="+filepath.Join(tlsDir, "ca.pem"))
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", name, err, out)
		}
		return nil
	}
	// The directory answers LDAP a moment after it listens.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := tool("", "ldapwhoami")
		if err == nil || !strings.Contains(err.Error(), "Can't contact") || time.Now().After(deadline) {
			break // ldapwhoami's extended operation is not Samba's; any answer will do
		}
		time.Sleep(100 * time.Millisecond)
	}
	var ldif bytes.Buffer
	writeSambaLDIF(&ldif, users, d.UserPassword)
	if err := tool(ldif.String(), "ldapadd"); err != nil {
		return err
	}
	// AD sets lockoutTime itself: LockedAD is locked by wrong binds.
	for range sambaLockout {
		cmd := exec.Command("ldapwhoami", "-x", "-H", s.LDAPS, "-D", SambaUserDN(LockedAD), "-w", "wrong-"+randomHex(4))
		cmd.Env = append(os.Environ(), "LDAPTLS_CACERT="+filepath.Join(tlsDir, "ca.pem"))
		cmd.Run() // refused, as meant
	}
	return nil
}

// sambaRPCPorts returns the range of ports Samba's DCE/RPC endpoints
// listen on: above the kernel's ephemeral ports, where no other test's
// connection or listener on port 0 can hold one. Samba's default,
// 49152-65535, overlaps Linux's ephemeral range (32768-60999), and Samba
// fails to start when one of its first few ports is some connection's
// local port. When the ephemeral range leaves no room above it, Samba's
// default stands.
func sambaRPCPorts() string {
	const n = 200 // Samba's AD DC takes a port per endpoint: about a dozen
	high := 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			fmt.Sscan(f[1], &high)
		}
	}
	if high+n > 65535 {
		return "49152-65535"
	}
	return fmt.Sprintf("%d-%d", high+1, high+n)
}

// writeSambaLDIF writes the AD objects of a Samba directory: the OUs,
// users user0001... (Team, Dept and AllStaff as slapd's, and the cycle
// groups for user 1), and the Disabled, LockedAD and Expired accounts.
func writeSambaLDIF(w *bytes.Buffer, users int, password string) {
	pw := unicodePwd(password)
	for _, ou := range []string{PeopleDN, GroupsDN} {
		fmt.Fprintf(w, "dn: %s\nobjectClass: organizationalUnit\n\n", ou)
	}
	user := func(name string, uac int) {
		fmt.Fprintf(w, "dn: %s\nobjectClass: user\nsAMAccountName: %s\nuserPrincipalName: %s@%s\ndisplayName: %s\nunicodePwd:: %s\nuserAccountControl: %d\n\n",
			SambaUserDN(name), name, name, UPNSuffix, "User "+name, pw, uac)
	}
	group := func(cn string, members []string) {
		fmt.Fprintf(w, "dn: %s\nobjectClass: group\nsAMAccountName: %s\n", GroupDN(cn), cn)
		for _, m := range members {
			fmt.Fprintf(w, "member: %s\n", m)
		}
		w.WriteString("\n")
	}
	for i := 1; i <= users; i++ {
		user(UserName(i), 512) // NORMAL_ACCOUNT
	}
	user(Disabled, 514) // and ACCOUNTDISABLE
	user(LockedAD, 512)
	user(Expired, 512)
	teams, depts := map[string][]string{}, map[string][]string{}
	var teamOrder, deptOrder []string
	for i := 1; i <= users; i++ {
		t, dp := Team(i), Dept(i)
		if teams[t] == nil {
			teamOrder = append(teamOrder, t)
			depts[dp] = append(depts[dp], GroupDN(t))
			if len(depts[dp]) == 1 {
				deptOrder = append(deptOrder, dp)
			}
		}
		teams[t] = append(teams[t], SambaUserDN(UserName(i)))
	}
	for _, t := range teamOrder {
		group(t, teams[t])
	}
	var all []string
	for _, dp := range deptOrder {
		group(dp, depts[dp])
		all = append(all, GroupDN(dp))
	}
	group(AllStaff, all)
	// cycle-a holds user 1 and cycle-c; cycle-b holds cycle-a; cycle-c
	// holds cycle-b: added in that order, then closed.
	group(CycleGroups[0], []string{SambaUserDN(UserName(1))})
	group(CycleGroups[1], []string{GroupDN(CycleGroups[0])})
	group(CycleGroups[2], []string{GroupDN(CycleGroups[1])})
	fmt.Fprintf(w, "dn: %s\nchangetype: modify\nadd: member\nmember: %s\n\n", GroupDN(CycleGroups[0]), GroupDN(CycleGroups[2]))
	// pwdLastSet 0: the password must change at the next logon.
	fmt.Fprintf(w, "dn: %s\nchangetype: modify\nreplace: pwdLastSet\npwdLastSet: 0\n\n", SambaUserDN(Expired))
}

// unicodePwd encodes a password as AD's unicodePwd attribute takes it:
// quoted, in UTF-16LE, base64 for LDIF.
func unicodePwd(password string) string {
	u := utf16.Encode([]rune(`"` + password + `"`))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		b[2*i], b[2*i+1] = byte(c), byte(c>>8)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// lockSamba takes the machine's Samba lock (a file lock in the temporary
// directory, under the name it had when this package was ldaptest, so
// that test binaries of older trees share it), waiting up to five minutes for another test's Samba to
// end, and returns what releases it.
func lockSamba() (func(), error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "usher-ldaptest-samba.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("dirserver: samba lock: %w", err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("dirserver: samba lock: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
