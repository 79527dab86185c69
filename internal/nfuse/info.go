package nfuse

import (
	"context"
	"net"
	"net/http"
	"slices"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

// What usher's resources are in NFuse terms: every one runs on a
// "win32" server type and is reached by an "ica30" client, which are what
// NFuse clients ask for (usher's hosts may be Linux and speak RDP: NFuse
// knows no such types, and a client filtering on them would see nothing).
const (
	serverType     = "win32"
	clientType     = "ica30"
	connectionType = "tcp"
	leasingStatus  = "working"
	// cgpPort is the session reliability (CGP) port of ICA hosts.
	cgpPort = "2598"
)

// capabilityIDs are the capabilities usher announces.
var capabilityIDs = []string{
	"separate-credentials-validation",
	"multi-image-icons",
	"user-identity",
}

// typesMatch reports whether a request's ServerType and ClientType filters
// admit usher's resources: none given, "all", or usher's type.
func typesMatch(req *Request) bool {
	return typeMatches(req.ServerTypes, serverType) && typeMatches(req.ClientTypes, clientType)
}

func typeMatches(list []string, ours string) bool {
	return len(list) == 0 || slices.Contains(list, "all") || slices.Contains(list, ours)
}

func (h *Handler) capabilities(x *exchange) []byte {
	x.begin()
	for _, c := range capabilityIDs {
		x.w.elem("CapabilityId", c)
	}
	return x.finish()
}

func (h *Handler) serverFarmData(x *exchange) []byte {
	x.begin()
	x.w.start("ServerFarmData")
	x.w.elem("ServerFarmName", h.broker.Snapshot().Settings.Name)
	x.w.end("ServerFarmData")
	return x.finish()
}

// serverData lists the site's configured session hosts, in name order,
// as the farm's servers: they are what a Citrix farm lists (its workers),
// and the configuration, unlike the registration state, is the same on
// every broker. The list is rendered once per snapshot.
func (h *Handler) serverData(x *exchange) []byte {
	x.begin()
	if typesMatch(x.req) {
		x.w.rawb(h.snapCache(h.broker.Snapshot()).serverData())
	}
	return x.finish()
}

// serverDataWithCredentials answers a RequestServerData only with valid
// credentials, for a site whose ServerDataCredentials setting is on.
func (h *Handler) serverDataWithCredentials(ctx context.Context, x *exchange) []byte {
	if _, failed := h.logon(ctx, x, h.broker.Snapshot()); failed != nil {
		return failed
	}
	return h.serverData(x)
}

// protocolInfo tells the client the address of the server it asked about,
// or of the XML service it reached.
func (h *Handler) protocolInfo(x *exchange) []byte {
	addr := x.req.ServerAddress
	if addr.Value == "" {
		addr = localAddress(x.r)
	}
	x.begin()
	x.w.startAttrs("ServerAddress", "addresstype", addr.Type)
	x.w.b = appendEscaped(x.w.b, addr.Value)
	x.w.end("ServerAddress")
	return x.finish()
}

// altAddress answers with the server address it was given: usher's hosts
// have no alternate (NAT) addresses.
func (h *Handler) altAddress(x *exchange) []byte {
	addr := x.req.ServerAddress
	if addr.Value == "" {
		return h.fail(x, errUnsupported)
	}
	x.begin()
	x.w.startAttrs("ServerAddress", "addresstype", addr.Type)
	x.w.b = appendEscaped(x.w.b, addr.Value)
	x.w.end("ServerAddress")
	return x.finish()
}

// localAddress is the address the client reached the service at.
func localAddress(r *http.Request) Address {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return hostPortAddress(a.String())
	}
	host := r.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "80")
	}
	return hostPortAddress(host)
}

// hostPortAddress types a host:port: "dot-port" for an IP address,
// "dns-port" for a name.
func hostPortAddress(hostPort string) Address {
	host, _, err := net.SplitHostPort(hostPort)
	if err == nil && net.ParseIP(host) != nil {
		return Address{Type: "dot-port", Value: hostPort}
	}
	return Address{Type: "dns-port", Value: hostPort}
}

// validateCredentials answers an empty response for good credentials,
// with the user's identities when DesiredInfo asks for user-identity.
func (h *Handler) validateCredentials(ctx context.Context, x *exchange) []byte {
	done := h.broker.Begin(broker.OpLogin)
	snap := h.broker.Snapshot()
	u, err := h.authenticate(ctx, snap, x.req.Credentials, remoteHost(x))
	done(err)
	if err != nil {
		h.logonFailed(x, err)
		return h.fail(x, err)
	}
	x.user = u.Name
	x.begin()
	if slices.Contains(x.req.DesiredInfo, "user-identity") {
		domain := snap.Settings.Domain
		x.w.start("UserIdentityInfo")
		x.w.startAttrs("ID", "type", "SAM")
		x.w.b = appendEscaped(x.w.b, domain+`\`+u.Name)
		x.w.end("ID")
		x.w.startAttrs("ID", "type", "UPN")
		x.w.b = appendEscaped(x.w.b, u.Name+"@"+domain)
		x.w.end("ID")
		x.w.startAttrs("ID", "type", "SID")
		x.w.raw(userSID(domain, u.Name))
		x.w.end("ID")
		x.w.end("UserIdentityInfo")
	}
	return x.finish()
}

// logonFailed logs a failed authentication, naming the user but never the
// password.
// logon authenticates the request's credentials against snap and names
// the exchange's user; on failure it logs the failure and returns the
// answer to send instead.
func (h *Handler) logon(ctx context.Context, x *exchange, snap *broker.Snapshot) (*site.User, []byte) {
	u, err := h.authenticate(ctx, snap, x.req.Credentials, remoteHost(x))
	if err != nil {
		h.logonFailed(x, err)
		return nil, h.fail(x, err)
	}
	x.user = u.Name
	return u, nil
}

func (h *Handler) logonFailed(x *exchange, err error) {
	var name string
	if c := x.req.Credentials; c != nil {
		name = c.UserName
		if name == "" && len(c.IDs) > 0 {
			name = c.IDs[0].Value
		}
	}
	h.log.Info("NFuse logon failed", logRequest, x.kind, logUser, name, logRemote, x.r.RemoteAddr, logErrorID, errorID(err))
}
