package nfuse

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/ctx1"
	"github.com/usher-vdi/usher/internal/site"
)

// errNoCredentials is a request without credentials, or with only
// AnonymousUser: failed-credentials, except for a RequestAppData when the
// site lists applications anonymously.
var errNoCredentials = fmt.Errorf("no credentials: %w", broker.ErrBadCredentials)

// authenticate returns the user the credentials name. A password may be
// cleartext or ctx1; the user name "user", "DOMAIN\user" or "user@domain",
// with or without a Domain element: the site's own domain names the
// site's users (and its directory's), any other the directory's only
// (broker.LogonName).
// ID-only credentials are honoured only when the site trusts XML requests.
// Failures are throttled per source, the connection's address (never one
// the request names). Errors: errNoCredentials, broker.ErrBadCredentials
// (also for a password that is not valid ctx1, and for a locked-out
// account), broker.ErrAccountDisabled, a broker.ThrottledError, and for
// a directory's users broker.ErrDirectoryLocked, broker.ErrPasswordExpired
// and broker.ErrDirectoryUnavailable.
func (h *Handler) authenticate(ctx context.Context, snap *broker.Snapshot, c *Credentials, source string) (*site.User, error) {
	switch {
	case c == nil || (c.UserName == "" && len(c.IDs) == 0):
		return nil, errNoCredentials
	case c.UserName == "":
		return h.trusted(ctx, snap, c.IDs)
	}
	name := broker.LogonName(snap.Settings.Domain, c.UserName, c.Domain)
	password, err := c.Password.decode()
	if err != nil || name == "" || password == "" {
		return nil, broker.ErrBadCredentials
	}
	return h.broker.Authenticate(ctx, name, password, source)
}

// remoteHost is the address of the connection that sent the request.
func remoteHost(x *exchange) string {
	host, _, err := net.SplitHostPort(x.r.RemoteAddr)
	if err != nil {
		return x.r.RemoteAddr
	}
	return host
}

// decode returns the password in clear.
func (p Password) decode() (string, error) {
	switch p.Encoding {
	case "", "cleartext":
		return p.Value, nil
	case "ctx1":
		return ctx1.Decode(p.Value)
	}
	return "", fmt.Errorf("unknown password encoding %q", p.Encoding)
}

// trusted resolves ID-only credentials, which a trusted server (a
// StoreFront that authenticated the user itself) sends. SAM and UPN
// identities name the user (see broker.LogonName); a SID must be the one
// usher gives a site user (see userSID), since usher cannot look users up
// by SID alone. All identities must agree. A directory's user is taken
// as named, whatever SID comes with the name: usher does not read the
// directory's SIDs.
func (h *Handler) trusted(ctx context.Context, snap *broker.Snapshot, ids []ID) (*site.User, error) {
	if !snap.Settings.TrustXMLRequests {
		return nil, broker.ErrBadCredentials
	}
	var name string
	for _, id := range ids {
		if id.Type != "SAM" && id.Type != "UPN" {
			continue
		}
		n := broker.LogonName(snap.Settings.Domain, id.Value, "")
		if n == "" || (name != "" && !strings.EqualFold(n, name)) {
			return nil, broker.ErrBadCredentials
		}
		name = n
	}
	if name == "" {
		return nil, broker.ErrBadCredentials
	}
	u, ok := snap.User(name)
	if !ok {
		return h.broker.User(ctx, name)
	}
	for _, id := range ids {
		if id.Type == "SID" && !strings.EqualFold(id.Value, userSID(snap.Settings.Domain, u.Name)) {
			return nil, broker.ErrBadCredentials
		}
	}
	if u.Disabled {
		return nil, broker.ErrAccountDisabled
	}
	return u, nil
}

// userSID makes up a Windows security identifier for a local user, which
// has none: S-1-5-21-A-B-C-RID, the domain part and the RID derived from
// hashes of the domain and of the user name. It is stable across restarts
// and brokers, but it is no real SID and names no Windows account.
func userSID(domain, user string) string {
	d := sha256.Sum256([]byte("usher domain\x00" + strings.ToUpper(domain)))
	u := sha256.Sum256([]byte("usher user\x00" + strings.ToUpper(domain) + "\x00" + user))
	b := []byte("S-1-5-21")
	for i := range 3 {
		b = append(b, '-')
		b = strconv.AppendUint(b, uint64(binary.BigEndian.Uint32(d[4*i:])), 10)
	}
	b = append(b, '-')
	b = strconv.AppendUint(b, 1000+uint64(binary.BigEndian.Uint32(u[:])%(1<<30)), 10)
	return string(b)
}
