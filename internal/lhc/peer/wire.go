package peer

import (
	"encoding/base64"
	"strconv"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// Prefix is the path under which a broker serves its peers: an
// operation op is POST Prefix+op.
const Prefix = "/api/v1/peer/"

// The operations.
const (
	OpState      = "state"
	OpLearn      = "learn"
	OpLaunch     = "launch"
	OpReconnect  = "reconnect"
	OpLogoff     = "logoff"
	OpDisconnect = "disconnect"
	OpSessions   = "sessions"
	OpDisplay    = "display"
)

// The headers of the protocol besides Authorization (Bearer, the token).
const (
	// HeaderNonce is the receiver's nonce of its answer.
	HeaderNonce = "Usher-Peer-Nonce"
	// HeaderProof is the receiver's proof of its answer.
	HeaderProof = "Usher-Peer-Proof"
)

// Request is a request a broker hands to its zone's leader, for User,
// whom it has authenticated.
type Request struct {
	User          string `json:"user"`
	Resource      string `json:"resource,omitempty"`
	SessionID     string `json:"session_id,omitempty"`
	ClientName    string `json:"client_name,omitempty"`
	ClientAddress string `json:"client_address,omitempty"`
}

// Launch is a launch as the leader placed it.
type Launch struct {
	Session     site.Session `json:"session"`
	Address     string       `json:"address"`
	Protocol    string       `json:"protocol"`
	Ticket      string       `json:"ticket"`
	ExpiresAt   time.Time    `json:"expires_at"`
	Reconnected bool         `json:"reconnected"`
}

// Display is where the display of a user's session is served, as the
// leader resolved it (broker.Broker.DisplayTarget): no control token.
type Display struct {
	Machine string `json:"machine"`
	URL     string `json:"url"`
	Pin     string `json:"pin,omitempty"`
}

// State is what a broker tells its peers of itself.
type State struct {
	Name string `json:"name"`
	// Outage is set while the broker brokers from its local copy.
	Outage bool `json:"outage"`
	// Run names the broker's run (it changes at each start): callers
	// bind their tokens for its other operations to it, so that a token
	// taken by one run is never new to the next.
	Run string `json:"run"`
}

// Sessions lists a user's live sessions.
type Sessions struct {
	Sessions []site.Session `json:"sessions"`
}

// errorBody is the JSON document of an error answer, as the REST API's.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// answerProof is the receiver's proof of an answer to the request of
// token t: that the receiver, which holds the peer key, answered this
// request of this caller, now (the token's ID is the caller's fresh
// challenge), with this status and body.
func (k Key) answerProof(receiver string, t Token, nonce string, status int, body []byte) string {
	return base64.RawURLEncoding.EncodeToString(mac(k.proof, "answer", receiver, t.From, t.Op, t.ID, nonce,
		strconv.Itoa(status), Digest(body)))
}
