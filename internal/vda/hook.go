package vda

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Hook events, as in USHER_EVENT.
const (
	HookPrepare    = "prepare"
	HookLogoff     = "logoff"
	HookDisconnect = "disconnect"
)

// SessionHook hands sessions to the host: it is told when the broker
// prepares, logs off or disconnects a session, before the VDA records the
// change. An error from a prepare refuses the session (the control
// endpoint answers 500 and the broker tries another machine); an error from
// a logoff or disconnect leaves the session as it was and the control
// endpoint answers 500. Calls may be concurrent, for different sessions.
type SessionHook interface {
	Session(ctx context.Context, event string, s Session) error
}

// CommandHook runs a command for each session event, without a shell, with
// the session in its environment:
//
//	USHER_EVENT         prepare, logoff or disconnect
//	USHER_SESSION_ID    the session's ID
//	USHER_USER          the user, DOMAIN\name or name
//	USHER_RESOURCE      the application or desktop
//	USHER_COMMAND_LINE  the application's command line, if any
//	USHER_DISPLAY       the session's display (":12"), on a machine that
//	                    runs displays; then also DISPLAY and XAUTHORITY
//
// A command that exits non-zero, or runs longer than Timeout, fails.
type CommandHook struct {
	// Path and Args are the command; Path is looked up in $PATH when it
	// has no slash.
	Path string
	Args []string
	// Timeout bounds one run; 0 means DefaultHookTimeout.
	Timeout time.Duration
}

var _ SessionHook = (*CommandHook)(nil)

// ParseCommand splits a command line at white space into a CommandHook.
// There is no quoting: a command that needs it belongs in a script.
func ParseCommand(line string) (*CommandHook, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return nil, errors.New("empty session command")
	}
	return &CommandHook{Path: f[0], Args: f[1:]}, nil
}

// Session implements SessionHook.
func (h *CommandHook) Session(ctx context.Context, event string, s Session) error {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(max(h.Timeout, 0), DefaultHookTimeout))
	defer cancel()
	cmd := exec.CommandContext(ctx, h.Path, h.Args...)
	cmd.Env = append(os.Environ(),
		"USHER_EVENT="+event,
		"USHER_SESSION_ID="+s.ID,
		"USHER_USER="+s.User,
		"USHER_RESOURCE="+s.Resource,
		"USHER_COMMAND_LINE="+s.CommandLine,
	)
	if s.Display != "" {
		cmd.Env = append(append(cmd.Env, "USHER_DISPLAY="+s.Display), s.DisplayEnv...)
	}
	cmd.WaitDelay = time.Second
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		if tail := strings.TrimSpace(out.String()); tail != "" {
			return fmt.Errorf("session command %s: %w: %s", h.Path, err, tail)
		}
		return fmt.Errorf("session command %s: %w", h.Path, err)
	}
	return nil
}

// tailBuffer keeps the last bytes written to it, for error messages.
type tailBuffer struct{ b []byte }

const tailSize = 512

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailSize {
		t.b = t.b[len(t.b)-tailSize:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(bytes.ToValidUTF8(t.b, []byte("?"))) }
