package site

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// KindDirectory is the change of the site's directory settings (Name is
// ""), in the configuration log and the change history.
const KindDirectory Kind = "directory"

// SecretDirectoryBindPassword is the name under which a store keeps the
// directory's bind password among the site secrets. It is written only
// through Tx.SetDirectory: Tx.SetSecret refuses the name.
const SecretDirectoryBindPassword = "directory-bind-password"

// The attributes that may hold users' logon names (Directory.UserAttribute).
const (
	AttrSAMAccountName    = "sAMAccountName"
	AttrUserPrincipalName = "userPrincipalName"
	AttrUID               = "uid"
)

// Bounds of the Directory's tuning fields.
const (
	MaxDirectoryTimeoutSeconds  = 300
	MaxDirectoryPoolSize        = 256
	MaxDirectoryGroupCacheTTL   = 24 * 60 * 60 // seconds
	MaxDirectoryNestingDepth    = 64
	MaxNetBIOSDomainLen         = 15
	maxDirectoryServers         = 16
	maxDirectoryBaseDNs         = 16
	maxDirectoryDNLen           = 1024
	maxDirectoryCABundleBytes   = 1 << 20
	maxDirectoryBindPasswordLen = 1024
)

// Directory says where the site's directory users and groups come from:
// an LDAP server or Active Directory, beside the site's local users. There
// is one per site, part of the configuration (it moves the configuration
// version and is in the change history as KindDirectory).
//
// Servers are URLs tried in order: ldaps://host[:636] (TLS from the
// start) or ldap://host[:389], on which StartTLS is required. A server is
// used without TLS only when AllowPlain is set, and then every ldap://
// server is: there is no other spelling of a plain server (an
// ldap+plain:// scheme is refused like any other).
//
// The bind password is a secret: JSON never shows it (the admin API
// answers bind_password_set instead), YAML only when an export asks for
// secrets, the change history only that it changed, and String and
// LogValue never. Stores keep it among the site secrets, as
// SecretDirectoryBindPassword.
//
// Zero tuning fields (timeouts, pool size, cache TTL, nesting depth)
// take the directory client's defaults; an empty UserAttribute is
// sAMAccountName; empty GroupBaseDNs are the UserBaseDNs.
type Directory struct {
	// Enabled makes the site authenticate directory users. A disabled
	// directory keeps its settings; only an enabled one must be complete.
	Enabled    bool     `json:"enabled" yaml:"enabled"`
	Servers    []string `json:"servers,omitempty" yaml:"servers,omitempty"`
	AllowPlain bool     `json:"allow_plain,omitempty" yaml:"allow_plain,omitempty"`
	// CABundle is the PEM text of the CAs that the servers' certificates
	// must chain to; empty means the system's roots.
	CABundle string `json:"ca_bundle,omitempty" yaml:"ca_bundle,omitempty"`
	// BindDN and BindPassword are the service account's, which finds
	// users and reads their groups.
	BindDN       string   `json:"bind_dn,omitempty" yaml:"bind_dn,omitempty"`
	BindPassword string   `json:"-" yaml:"bind_password,omitempty"`
	UserBaseDNs  []string `json:"user_base_dns,omitempty" yaml:"user_base_dns,omitempty"`
	GroupBaseDNs []string `json:"group_base_dns,omitempty" yaml:"group_base_dns,omitempty"`
	// UserAttribute holds the logon name: sAMAccountName, userPrincipalName
	// or uid.
	UserAttribute string `json:"user_attribute,omitempty" yaml:"user_attribute,omitempty"`
	// NetBIOSDomain is what DOMAIN\user and the NFuse Domain element name
	// for a directory user; empty refuses that form.
	NetBIOSDomain string `json:"netbios_domain,omitempty" yaml:"netbios_domain,omitempty"`
	// UPNSuffix is the suffix of user@suffix.
	UPNSuffix            string `json:"upn_suffix,omitempty" yaml:"upn_suffix,omitempty"`
	DialTimeoutSeconds   int    `json:"dial_timeout_seconds,omitempty" yaml:"dial_timeout_seconds,omitempty"`
	TimeoutSeconds       int    `json:"timeout_seconds,omitempty" yaml:"timeout_seconds,omitempty"`
	PoolSize             int    `json:"pool_size,omitempty" yaml:"pool_size,omitempty"`
	GroupCacheTTLSeconds int    `json:"group_cache_ttl_seconds,omitempty" yaml:"group_cache_ttl_seconds,omitempty"`
	MaxNestingDepth      int    `json:"max_nesting_depth,omitempty" yaml:"max_nesting_depth,omitempty"`
	// AdminGroups are directory groups, by name (cn) or DN, whose members
	// (directly or through nesting) are the site's admins on the admin
	// API, beside its own admin accounts.
	AdminGroups []string `json:"admin_groups,omitempty" yaml:"admin_groups,omitempty"`
}

