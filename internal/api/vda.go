package api

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/auth"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// MachineAudience is the token audience of machine credentials.
const MachineAudience = "vda"

type machineKey struct{}

// vdaCaller is an authenticated VDA: its machine and the ID of the
// credential it presented.
type vdaCaller struct{ machine, credential string }

func withMachine(ctx context.Context, c vdaCaller) context.Context {
	return context.WithValue(ctx, machineKey{}, c)
}

func machineFrom(ctx context.Context) string {
	c, _ := ctx.Value(machineKey{}).(vdaCaller)
	return c.machine
}

func (s *Server) registerVDA() {
	s.route(Route{Method: "POST", Pattern: vdaproto.PathEnrol, OperationID: "enrolMachine", Tag: "vda", Auth: AuthNone,
		Summary: "Exchange the site's enrolment secret, or a single-use machine enrolment token, for a machine credential; " +
			"the machine's earlier credential is refused from then on",
		Request: reflect.TypeFor[vdaproto.EnrolRequest](), Response: reflect.TypeFor[vdaproto.EnrolResponse]()}, s.enrol)
	s.route(Route{Method: "POST", Pattern: vdaproto.PathRenew, OperationID: "renewMachineCredential", Tag: "vda", Auth: AuthVDA,
		Summary: "A fresh token of the machine's current credential, for a VDA whose credential is about to expire",
		Request: reflect.TypeFor[vdaproto.RenewRequest](), Response: reflect.TypeFor[vdaproto.EnrolResponse]()}, s.renew)
	s.route(Route{Method: "POST", Pattern: vdaproto.PathMachines, OperationID: "listMachineNames", Tag: "vda", Auth: AuthNone,
		Summary: "List the names of the site's machines, all or those of a catalog, a delivery group or a name prefix; " +
			"authenticated by the site's enrolment secret in the body (wrong secret: 401), for simulated VDAs that need to know which machines to play",
		Request: reflect.TypeFor[vdaproto.MachinesRequest](), Response: reflect.TypeFor[vdaproto.MachinesResponse]()}, s.machineNames)
	s.route(Route{Method: "POST", Pattern: vdaproto.PathRegister, OperationID: "registerMachine", Tag: "vda", Auth: AuthVDA,
		Summary: "Register a VDA as ready for sessions",
		Request: reflect.TypeFor[vdaproto.RegisterRequest](), Response: reflect.TypeFor[vdaproto.RegisterResponse]()}, s.register)
	s.route(Route{Method: "POST", Pattern: vdaproto.PathHeartbeat, OperationID: "heartbeat", Tag: "vda", Auth: AuthVDA,
		Summary: "Report a VDA's load; 409 not_registered asks it to register again",
		Request: reflect.TypeFor[vdaproto.Heartbeat](), Response: reflect.TypeFor[vdaproto.HeartbeatResponse]()}, s.heartbeat)
	s.route(Route{Method: "POST", Pattern: vdaproto.PathEvents, OperationID: "sessionEvent", Tag: "vda", Auth: AuthVDA,
		Summary: "Report a session's logon, disconnect, reconnect or logoff",
		Request: reflect.TypeFor[vdaproto.SessionEvent]()}, s.sessionEvent)
}

var errBadEnrolment = site.Errorf(site.EUnauthorized, "wrong enrolment secret")

func (s *Server) enrol(r *http.Request) (any, error) {
	var req vdaproto.EnrolRequest
	if err := decodeJSON(r, &req); err != nil {
		return nil, err
	}
	e := site.Enrolment{Machine: req.Machine, Token: req.Token}
	if req.Token == "" {
		if subtle.ConstantTimeCompare([]byte(req.Secret), []byte(s.cfg.EnrolmentSecret)) != 1 {
			s.log.WarnContext(r.Context(), "enrolment refused: wrong secret", "machine", req.Machine, "remote", r.RemoteAddr)
			return nil, errBadEnrolment
		}
		e.SecretFingerprint = s.secretFingerprint
	}
	if !s.cfg.Broker.KnowsMachine(req.Machine) {
		return nil, site.NotFound(site.KindMachine, req.Machine)
	}
	var id string
	err := s.cfg.Store.Update(r.Context(), func(tx site.Tx) (err error) {
		id, err = site.EnrolMachine(r.Context(), tx, e, time.Now())
		return err
	})
	s.credentials.forget(req.Machine) // the earlier credential is revoked now
	if err != nil {
		s.log.WarnContext(r.Context(), "enrolment refused", "machine", req.Machine, "remote", r.RemoteAddr, "err", err)
		return nil, err
	}
	cred, exp := s.cfg.Signer.IssueClaims(auth.Claims{Subject: req.Machine, Audience: MachineAudience, ID: id,
		Expires: s.cfg.Signer.Now().Add(s.cfg.MachineCredentialTTL)})
	level := slog.LevelInfo
	if req.Simulated {
		level = slog.LevelDebug
	}
	via := "secret"
	if req.Token != "" {
		via = "machine enrolment token"
	}
	s.log.Log(r.Context(), level, "machine enrolled; its earlier credential is revoked", "machine", req.Machine, "with", via, "remote", r.RemoteAddr)
	return vdaproto.EnrolResponse{Credential: cred, ExpiresAt: exp}, nil
}

