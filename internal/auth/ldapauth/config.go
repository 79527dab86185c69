package ldapauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-ldap/ldap/v3"
)

// Defaults for the Config fields left zero.
const (
	DefaultUserAttr         = "sAMAccountName"
	DefaultDialTimeout      = 5 * time.Second
	DefaultOpTimeout        = 5 * time.Second
	DefaultPoolSize         = 8
	DefaultGroupCacheTTL    = 5 * time.Minute
	DefaultMaxNestingDepth  = 16
	DefaultReconnectBackoff = time.Second

	// MaxReconnectBackoff caps the wait before a down server is tried
	// again, however often it failed.
	MaxReconnectBackoff = 30 * time.Second
	// MaxNameLength is the longest logon name, in bytes, that is looked
	// up; longer ones are refused as wrong credentials without a search.
	// (AD's userPrincipalName holds up to 1,024 characters, its
	// sAMAccountName 20.)
	MaxNameLength = 1024
)

// The user-name attributes Config.UserAttr may name.
var userAttrs = []string{"sAMAccountName", "userPrincipalName", "uid"}

// NestedGroups says how a user's nested groups are found.
type NestedGroups string

const (
	// NestedAuto uses AD's in-chain matching rule when the server's root
	// DSE lists the Active Directory capability, else NestedSearch.
	NestedAuto NestedGroups = ""
	// NestedInChain asks for every group at once with AD's
	// LDAP_MATCHING_RULE_IN_CHAIN (1.2.840.113556.1.4.1941).
	NestedInChain NestedGroups = "in-chain"
	// NestedSearch searches level by level over member, breadth first, up
	// to MaxNestingDepth levels, never visiting a group twice.
	NestedSearch NestedGroups = "search"
)

// Config says which directory to use and how. Zero durations and sizes
// take the Default... values.
type Config struct {
	// Servers are URLs, tried in order: ldaps://host[:636], or
	// ldap://host[:389], on which StartTLS is required unless AllowPlain.
	Servers []string
	// AllowPlain lets ldap:// servers be used without TLS: passwords then
	// cross the network in the clear.
	AllowPlain bool
	// CAPEM is the PEM bundle of the CAs that servers' certificates must
	// chain to; empty means the system's roots.
	CAPEM []byte
	// BindDN and BindPassword are the service account's, which finds
	// users and reads their groups. The password is a secret: it is never
	// logged nor put in an error.
	BindDN, BindPassword string
	// BaseDNs are where users are searched (subtree); GroupBaseDNs where
	// groups are, BaseDNs when empty.
	BaseDNs, GroupBaseDNs []string
	// UserAttr holds the logon name: sAMAccountName (the default),
	// userPrincipalName or uid.
	UserAttr string
	// UserFilter, when set, is ANDed with every user search, e.g.
	// (&(objectCategory=person)(objectClass=user)) on AD.
	UserFilter string
	// Domain is the NetBIOS domain name that DOMAIN\user must name (case
	// does not matter); empty refuses that form.
	Domain string
	// UPNSuffix is the suffix of user@suffix; empty refuses that form
	// unless UserAttr is userPrincipalName.
	UPNSuffix string
	// DialTimeout bounds a connection's set-up (TCP, TLS, StartTLS);
	// OpTimeout every operation on it.
	DialTimeout, OpTimeout time.Duration
	// PoolSize is the most connections kept open to each server, idle or
	// in use; logons beyond it wait for one.
	PoolSize int
	// GroupCacheTTL is how long a user's groups are kept; a logon within
	// it reads them from memory.
	GroupCacheTTL time.Duration
	// MaxNestingDepth is how many levels of groups NestedSearch follows,
	// the user's direct groups being level 1.
	MaxNestingDepth int
	// NestedGroups picks how nested groups are found.
	NestedGroups NestedGroups
	// ReconnectBackoff is the first wait before a server that failed is
	// tried again; it doubles on each failure up to MaxReconnectBackoff.
	ReconnectBackoff time.Duration
}