// IsZero reports whether d is the directory of a new site: nothing set.
func (d Directory) IsZero() bool { return d.Equal(Directory{}) }

// Equal reports whether d and o are the same, bind password included.
func (d Directory) Equal(o Directory) bool {
	return d.Enabled == o.Enabled && d.AllowPlain == o.AllowPlain && d.CABundle == o.CABundle &&
		d.BindDN == o.BindDN && d.BindPassword == o.BindPassword && d.UserAttribute == o.UserAttribute &&
		d.NetBIOSDomain == o.NetBIOSDomain && d.UPNSuffix == o.UPNSuffix &&
		d.DialTimeoutSeconds == o.DialTimeoutSeconds && d.TimeoutSeconds == o.TimeoutSeconds &&
		d.PoolSize == o.PoolSize && d.GroupCacheTTLSeconds == o.GroupCacheTTLSeconds &&
		d.MaxNestingDepth == o.MaxNestingDepth &&
		equalList(d.Servers, o.Servers) && equalList(d.UserBaseDNs, o.UserBaseDNs) && equalList(d.GroupBaseDNs, o.GroupBaseDNs) &&
		equalList(d.AdminGroups, o.AdminGroups)
}

// DialTimeout, Timeout and GroupCacheTTL are the tuning fields as
// durations; zero means the client's default.
func (d Directory) DialTimeout() time.Duration {
	return time.Duration(d.DialTimeoutSeconds) * time.Second
}
func (d Directory) Timeout() time.Duration { return time.Duration(d.TimeoutSeconds) * time.Second }
func (d Directory) GroupCacheTTL() time.Duration {
	return time.Duration(d.GroupCacheTTLSeconds) * time.Second
}

// redacted is d without its password, for String and LogValue.
type redactedDirectory Directory

// String shows d without its bind password (only whether one is set),
// so that %v and %+v never print it.
func (d Directory) String() string {
	r := redactedDirectory(d)
	r.BindPassword = ""
	return fmt.Sprintf("%+v (bind password set: %t)", r, d.BindPassword != "")
}

// GoString is String, for %#v.
func (d Directory) GoString() string { return d.String() }

// LogValue logs d without its bind password.
func (d Directory) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Bool("enabled", d.Enabled), slog.Any("servers", d.Servers), slog.Bool("allow_plain", d.AllowPlain),
		slog.String("bind_dn", d.BindDN), slog.Bool("bind_password_set", d.BindPassword != ""),
		slog.Any("user_base_dns", d.UserBaseDNs), slog.Any("group_base_dns", d.GroupBaseDNs),
		slog.String("user_attribute", d.UserAttribute), slog.String("netbios_domain", d.NetBIOSDomain),
		slog.String("upn_suffix", d.UPNSuffix))
}

// normalize puts d in canonical form: empty lists nil. The order of
// servers and base DNs is kept: servers are tried in it.
func (d *Directory) normalize() {
	nilIfEmpty(&d.Servers)
	nilIfEmpty(&d.UserBaseDNs)
	nilIfEmpty(&d.GroupBaseDNs)
}

// directoryError is an EInvalid error about the directory's field.
func directoryError(field, format string, args ...any) *Error {
	return Errorf(EInvalid, "directory: "+format, args...).about(KindDirectory, "").At(field)
}