// renew issues a fresh token of the caller's current credential.
func (s *Server) renew(r *http.Request) (any, error) {
	var req vdaproto.RenewRequest
	if err := decodeJSON(r, &req); err != nil {
		return nil, err
	}
	if err := sameMachine(r, req.Machine); err != nil {
		return nil, err
	}
	cred, exp := s.cfg.Signer.IssueClaims(auth.Claims{Subject: req.Machine, Audience: MachineAudience, ID: s.credentialID(r),
		Expires: s.cfg.Signer.Now().Add(s.cfg.MachineCredentialTTL)})
	return vdaproto.EnrolResponse{Credential: cred, ExpiresAt: exp}, nil
}

// machineNames lists machine names to a holder of the enrolment secret, who
// could enrol as any of them: the names tell them nothing more.
func (s *Server) machineNames(r *http.Request) (any, error) {
	var req vdaproto.MachinesRequest
	if err := decodeJSON(r, &req); err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(req.Secret), []byte(s.cfg.EnrolmentSecret)) != 1 {
		s.log.WarnContext(r.Context(), "machine list refused: wrong enrolment secret", "remote", r.RemoteAddr)
		return nil, errBadEnrolment
	}
	snap := s.cfg.Broker.Snapshot()
	if _, ok := snap.Catalog(req.Catalog); req.Catalog != "" && !ok {
		return nil, site.NotFound(site.KindCatalog, req.Catalog)
	}
	if _, ok := snap.DeliveryGroup(req.DeliveryGroup); req.DeliveryGroup != "" && !ok {
		return nil, site.NotFound(site.KindDeliveryGroup, req.DeliveryGroup)
	}
	names := []string{}
	for _, name := range snap.MachineNames() {
		m, group, _ := snap.Machine(name)
		if (req.Catalog == "" || m.Catalog == req.Catalog) &&
			(req.DeliveryGroup == "" || group == req.DeliveryGroup) &&
			strings.HasPrefix(name, req.Prefix) {
			names = append(names, name)
		}
	}
	return vdaproto.MachinesResponse{Machines: names}, nil
}

// authenticateVDA accepts a machine credential of a configured machine
// that is the machine's current one: not revoked, not replaced by a later
// enrolment, and for one enrolled with the site's secret, enrolled with
// the current secret.
func (s *Server) authenticateVDA(r *http.Request) (vdaCaller, error) {
	claims, err := s.cfg.Signer.Verify(bearer(r), MachineAudience)
	if err != nil || !s.cfg.Broker.KnowsMachine(claims.Subject) {
		return vdaCaller{}, errUnauthorized
	}
	caller := vdaCaller{claims.Subject, claims.ID}
	if s.credentials.current(claims.Subject, claims.ID, time.Now()) {
		return caller, nil
	}
	// One read: no transaction needed around it.
	err = site.ReadOnce(r.Context(), s.cfg.Store, func(tx site.Tx) error {
		return site.CheckMachineCredential(r.Context(), tx, claims.Subject, claims.ID, s.secretFingerprint)
	})
	if err != nil {
		if site.ErrorCode(err) == site.EUnauthorized {
			s.log.WarnContext(r.Context(), "machine credential refused: revoked, replaced by a later enrolment, or of an earlier enrolment secret",
				"machine", claims.Subject, "remote", r.RemoteAddr)
			return vdaCaller{}, errUnauthorized
		}
		return vdaCaller{}, err
	}
	s.credentials.remember(claims.Subject, claims.ID, time.Now().Add(credentialCacheTTL))
	return caller, nil
}

// credentialCacheTTL bounds how long a machine credential found current
// is trusted without reading the site DB again. Enrolment, renewal and
// revocation through this server take effect at once; through another
// broker or the CLI, within this time.
const credentialCacheTTL = time.Second

// credentialCache remembers, per machine, the credential ID last found
// current and until when to trust it.
type credentialCache struct {
	mu sync.Mutex
	m  map[string]cachedCredential
}

type cachedCredential struct {
	id    string
	until time.Time
}

func (c *credentialCache) current(machine, id string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[machine]
	return ok && e.id == id && now.Before(e.until)
}

func (c *credentialCache) remember(machine, id string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedCredential{}
	}
	c.m[machine] = cachedCredential{id, until}
}

// forget drops machine's entry: its credential just changed.
func (c *credentialCache) forget(machine string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, machine)
}

// credentialID returns the credential ID of an authenticated VDA request.
func (s *Server) credentialID(r *http.Request) string {
	c, _ := r.Context().Value(machineKey{}).(vdaCaller)
	return c.credential
}

// sameMachine refuses a body that speaks for another machine than the
// credential's.
func sameMachine(r *http.Request, body string) error {
	if body != machineFrom(r.Context()) {
		return site.Errorf(site.EForbidden, "the credential is for machine %q, not %q", machineFrom(r.Context()), body)
	}
	return nil
}

