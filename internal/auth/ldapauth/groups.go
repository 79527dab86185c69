package ldapauth

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-ldap/ldap/v3"
)

// OIDs from the Active Directory technical specification ([MS-ADTS]).
const (
	// oidCapActiveDirectory is LDAP_CAP_ACTIVE_DIRECTORY_OID, in the root
	// DSE's supportedCapabilities of every AD DC (and Samba's).
	oidCapActiveDirectory = "1.2.840.113556.1.4.800"
	// oidInChain is LDAP_MATCHING_RULE_IN_CHAIN, which follows member
	// transitively (Windows Server 2003 SP2 and later).
	oidInChain = "1.2.840.113556.1.4.1941"
)

// groupChunk is the most DNs one breadth-first search asks about.
const groupChunk = 32

// groups returns the names and DNs of every group userDN belongs to,
// from the cache when it holds them.
func (d *Directory) groups(ctx context.Context, s *server, userDN string) ([]string, []string, error) {
	key := normDN(userDN)
	now := time.Now()
	if names, dns, ok := d.cache.get(key, now); ok {
		d.metrics.GroupCache(true)
		return names, dns, nil
	}
	d.metrics.GroupCache(false)
	var names, dns []string
	err := s.withConn(ctx, true, func(c *conn) error {
		inChain, err := d.useInChain(ctx, c)
		if err != nil {
			return err
		}
		if inChain {
			names, dns, err = d.groupsInChain(ctx, c, userDN)
		} else {
			names, dns, err = d.groupsBreadthFirst(ctx, c, userDN)
		}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("groups of %q: %w", userDN, err)
	}
	d.cache.put(key, names, dns, now)
	return slices.Clone(names), slices.Clone(dns), nil
}

// useInChain reports whether to ask c's server with the in-chain rule:
// as configured, or when its root DSE says it is Active Directory (read
// once per server).
func (d *Directory) useInChain(ctx context.Context, c *conn) (bool, error) {
	switch d.cfg.NestedGroups {
	case NestedInChain:
		return true, nil
	case NestedSearch:
		return false, nil
	}
	switch c.s.inChain.Load() {
	case 1:
		return true, nil
	case 2:
		return false, nil
	}
	dse, err := c.rootDSE(ctx)
	if err != nil {
		return false, err
	}
	ad := slices.Contains(dse.GetEqualFoldAttributeValues("supportedCapabilities"), oidCapActiveDirectory)
	if ad {
		c.s.inChain.Store(1)
	} else {
		c.s.inChain.Store(2)
	}
	return ad, nil
}

// rootDSE reads the server's root DSE.
func (c *conn) rootDSE(ctx context.Context) (*ldap.Entry, error) {
	req := ldap.NewSearchRequest("", ldap.ScopeBaseObject, ldap.NeverDerefAliases, 1, 0, false,
		"(objectClass=*)", []string{"supportedCapabilities", "supportedControl", "supportedLDAPVersion"}, nil)
	entries, err := c.search(ctx, OpRootDSE, req)
	if err != nil {
		return nil, fmt.Errorf("root dse: %w", err)
	}
	if len(entries) != 1 {
		return nil, fmt.Errorf("root dse: %d entries", len(entries))
	}
	return entries[0], nil
}

// groupsInChain asks for every group that has userDN as a member,
// transitively, in one search per group base.
func (d *Directory) groupsInChain(ctx context.Context, c *conn, userDN string) ([]string, []string, error) {
	filter := "(member:" + oidInChain + ":=" + ldap.EscapeFilter(userDN) + ")"
	var names, dns []string
	seen := map[string]bool{}
	for _, base := range d.cfg.GroupBaseDNs {
		entries, err := c.search(ctx, OpGroupSearch, groupRequest(base, filter))
		if err != nil {
			return nil, nil, err
		}
		for _, e := range entries {
			if k := normDN(e.DN); !seen[k] {
				seen[k] = true
				names, dns = append(names, groupName(e)), append(dns, e.DN)
			}
		}
	}
	return names, dns, nil
}

// groupsBreadthFirst finds userDN's groups level by level, up to
// MaxNestingDepth levels, asking about up to groupChunk DNs per search and
// never about a DN twice, so that a cycle of groups ends.
func (d *Directory) groupsBreadthFirst(ctx context.Context, c *conn, userDN string) ([]string, []string, error) {
	var names, dns []string
	seen := map[string]bool{normDN(userDN): true}
	frontier := []string{userDN}
	for depth := 1; len(frontier) > 0; depth++ {
		if depth > d.cfg.MaxNestingDepth {
			d.log.Debug("ldap group nesting deeper than the limit; the rest is ignored",
				"user", userDN, "max_depth", d.cfg.MaxNestingDepth, "not_followed", len(frontier))
			break
		}
		var next []string
		for chunk := range slices.Chunk(frontier, groupChunk) {
			var f strings.Builder
			f.WriteString("(|")
			for _, dn := range chunk {
				f.WriteString("(member=" + ldap.EscapeFilter(dn) + ")")
			}
			f.WriteString(")")
			for _, base := range d.cfg.GroupBaseDNs {
				entries, err := c.search(ctx, OpGroupSearch, groupRequest(base, f.String()))
				if err != nil {
					return nil, nil, err
				}
				for _, e := range entries {
					k := normDN(e.DN)
					if seen[k] {
						continue
					}
					seen[k] = true
					names, dns = append(names, groupName(e)), append(dns, e.DN)
					next = append(next, e.DN)
				}
			}
		}
		frontier = next
	}
	return names, dns, nil
}

func groupRequest(base, filter string) *ldap.SearchRequest {
	return ldap.NewSearchRequest(base, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases, 0, 0, false,
		filter, []string{"cn"}, nil)
}

// groupName is a group's cn, else the value of its DN's first RDN.
func groupName(e *ldap.Entry) string {
	if cn := e.GetEqualFoldAttributeValue("cn"); cn != "" {
		return cn
	}
	if dn, err := ldap.ParseDN(e.DN); err == nil && len(dn.RDNs) > 0 && len(dn.RDNs[0].Attributes) > 0 {
		return dn.RDNs[0].Attributes[0].Value
	}
	return e.DN
}

// normDN returns a key for dn that does not depend on case or spacing.
func normDN(dn string) string {
	p, err := ldap.ParseDN(dn)
	if err != nil {
		return strings.ToLower(dn)
	}
	var b strings.Builder
	for i, rdn := range p.RDNs {
		if i > 0 {
			b.WriteByte(',')
		}
		for j, a := range rdn.Attributes {
			if j > 0 {
				b.WriteByte('+')
			}
			b.WriteString(strings.ToLower(a.Type) + "=" + ldap.EscapeDN(strings.ToLower(a.Value)))
		}
	}
	return b.String()
}

// maxCachedUsers bounds the group cache: past it, expired entries are
// swept, and if that is not enough, the cache starts over.
const maxCachedUsers = 100_000

// groupCache holds users' groups for a TTL, by normalized user DN.
type groupCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]cachedGroups
}

type cachedGroups struct {
	names, dns []string
	expires    time.Time
}

func (c *groupCache) get(key string, now time.Time) (names, dns []string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.m[key]
	if !ok || !now.Before(g.expires) {
		return nil, nil, false
	}
	return slices.Clone(g.names), slices.Clone(g.dns), true
}

func (c *groupCache) put(key string, names, dns []string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCachedUsers {
		for k, g := range c.m {
			if !now.Before(g.expires) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxCachedUsers {
			clear(c.m)
		}
	}
	c.m[key] = cachedGroups{names: slices.Clone(names), dns: slices.Clone(dns), expires: now.Add(c.ttl)}
}
