package api

import (
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

func TestSessionChange(t *testing.T) {
	for _, tc := range []struct {
		event string
		want  broker.SessionChange
	}{
		{vdaproto.EventLogon, broker.ChangeLogon},
		{vdaproto.EventDisconnect, broker.ChangeDisconnect},
		{vdaproto.EventReconnect, broker.ChangeReconnect},
		{vdaproto.EventLogoff, broker.ChangeLogoff},
		{"explode", "explode"}, // the broker refuses it
	} {
		if got := sessionChange(tc.event); got != tc.want {
			t.Errorf("sessionChange(%q) = %q, want %q", tc.event, got, tc.want)
		}
	}
}

func TestHeartbeatCarriesUsage(t *testing.T) {
	hb := vdaproto.Heartbeat{Machine: "m", Sessions: 1, LogonsInProgress: 2, CPUPercent: 3, MemoryPercent: 4, MemoryUsedMB: 5, MemoryTotalMB: 6}
	want := broker.Heartbeat{Machine: "m", Usage: site.Usage{Sessions: 1, LogonsInProgress: 2, CPUPercent: 3, MemoryPercent: 4, MemoryUsedMB: 5, MemoryTotalMB: 6}}
	if got := heartbeat(hb); got != want {
		t.Errorf("heartbeat(%+v) = %+v, want %+v", hb, got, want)
	}
}

func TestNotRegisteredCode(t *testing.T) {
	if got, want := site.ErrorCode(broker.ErrNotRegistered), vdaproto.CodeNotRegistered; got != want {
		t.Errorf("broker.ErrNotRegistered has code %q, the VDA protocol %q", got, want)
	}
}

func TestCheckControl(t *testing.T) {
	pin := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		url, pin string
		ok       bool
	}{
		{"http://127.0.0.1:8490", "", true},
		{"https://vda-1.example:8490", "", true},
		{"https://vda-1.example:8490", pin, true},
		{"https://10.0.0.7:8490/vda/m1", pin, true},
		{"http://vda-1.example:8490", pin, false}, // a pin needs TLS
		{"https://vda-1.example:8490", strings.ToUpper(pin), false},
		{"https://vda-1.example:8490", pin[:62], false},
		{"https://vda-1.example:8490", pin + "00", false},
		{"ftp://vda-1.example", "", false},
		{"https://", "", false},
		{"https://user:pw@vda-1.example", "", false},
	} {
		err := checkControl(tc.url, tc.pin)
		if (err == nil) != tc.ok {
			t.Errorf("checkControl(%q, %q) = %v, want ok %v", tc.url, tc.pin, err, tc.ok)
		}
		if err != nil && site.ErrorCode(err) != site.EInvalid {
			t.Errorf("checkControl(%q, %q): code %q, want %q", tc.url, tc.pin, site.ErrorCode(err), site.EInvalid)
		}
	}
}

// TestRegistrationCarriesThePin: the control pin a VDA registers reaches
// the broker with its control URL and token.
func TestRegistrationCarriesThePin(t *testing.T) {
	pin := strings.Repeat("0f", 32)
	reg := registration(vdaproto.RegisterRequest{Machine: "m", ControlURL: "https://m:8490", ControlToken: "t", ControlPin: pin})
	if want := (broker.Control{Machine: "m", URL: "https://m:8490", Token: "t", Pin: pin}); reg.Control != want {
		t.Errorf("control %+v, want %+v", reg.Control, want)
	}
}

// FuzzCheckControl: checkControl accepts a pin only with an https URL and
// as vdaproto.ValidPin does, and says invalid for whatever it refuses.
func FuzzCheckControl(f *testing.F) {
	f.Add("https://vda-1:8490", strings.Repeat("ab", 32))
	f.Add("http://127.0.0.1:8490", "")
	f.Add("ftp://x", "zz")
	f.Fuzz(func(t *testing.T, controlURL, pin string) {
		err := checkControl(controlURL, pin)
		if err != nil {
			if site.ErrorCode(err) != site.EInvalid {
				t.Fatalf("checkControl(%q, %q): code %q", controlURL, pin, site.ErrorCode(err))
			}
			return
		}
		if pin != "" && (!vdaproto.ValidPin(pin) || !strings.HasPrefix(strings.ToLower(controlURL), "https:")) {
			t.Fatalf("checkControl(%q, %q) accepted a pin without https or of the wrong form", controlURL, pin)
		}
	})
}