func (s *Server) register(r *http.Request) (any, error) {
	var req vdaproto.RegisterRequest
	if err := decodeJSON(r, &req); err != nil {
		return nil, err
	}
	if err := sameMachine(r, req.Machine); err != nil {
		return nil, err
	}
	if req.ControlURL == "" || len(req.ControlToken) < 16 {
		return nil, site.Errorf(site.EInvalid, "control_url and a control_token of at least 16 characters are required")
	}
	if err := checkControl(req.ControlURL, req.ControlPin); err != nil {
		return nil, err
	}
	// The address goes into launch files: refuse what could inject a
	// setting before anything else looks at it.
	if req.Address != "" {
		if err := site.ValidateAddress(req.Address); err != nil {
			return nil, site.Errorf(site.EInvalid, "address: %v", err)
		}
	}
	reg := registration(req)
	reg.Credential = s.credentialID(r)
	if err := s.cfg.Broker.Register(r.Context(), reg); err != nil {
		return nil, err
	}
	b := s.cfg.Broker
	return vdaproto.RegisterResponse{HeartbeatInterval: b.HeartbeatInterval(), HeartbeatTimeout: b.HeartbeatTimeout()}, nil
}

func (s *Server) heartbeat(r *http.Request) (any, error) {
	var hb vdaproto.Heartbeat
	if err := decodeJSON(r, &hb); err != nil {
		return nil, err
	}
	if err := sameMachine(r, hb.Machine); err != nil {
		return nil, err
	}
	b := heartbeat(hb)
	b.Credential = s.credentialID(r)
	idx, err := s.cfg.Broker.Heartbeat(r.Context(), b)
	if err != nil {
		return nil, err
	}
	return vdaproto.HeartbeatResponse{LoadIndex: idx}, nil
}

func (s *Server) sessionEvent(r *http.Request) (any, error) {
	var ev vdaproto.SessionEvent
	if err := decodeJSON(r, &ev); err != nil {
		return nil, err
	}
	if err := sameMachine(r, ev.Machine); err != nil {
		return nil, err
	}
	e := sessionEvent(ev)
	e.Credential = s.credentialID(r)
	return nil, s.cfg.Broker.SessionEvent(r.Context(), e)
}

// checkControl refuses a control URL that is not http(s), and a control
// pin that is not a certificate's fingerprint or comes with a clear URL.
func checkControl(controlURL, pin string) error {
	u, err := url.Parse(controlURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return site.Errorf(site.EInvalid, "control_url %q: want http(s)://HOST[:PORT][/PATH]", controlURL)
	}
	switch {
	case pin == "":
	case !vdaproto.ValidPin(pin):
		return site.Errorf(site.EInvalid, "control_pin: want the hex SHA-256 of the control listener's certificate (64 lower-case hex digits)")
	case u.Scheme != "https":
		return site.Errorf(site.EInvalid, "control_pin pins a TLS certificate: it needs an https control_url, not %q", controlURL)
	}
	return nil
}

// registration, heartbeat and sessionEvent turn the VDA protocol's
// messages into the broker's.

func registration(req vdaproto.RegisterRequest) broker.Registration {
	reg := broker.Registration{Machine: req.Machine, Address: req.Address, Protocol: req.Protocol,
		Control: broker.Control{Machine: req.Machine, URL: req.ControlURL, Token: req.ControlToken, Pin: req.ControlPin}, AgentVersion: req.AgentVersion,
		Simulated: req.Simulated}
	for _, s := range req.Sessions {
		reg.Sessions = append(reg.Sessions, broker.ReportedSession{ID: s.ID, User: s.User, Resource: s.Resource,
			State: site.SessionState(s.State)})
	}
	return reg
}

func heartbeat(hb vdaproto.Heartbeat) broker.Heartbeat {
	return broker.Heartbeat{Machine: hb.Machine, Usage: site.Usage{Sessions: hb.Sessions, LogonsInProgress: hb.LogonsInProgress,
		CPUPercent: hb.CPUPercent, MemoryPercent: hb.MemoryPercent, MemoryUsedMB: hb.MemoryUsedMB, MemoryTotalMB: hb.MemoryTotalMB}}
}

func sessionEvent(ev vdaproto.SessionEvent) broker.SessionEvent {
	return broker.SessionEvent{Machine: ev.Machine, SessionID: ev.SessionID, Change: sessionChange(ev.Event), ClientName: ev.ClientName}
}

// sessionChange maps a protocol event to the broker's; the broker refuses
// an unknown one as invalid.
func sessionChange(event string) broker.SessionChange {
	switch event {
	case vdaproto.EventLogon:
		return broker.ChangeLogon
	case vdaproto.EventDisconnect:
		return broker.ChangeDisconnect
	case vdaproto.EventReconnect:
		return broker.ChangeReconnect
	case vdaproto.EventLogoff:
		return broker.ChangeLogoff
	}
	return broker.SessionChange(event)
}
