package dirserver

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
)

// The directory's layout. Every name here is fixed, so that tests can
// name users and groups without asking the harness.
const (
	BaseDN       = "dc=usher,dc=test"
	PeopleDN     = "ou=people," + BaseDN
	GroupsDN     = "ou=groups," + BaseDN
	ContractorDN = "ou=contractors," + BaseDN
	// ServiceDN is the service account's DN, the account ldapauth finds
	// users with; it may read every entry and nothing else.
	ServiceDN = "cn=usher-svc,ou=services," + BaseDN
	// AdminDN is the root DN of the database, for the harness's own
	// ldapsearch and ldapmodify calls.
	AdminDN = "cn=admin," + BaseDN
	// PolicyDN is the ppolicy overlay's default policy: lock-out after
	// MaxFailures wrong passwords in a row, until an administrator
	// clears pwdAccountLockedTime.
	PolicyDN = "cn=default,ou=policies," + BaseDN

	// Domain and UPNSuffix are what the users' sAMAccountName and
	// userPrincipalName imply: DOMAIN\user0001 and user0001@usher.test.
	Domain    = "USHER"
	UPNSuffix = "usher.test"

	// MaxFailures is the ppolicy lock-out threshold.
	MaxFailures = 5

	// TeamSize users make a team group; DeptTeams teams make a department
	// group; every department is a member of AllStaff.
	TeamSize  = 20
	DeptTeams = 5
	AllStaff  = "all-staff"
)

// Accounts beside the numbered users, each with the users' password and
// in no group, each in one of the states ldapauth must refuse or tell
// apart.
const (
	// Disabled has AD's userAccountControl 514 (ACCOUNTDISABLE, 0x2, set).
	Disabled = "disabled"
	// LockedAD has a non-zero AD lockoutTime; slapd itself lets it bind.
	LockedAD = "locked-ad"
	// LockedPPolicy has pwdAccountLockedTime 000001010000Z: locked for good
	// by the ppolicy overlay, which refuses its binds.
	LockedPPolicy = "locked-ppolicy"
	// Expired has AD's pwdLastSet 0: the password must be changed at the
	// next logon.
	Expired = "expired"
	// Twin exists twice, under ou=people and ou=contractors.
	Twin = "twin"
	// Star's name holds a '*', to show that a name matches itself only.
	Star = "star*"
)

// Cycle groups: user0001 is a member of cycle-a; cycle-a is a member of
// cycle-b, cycle-b of cycle-c, and cycle-c of cycle-a.
var CycleGroups = []string{"cycle-a", "cycle-b", "cycle-c"}

// UserName returns the name (uid, sAMAccountName) of user i, 1-based.
func UserName(i int) string { return fmt.Sprintf("user%04d", i) }

// UserDN returns the DN of the account named name under ou=people.
func UserDN(name string) string { return "uid=" + name + "," + PeopleDN }

// GroupDN returns the DN of the group with common name cn.
func GroupDN(cn string) string { return "cn=" + cn + "," + GroupsDN }

// Team returns user i's team group; teams are numbered from 01.
func Team(i int) string { return fmt.Sprintf("team%02d", (i-1)/TeamSize+1) }

// Dept returns user i's department group.
func Dept(i int) string { return fmt.Sprintf("dept%02d", (i-1)/(TeamSize*DeptTeams)+1) }

// GroupsOf returns the names of every group user i belongs to, directly
// or through nesting: its team, department, all-staff and, for user 1,
// the three cycle groups.
func GroupsOf(i int) []string {
	g := []string{Team(i), Dept(i), AllStaff}
	if i == 1 {
		g = append(g, CycleGroups...)
	}
	return g
}

// adSchema declares the Active Directory attributes ldapauth reads, with
// AD's OIDs, and an auxiliary class (in OpenLDAP's experimental arc) that
// lets an inetOrgPerson hold them.
const adSchema = `
attributetype ( 1.2.840.113556.1.4.221 NAME 'sAMAccountName'
	EQUALITY caseIgnoreMatch SUBSTR caseIgnoreSubstringsMatch
	SYNTAX 1.3.6.1.4.1.1466.115.121.1.15 SINGLE-VALUE )
attributetype ( 1.2.840.113556.1.4.656 NAME 'userPrincipalName'
	EQUALITY caseIgnoreMatch SUBSTR caseIgnoreSubstringsMatch
	SYNTAX 1.3.6.1.4.1.1466.115.121.1.15 SINGLE-VALUE )
attributetype ( 1.2.840.113556.1.4.8 NAME 'userAccountControl'
	EQUALITY integerMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.27 SINGLE-VALUE )
attributetype ( 1.2.840.113556.1.4.662 NAME 'lockoutTime'
	EQUALITY integerMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.27 SINGLE-VALUE )
attributetype ( 1.2.840.113556.1.4.96 NAME 'pwdLastSet'
	EQUALITY integerMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.27 SINGLE-VALUE )
objectclass ( 1.3.6.1.4.1.4203.666.100.1 NAME 'usherADAccount' AUXILIARY
	MAY ( sAMAccountName $ userPrincipalName $ userAccountControl $ lockoutTime $ pwdLastSet ) )
`

