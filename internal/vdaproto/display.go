package vdaproto

import "strings"

// The display in a browser: a session host whose agent runs a display per
// session (usher vda --display xvnc) registers ProtocolVNC, and serves the
// session's RFB stream as a WebSocket at PathDisplay under its control
// URL. A client (usher's gateway, or a browser in direct mode) opens it
// with GET and the WebSocket upgrade, offering two subprotocols:
// DisplaySubprotocol, which the agent selects, and TicketSubprotocol of
// the session's single-use ticket, which carries the ticket (browsers can
// set no header on a WebSocket; a subprotocol is never logged as a query
// would be). The agent spends the ticket as POST /connect does, then
// splices binary messages to and from the session's display: the bytes
// are RFB (RFC 6143), neither parsed nor re-encoded.
//
// An optional query parameter, DisplayClientParam, names the client, as
// ConnectRequest.ClientName does for /connect.
//
// Refusals come before the upgrade, as the control endpoint's JSON errors
// (401 for a missing, unknown, used or expired ticket). Once open, the
// agent closes the WebSocket with one of the Close codes below, its reason
// a sentence for the user.
const (
	PathDisplay = "/display"
	// ProtocolVNC is the protocol a machine registers when its sessions
	// open in a browser through PathDisplay.
	ProtocolVNC = "vnc"
	// DisplaySubprotocol is the WebSocket subprotocol of the RFB stream,
	// the one noVNC and websockify call "binary".
	DisplaySubprotocol = "binary"
	// TicketSubprotocolPrefix prefixes the ticket in the second
	// subprotocol offered. Tickets are base64url, valid in a subprotocol.
	TicketSubprotocolPrefix = "usher.ticket."
	// DisplayClientParam is the query parameter that names the client.
	DisplayClientParam = "client_name"
)

// WebSocket close codes of the display (4000–4999 are the application's).
const (
	// CloseTakenOver: the same session was opened by another connection
	// (a second tab or device), which now has it.
	CloseTakenOver = 4001
	// CloseSessionEnded: the session was logged off (by the user, the
	// broker or a policy); a relaunch starts a new one.
	CloseSessionEnded = 4002
	// CloseDisplayFailed: the session's display server stopped or could
	// not be reached; the session is reported ended.
	CloseDisplayFailed = 4003
	// CloseDisconnected: the broker (or an idle policy) disconnected the
	// session; a relaunch returns to it.
	CloseDisconnected = 4004
	// CloseAgentUnreachable: a gateway could not reach the session's
	// agent (sent by the gateway, never by an agent).
	CloseAgentUnreachable = 4005
)

// TicketSubprotocol returns the subprotocol that carries ticket.
func TicketSubprotocol(ticket string) string { return TicketSubprotocolPrefix + ticket }

// TicketFromSubprotocols returns the ticket of the first TicketSubprotocol
// among protocols (as in Sec-WebSocket-Protocol, comma-separated values
// already split or not), or "".
func TicketFromSubprotocols(protocols []string) string {
	for _, v := range protocols {
		for p := range strings.SplitSeq(v, ",") {
			if t, ok := strings.CutPrefix(strings.TrimSpace(p), TicketSubprotocolPrefix); ok && t != "" {
				return t
			}
		}
	}
	return ""
}
