package vdaproto

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Paths on the broker.
const (
	PathEnrol     = "/api/v1/vda/enrol"
	PathRegister  = "/api/v1/vda/register"
	PathHeartbeat = "/api/v1/vda/heartbeat"
	PathEvents    = "/api/v1/vda/events"
	PathMachines  = "/api/v1/vda/machines"
	PathRenew     = "/api/v1/vda/renew"
)

// Paths under a VDA's control URL.
const (
	PathPrepare    = "/prepare"
	PathLogoff     = "/logoff"
	PathDisconnect = "/disconnect"
	PathConnect    = "/connect"
)

// CodeNotRegistered is the error code that tells a VDA to register again.
const CodeNotRegistered = "not_registered"

// EnrolRequest exchanges the site's enrolment secret, or a single-use
// machine enrolment token, for a credential of one configured machine.
// Enrolling replaces the machine's earlier credential, which the broker
// refuses from then on.
type EnrolRequest struct {
	Machine string `json:"machine"`
	Secret  string `json:"secret,omitempty"`
	// Token is a machine enrolment token (usher admin enrol-token); a
	// machine enrolled with one is bound: the site's secret no longer
	// enrols it.
	Token string `json:"token,omitempty"`
	// Simulated marks a simulated VDA, whose enrolment the broker logs
	// only at debug level.
	Simulated bool `json:"simulated,omitempty"`
}

// EnrolResponse carries the machine credential.
type EnrolResponse struct {
	Credential string    `json:"credential"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// RenewRequest asks for a fresh token of the machine's current
// credential, before it expires; the answer is an EnrolResponse.
type RenewRequest struct {
	Machine string `json:"machine"`
}

// MachinesRequest asks, with the site's enrolment secret, for the names of
// the site's machines: all of them, or those that match every filter set.
// Whoever holds the secret may enrol as any of them, so the names tell
// them nothing more; the simulator uses them to know which machines to
// play.
type MachinesRequest struct {
	Secret string `json:"secret"`
	// Catalog and DeliveryGroup, when set, must name one of the site's;
	// Prefix matches names that begin with it.
	Catalog       string `json:"catalog,omitempty"`
	DeliveryGroup string `json:"delivery_group,omitempty"`
	Prefix        string `json:"prefix,omitempty"`
}

// MachinesResponse lists machine names in name order.
type MachinesResponse struct {
	Machines []string `json:"machines"`
}

// RegisterRequest announces a VDA ready for sessions.
type RegisterRequest struct {
	Machine string `json:"machine"`
	// Address is where clients reach the display protocol, host:port.
	Address string `json:"address"`
	// Protocol is the display protocol: "rdp" (default) or "ica".
	Protocol string `json:"protocol,omitempty"`
	// ControlURL is where the broker reaches the VDA; ControlToken is what
	// the broker presents there.
	ControlURL   string `json:"control_url"`
	ControlToken string `json:"control_token"`
	// ControlPin, for an https ControlURL, is the fingerprint of the
	// certificate the control listener serves: the broker sends the
	// control token only to a listener that shows that certificate.
	// Registering again with another pin re-pins (the agent's certificate
	// was rotated). Empty, an https ControlURL is verified against the
	// site's CA or the system roots.
	ControlPin string `json:"control_pin,omitempty"`
	// MaxSessions is the most sessions the host can take (0: no own limit).
	MaxSessions  int    `json:"max_sessions,omitempty"`
	AgentVersion string `json:"agent_version,omitempty"`
	// Simulated marks a simulated VDA, whose registrations the broker
	// logs only at debug level.
	Simulated bool `json:"simulated,omitempty"`
	// Sessions are the sessions already on the host, after a VDA or broker
	// restart; the broker reconciles its records with them.
	Sessions []SessionReport `json:"sessions,omitempty"`
}

// SessionReport is a session as a VDA knows it.
type SessionReport struct {
	ID       string `json:"id"`
	User     string `json:"user"`
	Resource string `json:"resource,omitempty"`
	State    string `json:"state"` // pending, active or disconnected
}

// RegisterResponse tells the VDA how often to heartbeat.
type RegisterResponse struct {
	HeartbeatInterval time.Duration `json:"heartbeat_interval_ns"`
	// HeartbeatTimeout is how long the broker waits for a heartbeat before
	// it unregisters the machine.
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout_ns"`
}

// Heartbeat reports load.
type Heartbeat struct {
	Machine          string  `json:"machine"`
	Sessions         int     `json:"sessions"`
	LogonsInProgress int     `json:"logons_in_progress"`
	CPUPercent       float64 `json:"cpu_percent"`
	MemoryPercent    float64 `json:"memory_percent"`
	// MemoryUsedMB and MemoryTotalMB let the broker apply the memory rule's
	// base load; 0 when unknown.
	MemoryUsedMB  int `json:"memory_used_mb,omitempty"`
	MemoryTotalMB int `json:"memory_total_mb,omitempty"`
}

// HeartbeatResponse acknowledges a heartbeat.
type HeartbeatResponse struct {
	LoadIndex int `json:"load_index"`
}

// Session events.
const (
	EventLogon      = "logon"
	EventDisconnect = "disconnect"
	EventReconnect  = "reconnect"
	EventLogoff     = "logoff"
)

// SessionEvent reports a change of a session's state.
type SessionEvent struct {
	Machine   string    `json:"machine"`
	SessionID string    `json:"session_id"`
	Event     string    `json:"event"`
	At        time.Time `json:"at"`
	// ClientName is the client that connected, for logon and reconnect.
	ClientName string `json:"client_name,omitempty"`
}

// PrepareRequest tells a VDA that a session is coming: a new one, or a
// reconnection to an existing one.
type PrepareRequest struct {
	SessionID   string `json:"session_id"`
	User        string `json:"user"`
	Resource    string `json:"resource"`
	CommandLine string `json:"command_line,omitempty"`
	Reconnect   bool   `json:"reconnect,omitempty"`
	// TicketHash is TicketHash(ticket): the VDA never sees the ticket
	// itself until a client presents it.
	TicketHash string    `json:"ticket_hash"`
	ExpiresAt  time.Time `json:"expires_at"`
	// IdleDisconnectMS, when positive, is the delivery group's session
	// idle timer in milliseconds: the agent disconnects a viewer that
	// sent no input for so long (CloseDisconnected). 0 or absent: never.
	IdleDisconnectMS int64 `json:"idle_disconnect_ms,omitempty"`
}

// SessionRequest names a session.
type SessionRequest struct {
	SessionID string `json:"session_id"`
}

// ConnectRequest presents a ticket to a VDA.
type ConnectRequest struct {
	Ticket     string `json:"ticket"`
	ClientName string `json:"client_name,omitempty"`
}

// ConnectResponse is the session the ticket opened.
type ConnectResponse struct {
	SessionID string `json:"session_id"`
	User      string `json:"user"`
	Resource  string `json:"resource"`
}

// ValidPin reports whether pin has the form of a certificate's
// fingerprint (tlsconf.Fingerprint: the SHA-256 of its DER bytes): 64
// lower-case hex digits.
func ValidPin(pin string) bool {
	if len(pin) != 2*sha256.Size {
		return false
	}
	for _, c := range pin {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// TicketHash returns the hex SHA-256 of a ticket.
func TicketHash(ticket string) string {
	h := sha256.Sum256([]byte(ticket))
	return hex.EncodeToString(h[:])
}

// ErrorBody is the JSON error document.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}
