// Package vda is the VDA (session host) side of usher: the agent that runs
// on a session host, and a simulator that runs many simulated VDAs in one
// process for tests and benchmarks.
//
// A [Machine] is one VDA. It enrols with the site's enrolment secret,
// registers with a broker, heartbeats with its load, and reports session
// events, all through a [Client] that speaks [vdaproto] over HTTP. Its
// [Machine.Handler] is the control endpoint where the broker prepares,
// logs off and disconnects sessions, and where clients present their
// single-use tickets. A [SessionHook] hands sessions to the host (the
// agent runs a command); a [LoadSource] measures the host. [RunAgent]
// serves one machine on its own listener: the agent of a real host.
//
// Both directions speak TLS off loopback. The [Client] verifies https
// brokers (ClientConfig.TLS: the site's CA or the system roots), refuses
// one whose certificate fails with a [CertificateError] naming it, and
// goes on to the next; it refuses http:// brokers off loopback unless
// told otherwise. An agent whose control listener speaks TLS registers
// its certificate's fingerprint (MachineConfig.ControlPin), so that
// brokers send the control token only to that certificate's holder, and
// registers again when the certificate is rotated.
//
// A machine with a [DisplayStarter] (the agent's --display xvnc) starts
// each new session's display when the broker prepares it, registers
// protocol vnc, and serves the display at vdaproto.PathDisplay: a
// WebSocket that opens only to the session's single-use ticket, spliced
// to the display's RFB stream unparsed. One viewer has a session at a
// time; the agent tells the broker of disconnects, reconnections and of
// displays that died, and closes the WebSocket with the close codes of
// vdaproto when the session is taken over, logged off or disconnected.
//
// A [Simulator] runs many machines behind one control listener, with
// simulated clients that arrive after a logon delay and simulated users
// who log off after a session length.
//
// It imports vdaproto, tlsconf, atomicfile and github.com/coder/websocket,
// and no broker package nor a display server's (cmd/usher hands it
// display/xvnc as a DisplayStarter). Only cmd/usher,
// internal/server (for simulated VDAs) and tests import it; the broker
// reaches VDAs through the wire protocol alone (broker/vdacontrol).
package vda