// Validate checks the directory's fields. Whatever is set must be well
// formed, enabled or not; an enabled directory must name servers, a bind
// DN and a user base DN. It does not require a bind password, which a
// configuration may leave out to keep the current one; the directory
// client refuses to start without one.
func (d Directory) Validate() error {
	if d.Enabled {
		switch {
		case len(d.Servers) == 0:
			return directoryError("servers", "an enabled directory needs at least one server")
		case d.BindDN == "":
			return directoryError("bind_dn", "an enabled directory needs the service account's bind DN")
		case len(d.UserBaseDNs) == 0:
			return directoryError("user_base_dns", "an enabled directory needs at least one user base DN")
		}
	}
	if len(d.Servers) > maxDirectoryServers {
		return directoryError("servers", "%d servers: at most %d", len(d.Servers), maxDirectoryServers)
	}
	for i, s := range d.Servers {
		if err := validateServerURL(s); err != nil {
			return directoryError(fmt.Sprintf("servers.%d", i), "server %s: %s", shownURL(s), err)
		}
		if slices.Index(d.Servers, s) != i {
			return directoryError(fmt.Sprintf("servers.%d", i), "server %s is listed twice", shownURL(s))
		}
	}
	if d.CABundle != "" {
		if err := validateCABundle(d.CABundle); err != nil {
			return directoryError("ca_bundle", "CA bundle: %s", err)
		}
	}
	if d.BindDN != "" {
		if err := validateDN(d.BindDN); err != nil {
			return directoryError("bind_dn", "bind DN %q: %s", d.BindDN, err)
		}
	}
	if len(d.BindPassword) > maxDirectoryBindPasswordLen || !utf8.ValidString(d.BindPassword) || strings.ContainsRune(d.BindPassword, 0) {
		// Never quote the password itself.
		return directoryError("bind_password", "the bind password is longer than %d bytes, not UTF-8 or holds a NUL", maxDirectoryBindPasswordLen)
	}
	for _, l := range []struct {
		field string
		dns   []string
	}{{"user_base_dns", d.UserBaseDNs}, {"group_base_dns", d.GroupBaseDNs}} {
		if len(l.dns) > maxDirectoryBaseDNs {
			return directoryError(l.field, "%d base DNs: at most %d", len(l.dns), maxDirectoryBaseDNs)
		}
		for i, dn := range l.dns {
			if err := validateDN(dn); err != nil {
				return directoryError(fmt.Sprintf("%s.%d", l.field, i), "base DN %q: %s", dn, err)
			}
		}
	}
	if len(d.AdminGroups) > maxDirectoryBaseDNs {
		return directoryError("admin_groups", "%d admin groups: at most %d", len(d.AdminGroups), maxDirectoryBaseDNs)
	}
	for i, g := range d.AdminGroups {
		if strings.Contains(g, "=") {
			if err := validateDN(g); err != nil {
				return directoryError(fmt.Sprintf("admin_groups.%d", i), "admin group %q: %s", g, err)
			}
		} else if strings.TrimSpace(g) == "" || len(g) > maxDirectoryDNLen || !utf8.ValidString(g) {
			return directoryError(fmt.Sprintf("admin_groups.%d", i), "admin group %q is empty, too long or not UTF-8", g)
		}
	}
	switch d.UserAttribute {
	case "", AttrSAMAccountName, AttrUserPrincipalName, AttrUID:
	default:
		return directoryError("user_attribute", "user attribute %q is not one of %s, %s, %s",
			d.UserAttribute, AttrSAMAccountName, AttrUserPrincipalName, AttrUID)
	}
	if err := ValidateNetBIOSDomain(d.NetBIOSDomain); d.NetBIOSDomain != "" && err != nil {
		return directoryError("netbios_domain", "%s", ErrorMessage(err))
	}
	if d.UPNSuffix != "" {
		if err := validateUPNSuffix(d.UPNSuffix); err != nil {
			return directoryError("upn_suffix", "UPN suffix %q: %s", d.UPNSuffix, err)
		}
	}
	for _, n := range []struct {
		field    string
		v, limit int
	}{
		{"dial_timeout_seconds", d.DialTimeoutSeconds, MaxDirectoryTimeoutSeconds},
		{"timeout_seconds", d.TimeoutSeconds, MaxDirectoryTimeoutSeconds},
		{"pool_size", d.PoolSize, MaxDirectoryPoolSize},
		{"group_cache_ttl_seconds", d.GroupCacheTTLSeconds, MaxDirectoryGroupCacheTTL},
		{"max_nesting_depth", d.MaxNestingDepth, MaxDirectoryNestingDepth},
	} {
		if n.v < 0 || n.v > n.limit {
			return directoryError(n.field, "%s %d is not between 0 (the default) and %d", n.field, n.v, n.limit)
		}
	}
	return nil
}

