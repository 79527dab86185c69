// Package gateway is usher's display gateway: the browser opens a
// session's desktop as a WebSocket on the portal's own origin
// (GET /api/v1/sessions/{id}/display), and the gateway splices it to the
// session's agent, as Citrix Gateway and Horizon's Blast Secure Gateway do.
//
// A request is refused before the upgrade, with the REST API's JSON
// errors, when it is not the user's to make: no portal session (401), no
// ticket (401: the session's single-use ticket comes in the WebSocket
// subprotocol vdaproto.TicketSubprotocol, browsers can set no header), a
// page of another origin (403: the Origin must be the request's own or
// one of Config.AllowedOrigins), a session that is not the user's or does
// not exist (404, the same answer for both). The gateway finds the
// session's machine itself, from broker state (a Resolver: the broker's
// DisplayTarget), never from the request: no parameter or header of it
// changes where the gateway dials.
//
// Past those checks the user is answered through the WebSocket, whose
// close code and reason a page reads (a refused handshake shows it
// nothing): over the limits of displays open at once, in all or per user
// (Config.MaxSessions, MaxSessionsPerUser), the gateway accepts and
// closes with 1013 (try again later); when the agent cannot be reached,
// refuses the ticket or shows another certificate than the one it
// registered, with vdaproto.CloseAgentUnreachable and a sentence saying
// which. The agent is dialled at its control URL plus vdaproto.PathDisplay:
// wss:// with TLS pinned to the certificate it registered (or verified
// against Config.CAs when it registered none), ws:// only for a clear
// control URL on loopback or when the site allows clear ones
// (Config.AllowPlain), as the broker's control client does; redirects are
// not followed.
//
// Once both are open, messages go both ways as they are (type and bytes;
// a message larger than the copy buffer is streamed in several frames),
// never re-encoded, and each side's close code and reason reach the other.
// Memory per display is bounded: one copy buffer per direction, a read
// limit per message, no queue; a slow reader slows its own display only.
// Both sides are pinged every Config.PingInterval; a peer that answers no
// ping within PingTimeout (while the gateway is reading from it) is taken
// for gone. Round-trip times, displays open and ended (by outcome), bytes
// by direction and failed agent dials are counted on Config.Registerer.
//
// In direct mode (Config.Direct, for a LAN whose browsers reach the
// machines and trust their certificates) the launch hands out the agent's
// own wss:// URL instead (DisplayURL) and the gateway splices nothing.
//
// internal/server assembles it for the site roles (usher serve, usher
// broker); internal/api mounts its handler and answers its DisplayURL in
// launches. It imports the broker for its Control type, vdaproto for the
// display's wire contract and tlsconf for the pinned TLS, and nothing of
// the site DB.
package gateway
