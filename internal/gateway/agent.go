package gateway

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"

	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// Errors of dialling an agent, which callers branch on.
var (
	// ErrPlainAgent refuses a clear (http://) control URL off loopback,
	// unless Config.AllowPlain: the ticket would cross the network in
	// clear.
	ErrPlainAgent = errors.New("the agent's control URL is http:// off loopback: the ticket would cross the network in clear")
	// ErrWrongCertificate is an agent whose listener shows another
	// certificate than the one it registered: someone else is at its
	// address, and gets no ticket.
	ErrWrongCertificate = errors.New("the agent's listener shows another certificate than the one it registered")
	// ErrOtherSubprotocol is an agent that selected another subprotocol
	// than vdaproto.DisplaySubprotocol.
	ErrOtherSubprotocol = errors.New("the agent did not select the display's subprotocol " + vdaproto.DisplaySubprotocol)
)

// RefusedError is an agent's refusal of the display before the upgrade:
// its HTTP status, and its JSON error's code and message (for the log).
type RefusedError struct {
	Status        int
	Code, Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the agent refused the display: %d %s: %s: %s", e.Status, http.StatusText(e.Status), e.Code, e.Message)
}

// agentURL is the display's WebSocket URL under a target's control URL,
// under the rules of the broker's control client: https (wss) pinned or
// verified, clear http (ws) only on loopback or when allowed, and never
// with a pin (a pinned agent registered a clear URL: something is wrong).
func (g *Gateway) agentURL(t Target) (*url.URL, error) {
	u, err := url.Parse(t.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("machine %q: control URL %q is not http(s)", t.Machine, t.URL)
	}
	switch {
	case u.Scheme == "http" && t.Pin != "":
		return nil, fmt.Errorf("machine %q registered a certificate pin with a clear control URL %s", t.Machine, t.URL)
	case u.Scheme == "http" && !g.cfg.AllowPlain && !tlsconf.LoopbackAddr(u.Host):
		return nil, fmt.Errorf("machine %q at %s: %w", t.Machine, t.URL, ErrPlainAgent)
	}
	scheme := "wss"
	if u.Scheme == "http" {
		scheme = "ws"
	}
	return &url.URL{Scheme: scheme, Host: u.Host, Path: strings.TrimSuffix(u.Path, "/") + vdaproto.PathDisplay}, nil
}

// dial opens the display at the target's agent, offering the display's
// subprotocol and the ticket's.
func (g *Gateway) dial(ctx context.Context, t Target, ticket string) (*websocket.Conn, error) {
	u, err := g.agentURL(t)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tlsconf.MinVersion, RootCAs: g.cfg.CAs}
	if t.Pin != "" {
		cfg = tlsconf.PinnedConfig(t.Pin)
	}
	// One connection per display, made for it: nothing pooled, no proxy
	// from the environment, no redirect followed (the agent names no
	// other host for the gateway to reach).
	tr := &http.Transport{
		DialContext:            (&net.Dialer{Timeout: g.cfg.DialTimeout}).DialContext,
		TLSClientConfig:        cfg,
		TLSHandshakeTimeout:    g.cfg.DialTimeout,
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: 64 << 10,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	c, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: hc,
		Subprotocols: []string{vdaproto.DisplaySubprotocol, vdaproto.TicketSubprotocol(ticket)}})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			e := &RefusedError{Status: resp.StatusCode}
			var body vdaproto.ErrorBody
			if resp.Body != nil && json.NewDecoder(io.LimitReader(resp.Body, 1024)).Decode(&body) == nil {
				e.Code, e.Message = body.Error.Code, body.Error.Message
			}
			return nil, fmt.Errorf("machine %q at %s: %w", t.Machine, u, e)
		}
		if errors.Is(err, tlsconf.ErrPinMismatch) {
			return nil, fmt.Errorf("machine %q at %s: %w: %w", t.Machine, u, ErrWrongCertificate, err)
		}
		return nil, fmt.Errorf("machine %q at %s: %w", t.Machine, u, err)
	}
	if c.Subprotocol() != vdaproto.DisplaySubprotocol {
		c.Close(websocket.StatusProtocolError, "the display's subprotocol is "+vdaproto.DisplaySubprotocol)
		return nil, fmt.Errorf("machine %q at %s: %w", t.Machine, u, ErrOtherSubprotocol)
	}
	c.SetReadLimit(g.cfg.MaxMessageBytes)
	return c, nil
}

// unreachableReason is the sentence a browser is told when its display's
// agent could not be opened.
func unreachableReason(err error) string {
	var refused *RefusedError
	switch {
	case errors.As(err, &refused) && refused.Status == http.StatusUnauthorized:
		return "the session's machine refused the ticket (used or expired): launch the session again"
	case errors.As(err, &refused):
		return fmt.Sprintf("the session's machine refused the display (HTTP %d)", refused.Status)
	case errors.Is(err, ErrWrongCertificate):
		return "the session's machine showed another certificate than the one it registered"
	case errors.Is(err, ErrPlainAgent):
		return "the session's machine has no TLS listener, and the site allows none without"
	case errors.Is(err, ErrOtherSubprotocol):
		return "the session's machine does not speak the display's protocol"
	}
	return "the session's machine cannot be reached: try again shortly"
}