// validateServerURL checks an ldaps:// or ldap:// URL naming a host and
// an optional port, and nothing more.
func validateServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a URL")
	}
	switch u.Scheme {
	case "ldaps", "ldap":
	default:
		return fmt.Errorf("scheme %q: want ldaps:// (TLS) or ldap:// (StartTLS; plain only with allow_plain)", u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("no host")
	}
	if u.User != nil || u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return fmt.Errorf("want %s://host[:port], nothing more", u.Scheme)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %s is not between 1 and 65535", p)
		}
	}
	return nil
}

// shownURL is a server URL as an error may quote it: without the password
// of any user information it holds, and not at all when it does not parse
// (what it holds cannot be told apart).
func shownURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(not a URL)"
	}
	return strconv.Quote(u.Redacted())
}

// validateCABundle checks that b is PEM text of certificates only, at
// least one, each of which parses.
func validateCABundle(b string) error {
	if len(b) > maxDirectoryCABundleBytes {
		return fmt.Errorf("longer than %d bytes", maxDirectoryCABundleBytes)
	}
	rest := []byte(b)
	n := 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		n++
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("block %d is a %s, not a CERTIFICATE", n, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("certificate %d does not parse: %v", n, err)
		}
	}
	if n == 0 {
		return fmt.Errorf("no PEM certificate in it")
	}
	if strings.TrimSpace(string(rest)) != "" {
		return fmt.Errorf("text after certificate %d is not PEM", n)
	}
	return nil
}

// ValidateNetBIOSDomain checks a NetBIOS domain name: 1 to 15
// characters, none of \ / : * ? " < > | @, no space nor control
// character, not starting with a dot.
func ValidateNetBIOSDomain(name string) error {
	switch {
	case name == "":
		return Errorf(EInvalid, "NetBIOS domain name is empty")
	case !utf8.ValidString(name):
		return Errorf(EInvalid, "NetBIOS domain name %q is not valid UTF-8", name)
	case utf8.RuneCountInString(name) > MaxNetBIOSDomainLen:
		return Errorf(EInvalid, "NetBIOS domain name %q is longer than %d characters", name, MaxNetBIOSDomainLen)
	case strings.ContainsAny(name, `\/:*?"<>|@ `):
		return Errorf(EInvalid, `NetBIOS domain name %q holds one of \ / : * ? " < > | @ or a space`, name)
	case strings.HasPrefix(name, "."):
		return Errorf(EInvalid, "NetBIOS domain name %q starts with a dot", name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return Errorf(EInvalid, "NetBIOS domain name %q holds a control character", name)
		}
	}
	return nil
}

// validateUPNSuffix checks a DNS-like suffix: letters, digits, dots and
// hyphens, no empty label.
func validateUPNSuffix(s string) error {
	if len(s) > 255 {
		return fmt.Errorf("longer than 255 characters")
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" {
			return fmt.Errorf("has an empty label")
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return fmt.Errorf("holds %q: only letters, digits, dots and hyphens may appear", r)
			}
		}
	}
	return nil
}

