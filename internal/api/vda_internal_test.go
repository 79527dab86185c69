package api

import (
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