// writeLDIF writes the whole directory: the organizational units, the
// service account, the password policy, users users, the special
// accounts and the groups.
func writeLDIF(w io.Writer, users int, servicePassword, userPassword string) error {
	b := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }

	p("dn: %s\nobjectClass: dcObject\nobjectClass: organization\ndc: usher\no: usher tests\n\n", BaseDN)
	for _, ou := range []string{"people", "contractors", "groups", "services", "policies"} {
		p("dn: ou=%s,%s\nobjectClass: organizationalUnit\nou: %s\n\n", ou, BaseDN, ou)
	}
	p("dn: %s\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\ncn: usher-svc\nuserPassword: %s\n\n",
		ServiceDN, ssha(servicePassword))
	p("dn: %s\nobjectClass: organizationalRole\nobjectClass: pwdPolicy\ncn: default\npwdAttribute: userPassword\n"+
		"pwdLockout: TRUE\npwdMaxFailure: %d\npwdLockoutDuration: 0\npwdFailureCountInterval: 0\n\n", PolicyDN, MaxFailures)

	hash := ssha(userPassword) // one salt for all: hashing is the slow part of slapadd's input
	user := func(base, name, display string, extra string) {
		p("dn: uid=%s,%s\nobjectClass: inetOrgPerson\nobjectClass: usherADAccount\nuid: %s\ncn: %s\nsn: %s\n"+
			"displayName: %s\nmail: %s@%s\nsAMAccountName: %s\nuserPrincipalName: %s@%s\nuserPassword: %s\n%s\n",
			name, base, name, display, name, display, name, UPNSuffix, name, name, UPNSuffix, hash, extra)
	}
	const (
		enabled  = "userAccountControl: 512\npwdLastSet: 133500000000000000\n"
		disabled = "userAccountControl: 514\npwdLastSet: 133500000000000000\n"
	)
	for i := 1; i <= users; i++ {
		user(PeopleDN, UserName(i), fmt.Sprintf("User %04d", i), enabled)
	}
	user(PeopleDN, Disabled, "Disabled User", disabled)
	user(PeopleDN, LockedAD, "Locked AD User", enabled+"lockoutTime: 133600000000000000\n")
	user(PeopleDN, LockedPPolicy, "Locked PPolicy User", enabled+"pwdAccountLockedTime: 000001010000Z\n")
	user(PeopleDN, Expired, "Expired User", "userAccountControl: 512\npwdLastSet: 0\n")
	user(PeopleDN, Twin, "Twin In People", enabled)
	user(ContractorDN, Twin, "Twin In Contractors", enabled)
	user(PeopleDN, Star, "Star User", enabled)

	group := func(cn string, members []string) {
		p("dn: %s\nobjectClass: groupOfNames\ncn: %s\n", GroupDN(cn), cn)
		for _, m := range members {
			p("member: %s\n", m)
		}
		p("\n")
	}
	teams := (users + TeamSize - 1) / TeamSize
	for t := 1; t <= teams; t++ {
		var members []string
		for i := (t-1)*TeamSize + 1; i <= t*TeamSize && i <= users; i++ {
			members = append(members, UserDN(UserName(i)))
		}
		group(fmt.Sprintf("team%02d", t), members)
	}
	depts := (teams + DeptTeams - 1) / DeptTeams
	var deptDNs []string
	for d := 1; d <= depts; d++ {
		var members []string
		for t := (d-1)*DeptTeams + 1; t <= d*DeptTeams && t <= teams; t++ {
			members = append(members, GroupDN(fmt.Sprintf("team%02d", t)))
		}
		cn := fmt.Sprintf("dept%02d", d)
		group(cn, members)
		deptDNs = append(deptDNs, GroupDN(cn))
	}
	group(AllStaff, deptDNs)
	group("cycle-a", []string{UserDN(UserName(1)), GroupDN("cycle-c")})
	group("cycle-b", []string{GroupDN("cycle-a")})
	group("cycle-c", []string{GroupDN("cycle-b")})
	return b.Flush()
}

// ssha returns password's {SSHA} userPassword value (a salted SHA-1, which
// slapd checks natively; test data only).
func ssha(password string) string {
	salt := make([]byte, 8)
	rand.Read(salt)
	sum := sha1.Sum(append([]byte(password), salt...))
	return "{SSHA}" + base64.StdEncoding.EncodeToString(append(sum[:], salt...))
}
