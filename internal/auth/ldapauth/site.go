package ldapauth

import "github.com/usher-vdi/usher/internal/site"

// ConfigFrom returns the Config of a site's directory settings; zero
// fields take the defaults, as in Config.
func ConfigFrom(d site.Directory) Config {
	c := Config{
		Servers:         d.Servers,
		AllowPlain:      d.AllowPlain,
		BindDN:          d.BindDN,
		BindPassword:    d.BindPassword,
		BaseDNs:         d.UserBaseDNs,
		GroupBaseDNs:    d.GroupBaseDNs,
		UserAttr:        d.UserAttribute,
		Domain:          d.NetBIOSDomain,
		UPNSuffix:       d.UPNSuffix,
		DialTimeout:     d.DialTimeout(),
		OpTimeout:       d.Timeout(),
		PoolSize:        d.PoolSize,
		GroupCacheTTL:   d.GroupCacheTTL(),
		MaxNestingDepth: d.MaxNestingDepth,
	}
	if d.CABundle != "" {
		c.CAPEM = []byte(d.CABundle)
	}
	return c
}
