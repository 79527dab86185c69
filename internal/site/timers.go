package site

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Duration is a span of time written as Go writes durations ("15m",
// "1h30m", "0" for none) in site files and the API.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String writes d without zero trailing units: "15m", "1h", "1h30m".
func (d Duration) String() string {
	if d == 0 {
		return "0"
	}
	s := time.Duration(d).String()
	s = strings.TrimSuffix(s, "m0s")
	if strings.HasSuffix(time.Duration(d).String(), "m0s") {
		s += "m"
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalText writes d as String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a duration such as "15m" or "1h30m"; "0" and ""
// are none.
func (d *Duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration like 15m, 8h or 1h30m", s)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON reads a JSON string as UnmarshalText does. What is not a
// duration is a *json.UnmarshalTypeError whose Value quotes it, so that
// the decoder names the field.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[Duration]()}
	}
	if err := d.UnmarshalText([]byte(s)); err != nil {
		return &json.UnmarshalTypeError{Value: fmt.Sprintf("%q", s), Type: reflect.TypeFor[Duration]()}
	}
	return nil
}

// MaxSessionTimer is the longest session timer: 30 days.
const MaxSessionTimer = 30 * 24 * time.Hour

// SessionTimers are a delivery group's session timers, each off at 0.
// They are Citrix's session policies of the same purpose:
//
//   - IdleDisconnect, Citrix's "Session idle timer": the VDA disconnects a
//     session whose viewer sent no input for so long.
//   - DisconnectedLogoff, Citrix's "Disconnected session timer": the
//     brokers log off a session disconnected for so long.
//   - MaxSession, Citrix's "Session connection timer" (maximum session
//     time): the brokers log off a session so long after it was brokered.
type SessionTimers struct {
	IdleDisconnect     Duration `json:"idle_disconnect,omitempty" yaml:"idle_disconnect,omitempty"`
	DisconnectedLogoff Duration `json:"disconnected_logoff,omitempty" yaml:"disconnected_logoff,omitempty"`
	MaxSession         Duration `json:"max_session,omitempty" yaml:"max_session,omitempty"`
}

// validate checks each timer: whole seconds from 0 to MaxSessionTimer.
func (t SessionTimers) validate(group string) error {
	for _, f := range []struct {
		name string
		d    Duration
	}{
		{"session_timers.idle_disconnect", t.IdleDisconnect},
		{"session_timers.disconnected_logoff", t.DisconnectedLogoff},
		{"session_timers.max_session", t.MaxSession},
	} {
		switch {
		case f.d < 0:
			return invalid(KindDeliveryGroup, group, "%s %s is negative; use 0 for no timer", f.name, f.d).At(f.name)
		case f.d.Std() > MaxSessionTimer:
			return invalid(KindDeliveryGroup, group, "%s %s is longer than 30 days (720h)", f.name, f.d).At(f.name)
		case f.d.Std()%time.Second != 0:
			return invalid(KindDeliveryGroup, group, "%s %s is not a whole number of seconds", f.name, f.d).At(f.name)
		}
	}
	return nil
}
