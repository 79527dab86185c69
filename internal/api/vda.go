package api

import (
	"context"
	"crypto/subtle"
	"net/http"
	"reflect"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// MachineAudience is the token audience of machine credentials.
const MachineAudience = "vda"

type machineKey struct{}

func withMachine(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, machineKey{}, name)
}

func machineFrom(ctx context.Context) string {
	name, _ := ctx.Value(machineKey{}).(string)
	return name
}

func (s *Server) registerVDA() {
	s.route(Route{Method: "POST", Pattern: vdaproto.PathEnrol, OperationID: "enrolMachine", Tag: "vda", Auth: AuthNone,
		Summary: "Exchange the site's enrolment secret for a machine credential",
		Request: reflect.TypeFor[vdaproto.EnrolRequest](), Response: reflect.TypeFor[vdaproto.EnrolResponse]()}, s.enrol)
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
	if subtle.ConstantTimeCompare([]byte(req.Secret), []byte(s.cfg.EnrolmentSecret)) != 1 {
		s.log.WarnContext(r.Context(), "enrolment refused: wrong secret", "machine", req.Machine, "remote", r.RemoteAddr)
		return nil, errBadEnrolment
	}
	if !s.cfg.Broker.KnowsMachine(req.Machine) {
		return nil, site.NotFound(site.KindMachine, req.Machine)
	}
	cred, exp := s.cfg.Signer.Issue(req.Machine, MachineAudience, s.cfg.MachineCredentialTTL)
	s.log.InfoContext(r.Context(), "machine enrolled", "machine", req.Machine, "remote", r.RemoteAddr)
	return vdaproto.EnrolResponse{Credential: cred, ExpiresAt: exp}, nil
}

// authenticateVDA accepts a machine credential of a configured machine.
func (s *Server) authenticateVDA(r *http.Request) (string, error) {
	claims, err := s.cfg.Signer.Verify(bearer(r), MachineAudience)
	if err != nil || !s.cfg.Broker.KnowsMachine(claims.Subject) {
		return "", errUnauthorized
	}
	return claims.Subject, nil
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
	if err := s.cfg.Broker.Register(r.Context(), req); err != nil {
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
	idx, err := s.cfg.Broker.Heartbeat(r.Context(), hb)
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
	return nil, s.cfg.Broker.SessionEvent(r.Context(), ev)
}
