package broker

import (
	"strings"
	"testing"
)

// FuzzNormalizeDN checks NormalizeDN on any input (it takes the DNs a
// directory returns as well as the site's): it never panics, it is a
// fixed point that keeps every RDN; and a DN of two RDNs, its values escaped, normalises to
// the same DN in lower case without spaces around its separators, so
// that two such DNs compare equal exactly when their values are equal
// in lower case, whatever the values hold (a value's own leading and
// trailing spaces count).
func FuzzNormalizeDN(f *testing.F) {
	for _, s := range [][5]string{
		{"CN=Staff, OU=Groups", "staff", "groups", "Staff", "Groups"},
		{`CN=Smith\, John,OU=Staff`, "smith, john", "staff", "Smith", " John,OU=Staff"},
		{`cn=\`, `\`, "", "", ""},
		{"cn=\xff,ou=\u212a", "\xff", "\u212a", "\ufffd", "k"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], uint8(0x5a))
	}
	f.Fuzz(func(t *testing.T, dn, v1, v2, w1, w2 string, pad uint8) {
		n := NormalizeDN(dn)
		if again := NormalizeDN(n); again != n {
			t.Fatalf("NormalizeDN(%q) = %q, but NormalizeDN(%q) = %q", dn, n, n, again)
		}
		if got, want := separators(n), separators(dn); got != want {
			t.Fatalf("NormalizeDN(%q) = %q: %d RDNs, want %d", dn, n, got+1, want+1)
		}
		a := NormalizeDN(testDN(v1, v2, pad))
		if want := testDN(strings.ToLower(v1), strings.ToLower(v2), 0); a != want {
			t.Fatalf("NormalizeDN(%q) = %q, want %q", testDN(v1, v2, pad), a, want)
		}
		b := NormalizeDN(testDN(w1, w2, pad))
		// NormalizeDN lower-cases with strings.ToLower, whose equality is
		// not EqualFold's (simple case folding) for every rune.
		//lint:ignore SA6005 the property is ToLower's, not EqualFold's
		same := strings.ToLower(v1) == strings.ToLower(w1) && strings.ToLower(v2) == strings.ToLower(w2)
		if (a == b) != same {
			t.Fatalf("%q and %q normalise to %q and %q; their values are equal in lower case: %v", testDN(v1, v2, 0), testDN(w1, w2, pad), a, b, same)
		}
	})
}

// separators counts the commas of dn that no backslash escapes.
func separators(dn string) int {
	n, backslashes := 0, 0
	for i := 0; i < len(dn); i++ {
		switch {
		case dn[i] == '\\':
			backslashes++
			continue
		case dn[i] == ',' && backslashes%2 == 0:
			n++
		}
		backslashes = 0
	}
	return n
}

// testDN is the DN cn=v1,ou=v2, its values escaped as RFC 4514 has it
// (and their leading and trailing white space too), with pad's bits
// choosing spaces around its separators and the case of its attributes.
func testDN(v1, v2 string, pad uint8) string {
	bit := func(i uint) bool { return pad&(1<<i) != 0 }
	sp := func(i uint) string {
		if bit(i) {
			return " "
		}
		return ""
	}
	cn, ou := "cn", "ou"
	if bit(6) {
		cn = "CN"
	}
	if bit(7) {
		ou = "Ou"
	}
	return sp(0) + cn + sp(1) + "=" + sp(2) + escapeDNValue(v1) + sp(3) + "," + sp(4) + ou + sp(5) + "=" + sp(1) + escapeDNValue(v2) + sp(3)
}

// escapeDNValue escapes v for an RDN: a backslash before each special
// character, and before white space at either end.
func escapeDNValue(v string) string {
	const space = " \t\n\v\f\r"
	lead := len(v) - len(strings.TrimLeft(v, space))
	trail := len(strings.TrimRight(v, space))
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if strings.IndexByte(`,\=+<>#;"`, c) >= 0 || i < lead || i >= trail {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}

// FuzzLogonName checks LogonName on any input: it never panics; a name
// it returns is its own logon name (so that no layer reading it again
// takes it for someone else); and the forms of a user of the site's
// domain (bare, DOMAIN\user, user@domain, the domain beside it, in any
// case) are one name.
func FuzzLogonName(f *testing.F) {
	for _, s := range [][3]string{
		{"DEMO", "alice", ""},
		{"DEMO", `DEMO\alice`, ""},
		{"DEMO", "alice@demo", ""},
		{"DEMO", "alice", "USHER"},
		{"DEMO", `USHER\alice`, "usher"},
		{"DEMO", `DEMO\alice`, "HEALTHY"},
		{"", "", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, siteDomain, typed, domain string) {
		got := LogonName(siteDomain, typed, domain)
		if got != "" {
			if again := LogonName(siteDomain, got, ""); again != got {
				t.Fatalf("LogonName(%q, %q, %q) = %q, but LogonName(%q, %q, \"\") = %q", siteDomain, typed, domain, got, siteDomain, got, again)
			}
		}
		if got != "" && domain != "" && strings.Contains(typed, `\`) {
			d, _, _ := strings.Cut(got, `\`)
			if strings.EqualFold(domain, siteDomain) && strings.ContainsAny(got, `\@`) || !strings.EqualFold(domain, siteDomain) && !strings.EqualFold(d, domain) {
				t.Fatalf("LogonName(%q, %q, %q) = %q, not a user of the domain beside", siteDomain, typed, domain, got)
			}
		}
		user := typed
		if user == "" || strings.ContainsAny(user, `\@`) || strings.ContainsAny(siteDomain, `\@`) {
			return
		}
		for _, form := range [][2]string{
			{user, ""},
			{siteDomain + `\` + user, ""},
			{swapASCIICase(siteDomain) + `\` + user, siteDomain},
			{user + "@" + swapASCIICase(siteDomain), ""},
			{user, siteDomain},
		} {
			if got := LogonName(siteDomain, form[0], form[1]); got != user {
				t.Fatalf("LogonName(%q, %q, %q) = %q, want %q", siteDomain, form[0], form[1], got, user)
			}
		}
	})
}

// swapASCIICase swaps the case of s's ASCII letters, a change
// strings.EqualFold ignores in any string.
func swapASCIICase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
			b[i] = c ^ 0x20
		}
	}
	return string(b)
}
