package site_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

func TestDurationText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		out  string
	}{
		{"0", 0, "0"},
		{"", 0, "0"},
		{"15m", 15 * time.Minute, "15m"},
		{"1h", time.Hour, "1h"},
		{"90m", 90 * time.Minute, "1h30m"},
		{"45s", 45 * time.Second, "45s"},
		{"1m30s", 90 * time.Second, "1m30s"},
		{"720h", 720 * time.Hour, "720h"},
	} {
		var d site.Duration
		if err := d.UnmarshalText([]byte(tc.in)); err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if d.Std() != tc.want {
			t.Fatalf("%q is %v, want %v", tc.in, d.Std(), tc.want)
		}
		if got := d.String(); got != tc.out {
			t.Fatalf("%v writes %q, want %q", tc.want, got, tc.out)
		}
	}
	var d site.Duration
	if err := d.UnmarshalText([]byte("15")); err == nil || !strings.Contains(err.Error(), "not a duration") {
		t.Fatalf("15 without a unit: %v", err)
	}
}

func TestSessionTimersJSON(t *testing.T) {
	g := site.NewDeliveryGroup("g")
	b, _ := json.Marshal(g)
	if strings.Contains(string(b), "session_timers") {
		t.Fatalf("timers off are written: %s", b)
	}
	g.SessionTimers = site.SessionTimers{IdleDisconnect: site.Duration(15 * time.Minute), MaxSession: site.Duration(8 * time.Hour)}
	b, _ = json.Marshal(g)
	if !strings.Contains(string(b), `"session_timers":{"idle_disconnect":"15m","max_session":"8h"}`) {
		t.Fatalf("written as %s", b)
	}
	var back site.DeliveryGroup
	if err := json.Unmarshal(b, &back); err != nil || back.SessionTimers != g.SessionTimers {
		t.Fatalf("read back %+v, %v", back.SessionTimers, err)
	}
}

func TestSessionTimersValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		t     site.SessionTimers
		field string
		msg   string
	}{
		{"negative", site.SessionTimers{IdleDisconnect: site.Duration(-time.Minute)}, "session_timers.idle_disconnect", "negative"},
		{"too long", site.SessionTimers{DisconnectedLogoff: site.Duration(31 * 24 * time.Hour)}, "session_timers.disconnected_logoff", "longer than 30 days"},
		{"fraction of a second", site.SessionTimers{MaxSession: site.Duration(1500 * time.Millisecond)}, "session_timers.max_session", "whole number of seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := site.NewDeliveryGroup("dg")
			g.SessionTimers = tc.t
			err := g.Validate()
			if err == nil {
				t.Fatal("validated")
			}
			if got := site.ErrorField(err, site.KindDeliveryGroup, "dg"); got != tc.field {
				t.Fatalf("field %q, want %q (%v)", got, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("message %q names neither %s nor %q", err, tc.field, tc.msg)
			}
		})
	}
	g := site.NewDeliveryGroup("dg")
	g.SessionTimers = site.SessionTimers{IdleDisconnect: site.Duration(time.Minute), DisconnectedLogoff: site.Duration(site.MaxSessionTimer), MaxSession: site.Duration(8 * time.Hour)}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
}
