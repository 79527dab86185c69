package nfuse

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/usher-vdi/usher/internal/site"
)

// sessionData lists the user's sessions: RequestReconnectSessionData
// every live one, RequestDiscSessionData the disconnected ones. Each
// SessionData carries the SessionName (InName, HostId, SessionId) that a
// RequestAddress sends back to reconnect, the application's name, and the
// state: "disconnected", or "active" for an active session and for one
// whose user is still logging on.
func (h *Handler) sessionData(ctx context.Context, x *exchange) []byte {
	sessions, err := h.userSessions(ctx, x)
	if err != nil {
		return h.fail(x, err)
	}
	snap := h.broker.Snapshot()
	x.begin()
	if typesMatch(x.req) {
		for _, s := range sessions {
			if x.kind == KindDiscSessionData && s.State != site.SessionDisconnected {
				continue
			}
			state := "active"
			if s.State == site.SessionDisconnected {
				state = "disconnected"
			}
			fname := s.Resource
			if r, ok := snap.Resource(s.Resource); ok {
				fname = r.DisplayName
			}
			x.w.start("SessionData")
			x.w.start("SessionName")
			x.w.elem("InName", s.Resource)
			x.w.elem("HostId", s.Machine)
			x.w.elem("SessionId", s.ID)
			x.w.end("SessionName")
			x.w.elem("FName", fname)
			x.w.elem("ServerType", serverType)
			x.w.elem("ClientType", clientType)
			x.w.elem("SessionState", state)
			if s.ClientName != "" {
				x.w.elem("ClientName", s.ClientName)
			}
			x.w.end("SessionData")
		}
	}
	return x.finish()
}

// endSessions logs off (RequestLogoffUserSessions) or disconnects
// (RequestDisconnectUserSessions) the user's sessions, or those of them
// that the request names, and answers an empty response when all went
// well. Disconnecting skips sessions that are not active.
func (h *Handler) endSessions(ctx context.Context, x *exchange) []byte {
	sessions, err := h.userSessions(ctx, x)
	if err != nil {
		return h.fail(x, err)
	}
	var errs []error
	for _, s := range sessions {
		if len(x.req.SessionIDs) > 0 && !slices.Contains(x.req.SessionIDs, s.ID) {
			continue
		}
		switch {
		case x.kind == KindLogoffUserSessions:
			err = h.broker.Logoff(ctx, x.user, s.ID)
		case s.State == site.SessionActive:
			err = h.broker.Disconnect(ctx, x.user, s.ID)
		default:
			continue
		}
		if err != nil && site.ErrorCode(err) != site.ENotFound { // ended meanwhile
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return h.fail(x, err)
	}
	x.begin()
	return x.finish()
}

// userSessions authenticates the request and returns the user's live
// sessions, oldest first.
func (h *Handler) userSessions(ctx context.Context, x *exchange) ([]site.Session, error) {
	u, err := h.authenticate(ctx, h.broker.Snapshot(), x.req.Credentials, remoteHost(x))
	if err != nil {
		h.logonFailed(x, err)
		return nil, err
	}
	x.user = u.Name
	sessions, err := h.broker.UserSessions(ctx, u.Name)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(sessions, func(a, b site.Session) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return sessions, nil
}
