package vdacontrol_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/broker/vdacontrol"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

func TestPrepareSendsTheTicketHash(t *testing.T) {
	var got vdaproto.PrepareRequest
	var raw, auth, path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, auth = r.URL.Path, r.Header.Get("Authorization")
		b, _ := io.ReadAll(r.Body)
		raw = string(b)
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("prepare body %s: %v", b, err)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	exp := time.Date(2025, 6, 30, 12, 0, 0, 0, time.UTC)
	p := broker.Prepare{SessionID: "s1", User: "alice", Resource: "calc", CommandLine: "calc.exe", Reconnect: true,
		Ticket: "the-ticket", ExpiresAt: exp, IdleDisconnect: 15 * time.Minute}
	if err := vdacontrol.New().Prepare(context.Background(), broker.Control{URL: srv.URL + "/vda/m1/", Token: "tok"}, p); err != nil {
		t.Fatal(err)
	}
	want := vdaproto.PrepareRequest{SessionID: "s1", User: "alice", Resource: "calc", CommandLine: "calc.exe", Reconnect: true,
		TicketHash: vdaproto.TicketHash("the-ticket"), ExpiresAt: exp, IdleDisconnectMS: 15 * 60 * 1000}
	if got != want {
		t.Errorf("prepare = %+v, want %+v", got, want)
	}
	if strings.Contains(raw, "the-ticket") {
		t.Errorf("the ticket itself went to the VDA: %s", raw)
	}
	if path != "/vda/m1"+vdaproto.PathPrepare || auth != "Bearer tok" {
		t.Errorf("posted to %q with %q", path, auth)
	}
}

func TestRefusalIsAnError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
		w.Write([]byte(`{"error":{"code":"conflict","message":"no such session"}}`))
	}))
	defer srv.Close()
	err := vdacontrol.New().Logoff(context.Background(), broker.Control{URL: srv.URL, Token: "tok"}, "s1")
	if err == nil || !strings.Contains(err.Error(), "no such session") {
		t.Fatalf("Logoff = %v, want the VDA's refusal", err)
	}
	if err := vdacontrol.New().Disconnect(context.Background(), broker.Control{}, "s1"); err == nil {
		t.Fatal("Disconnect without a control URL succeeded")
	}
}

// TestNoSuchSession: a VDA's 404 not_found is broker.ErrNoSuchSession; a
// 404 without that code (a wrong control URL, say) is not.
func TestNoSuchSession(t *testing.T) {
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{"error":{"code":"not_found","message":"no session \"s1\" to reconnect to"}}`, true},
		{`404 page not found`, false},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(tc.body))
		}))
		err := vdacontrol.New().Prepare(context.Background(), broker.Control{URL: srv.URL, Token: "tok"}, broker.Prepare{SessionID: "s1", Reconnect: true})
		srv.Close()
		if err == nil || errors.Is(err, broker.ErrNoSuchSession) != tc.want {
			t.Errorf("404 %q: %v; want ErrNoSuchSession %v", tc.body, err, tc.want)
		}
	}
}