// validateDN checks the syntax of a distinguished name (RFC 4514) as far
// as the domain needs: one or more RDNs separated by unescaped commas,
// each one or more attribute=value pairs joined by unescaped pluses, an
// attribute being a name or a dotted OID; values may escape characters
// with a backslash (\, or \2C).
func validateDN(dn string) error {
	switch {
	case strings.TrimSpace(dn) == "":
		return fmt.Errorf("empty")
	case len(dn) > maxDirectoryDNLen:
		return fmt.Errorf("longer than %d bytes", maxDirectoryDNLen)
	case !utf8.ValidString(dn):
		return fmt.Errorf("not valid UTF-8")
	}
	for _, r := range dn {
		if unicode.IsControl(r) {
			return fmt.Errorf("holds a control character")
		}
	}
	var parts []string // attribute=value pairs
	start := 0
	for i := 0; i < len(dn); i++ {
		switch dn[i] {
		case '\\':
			if i+1 >= len(dn) {
				return fmt.Errorf("ends with a lone backslash")
			}
			i++
		case ',', '+':
			parts = append(parts, dn[start:i])
			start = i + 1
		}
	}
	parts = append(parts, dn[start:])
	for _, p := range parts {
		attr, value, ok := strings.Cut(p, "=")
		attr = strings.TrimSpace(attr)
		if !ok || attr == "" {
			return fmt.Errorf("%q is not attribute=value", strings.TrimSpace(p))
		}
		if !validAttrType(attr) {
			return fmt.Errorf("%q is not an attribute name", attr)
		}
		if strings.TrimSpace(value) == "" {
			return fmt.Errorf("attribute %s has no value", attr)
		}
	}
	return nil
}

// validAttrType reports whether s is an attribute name (a letter, then
// letters, digits and hyphens) or a dotted OID.
func validAttrType(s string) bool {
	if s[0] >= '0' && s[0] <= '9' {
		for _, n := range strings.Split(s, ".") {
			if n == "" || strings.Trim(n, "0123456789") != "" {
				return false
			}
		}
		return true
	}
	for i, r := range s {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || r == '-')) {
			return false
		}
	}
	return true
}

// EncodeDirectory checks d and returns what a store keeps of it: the
// settings as JSON, without the bind password, and the password, which
// the store keeps as the site secret SecretDirectoryBindPassword (none
// when empty).
func EncodeDirectory(d Directory) (settings, password []byte, err error) {
	if err := d.Validate(); err != nil {
		return nil, nil, err
	}
	settings, err = json.Marshal(d) // BindPassword is json:"-"
	if err != nil {
		return nil, nil, err
	}
	if d.BindPassword != "" {
		password = []byte(d.BindPassword)
	}
	return settings, password, nil
}

// DecodeDirectory returns the directory a store kept (EncodeDirectory).
func DecodeDirectory(settings, password []byte) (Directory, error) {
	var d Directory
	if err := json.Unmarshal(settings, &d); err != nil {
		return Directory{}, fmt.Errorf("stored settings: %w", err)
	}
	d.BindPassword = string(password)
	return d, nil
}

// KeepBindPassword returns the directory that desired makes of current
// with the bind password being write-only: desired itself when it gives a
// password (or current has none to keep), desired with current's password
// otherwise.
//
// The password is kept only for the endpoint it was entered for: the
// same bind DN, over the same transport (allow_plain, ca_bundle), to the
// servers it was entered for (desired may drop or reorder them, not add
// one). A desired directory that changes any of these without giving the
// password again gets an EInvalid error at field bind_password, and the
// directory returned then has no password: kept,
// the password would go to a server, a DN or a transport that whoever
// made the change chose, in clear if allow_plain was just set. A desired
// directory without servers keeps the password (it goes nowhere), and
// adding servers back asks for it again.
//
// Every path that writes the directory from a desired one goes through
// it: the admin API and usher apply both reach it through Diff.
func KeepBindPassword(current, desired Directory) (Directory, error) {
	if desired.BindPassword != "" || current.BindPassword == "" {
		return desired, nil
	}
	if field := endpointChange(current, desired); field != "" {
		return desired, directoryError("bind_password",
			"bind_password is required with a change of %s: the current one was entered for where the directory sends it now", field)
	}
	desired.BindPassword = current.BindPassword
	return desired, nil
}

// endpointChange returns the first field of desired that sends the bind
// password somewhere current does not, "" when none does.
func endpointChange(current, desired Directory) string {
	switch {
	case desired.BindDN != current.BindDN:
		return "bind_dn"
	case desired.AllowPlain != current.AllowPlain:
		return "allow_plain"
	case desired.CABundle != current.CABundle:
		return "ca_bundle"
	}
	for _, s := range desired.Servers {
		if !slices.Contains(current.Servers, s) {
			return "servers"
		}
	}
	return ""
}
