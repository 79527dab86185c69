package vda

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/usher-vdi/usher/internal/vdaproto"
)

// Defaults.
const (
	// DefaultCallTimeout bounds one HTTP attempt to the broker.
	DefaultCallTimeout = 10 * time.Second
	// DefaultCallAttempts is how often a call is tried while the broker is
	// unreachable or overloaded.
	DefaultCallAttempts = 3
	// DefaultHeartbeatInterval is used when the broker names none.
	DefaultHeartbeatInterval = 3 * time.Second
	// MinHeartbeatInterval stops a misconfigured broker from making a VDA
	// spin.
	MinHeartbeatInterval = 10 * time.Millisecond
	// DefaultMinBackoff and DefaultMaxBackoff bound the wait between
	// attempts to enrol or register while the broker is unreachable.
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
	// MaxControlBody is the largest request body the control endpoint reads.
	MaxControlBody = 64 << 10
	// DefaultHookTimeout bounds one run of a session hook.
	DefaultHookTimeout = 10 * time.Second
	// AgentVersion is reported at registration.
	AgentVersion = "usher-vda/1"
)

// Errors callers branch on.
var (
	// ErrNotRegistered: the broker does not know the machine as registered
	// (it restarted, or timed the machine out). Register again.
	ErrNotRegistered = errors.New("machine is not registered with the broker")
	// ErrUnauthorized: the broker refused the enrolment secret or the
	// machine credential. A refused credential calls for enrolling again.
	ErrUnauthorized = errors.New("unauthorized")
)

// SessionState is the state of a session on a VDA, as in
// vdaproto.SessionReport.State.
type SessionState string

// Session states. A logged-off session is forgotten.
const (
	StatePending      SessionState = "pending"      // prepared; the client has not arrived
	StateActive       SessionState = "active"       // a client is connected
	StateDisconnected SessionState = "disconnected" // the client went away; the session lives on
)

// Session is a session as a VDA knows it.
type Session struct {
	ID          string
	User        string
	Resource    string
	CommandLine string
	State       SessionState
	ClientName  string
	// Since is when the session entered its state.
	Since time.Time
	// Display is the session's display (":12") and DisplayEnv what
	// reaches it (DISPLAY, XAUTHORITY), on a machine that runs displays.
	Display    string
	DisplayEnv []string
}

// Report returns the session as sent in a RegisterRequest.
func (s Session) Report() vdaproto.SessionReport {
	return vdaproto.SessionReport{ID: s.ID, User: s.User, Resource: s.Resource, State: string(s.State)}
}

// Log attribute keys.
const (
	keyMachine  = "machine"
	keySession  = "session"
	keyUser     = "user"
	keyEvent    = "event"
	keyErr      = "err"
	keyAttempt  = "attempt"
	keyWait     = "wait"
	keyInterval = "interval"
	keyAddr     = "addr"
	keyCount    = "machines"
	keyPin      = "pin"
	keyDisplay  = "display"
)

// discard is the logger of components given none.
var discard = slog.New(slog.DiscardHandler)

// jittered returns the wait before retry number attempt (0 for the first
// retry): exponential from min, capped at max, with "equal jitter" (a
// random half on top of a fixed half) so that many VDAs that failed
// together do not retry together.
func jittered(attempt int, min, max time.Duration) time.Duration {
	if min <= 0 {
		min = time.Millisecond
	}
	if max < min {
		max = min
	}
	d := max
	if attempt < 62 && min<<attempt > 0 && min<<attempt < max {
		d = min << attempt
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits for d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