// withDefaults returns c with its zero fields set to the defaults.
func (c Config) withDefaults() Config {
	if c.UserAttr == "" {
		c.UserAttr = DefaultUserAttr
	}
	if len(c.GroupBaseDNs) == 0 {
		c.GroupBaseDNs = c.BaseDNs
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.DialTimeout, DefaultDialTimeout)
	def(&c.OpTimeout, DefaultOpTimeout)
	def(&c.GroupCacheTTL, DefaultGroupCacheTTL)
	def(&c.ReconnectBackoff, DefaultReconnectBackoff)
	if c.PoolSize <= 0 {
		c.PoolSize = DefaultPoolSize
	}
	if c.MaxNestingDepth <= 0 {
		c.MaxNestingDepth = DefaultMaxNestingDepth
	}
	return c
}

// endpoint is a validated server URL.
type endpoint struct {
	url      string // as configured, for messages and metrics
	addr     string // host:port
	implicit bool   // ldaps://
	startTLS bool   // ldap:// without AllowPlain
	tls      *tls.Config
}

// validate checks c (with defaults applied) and returns its servers.
func (c Config) validate() ([]endpoint, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Servers) == 0 {
		bad("no servers")
	}
	var roots *x509.CertPool
	if len(c.CAPEM) > 0 {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(c.CAPEM) {
			bad("CA bundle: no PEM certificate in it")
		}
	}
	var eps []endpoint
	for _, s := range c.Servers {
		u, err := url.Parse(s)
		if err != nil {
			bad("server %q: %v", s, err)
			continue
		}
		if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Host == "" {
			bad("server %q: want ldaps://host:port or ldap://host:port, nothing more", s)
			continue
		}
		ep := endpoint{url: s}
		port := u.Port()
		switch u.Scheme {
		case "ldaps":
			ep.implicit = true
			if port == "" {
				port = "636"
			}
		case "ldap":
			ep.startTLS = !c.AllowPlain
			if port == "" {
				port = "389"
			}
		default:
			bad("server %q: scheme %q, want ldaps or ldap", s, u.Scheme)
			continue
		}
		ep.addr = net.JoinHostPort(u.Hostname(), port)
		ep.tls = &tls.Config{ServerName: u.Hostname(), RootCAs: roots, MinVersion: tls.VersionTLS12}
		eps = append(eps, ep)
	}
	if c.BindDN == "" || c.BindPassword == "" {
		bad("the service account's bind DN and password are both required")
	} else if _, err := ldap.ParseDN(c.BindDN); err != nil {
		bad("bind DN %q: %v", c.BindDN, err)
	}
	if len(c.BaseDNs) == 0 {
		bad("no base DN")
	}
	for _, dn := range append(slices.Clone(c.BaseDNs), c.GroupBaseDNs...) {
		if _, err := ldap.ParseDN(dn); err != nil || dn == "" {
			bad("base DN %q: not a DN", dn)
		}
	}
	if !slices.Contains(userAttrs, c.UserAttr) {
		bad("user attribute %q: want one of %s", c.UserAttr, strings.Join(userAttrs, ", "))
	}
	if c.UserFilter != "" {
		if _, err := ldap.CompileFilter(c.UserFilter); err != nil {
			bad("user filter %q: %v", c.UserFilter, err)
		}
	}
	if strings.ContainsAny(c.Domain, `\@ `) {
		bad("NetBIOS domain %q: holds \\, @ or a space", c.Domain)
	}
	if strings.ContainsAny(c.UPNSuffix, `\@ `) {
		bad("UPN suffix %q: holds \\, @ or a space", c.UPNSuffix)
	}
	switch c.NestedGroups {
	case NestedAuto, NestedInChain, NestedSearch:
	default:
		bad("nested groups %q: want %q or %q (or empty, for either as the server allows)", c.NestedGroups, NestedInChain, NestedSearch)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ldap config: %w", err)
	}
	return eps, nil
}
