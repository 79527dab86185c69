package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/server"
)

// openSite opens a demo site on loopback for agents to enrol with.
func openSite(t *testing.T) *server.Server {
	t.Helper()
	srv, err := server.Open(context.Background(), server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true,
		DemoPassword: "demo-pass-1", HeartbeatInterval: 200 * time.Millisecond, AllowVDAAddressChange: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// exited waits for the agent to exit and returns its status.
func (p *vdaProc) exited(t *testing.T) int {
	t.Helper()
	select {
	case code := <-p.done:
		p.done <- code // for the cleanup
		return code
	case <-time.After(60 * time.Second):
		t.Fatalf("usher vda kept running: %s", p.stderr.String())
	}
	return -1
}

// TestVDARefusesPlainListenerOffLoopback: without TLS, the default
// control listener (:8490, every address) and any other off loopback are
// refused before the agent listens, with a message that says what to
// pass; with --insecure-listen the agent starts, and warns.
func TestVDARefusesPlainListenerOffLoopback(t *testing.T) {
	srv := openSite(t)
	_, secretFile := srv.EnrolmentSecret()
	base := []string{"--broker", srv.URL(), "--machine", "office-vda-01", "--enrolment-secret-file", secretFile,
		"--address", "127.0.0.1:3389"}
	for name, listen := range map[string][]string{
		"default :8490": nil,
		"wildcard":      {"--listen", ":0"},
		"all IPv4":      {"--listen", "0.0.0.0:0"},
	} {
		t.Run(name, func(t *testing.T) {
			p := startVDA(t, append(base, listen...)...)
			if code := p.exited(t); code != 2 {
				t.Fatalf("exit status %d, want 2 (usage): %s", code, p.stderr.String())
			}
			msg := p.stderr.String()
			for _, want := range []string{"not a loopback address and no TLS", "--tls-cert and --tls-key", "--insecure-listen"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the refusal does not say %q: %s", want, msg)
				}
			}
		})
	}

	t.Run("insecure-listen", func(t *testing.T) {
		p := startVDA(t, append(base, "--listen", ":0", "--insecure-listen")...)
		p.controlURL(t)
		if msg := p.stderr.String(); !strings.Contains(msg, "WARNING: the control listener :0 speaks clear HTTP off loopback") {
			t.Fatalf("no loud warning: %s", msg)
		}
		if code := p.stop(t); code != 0 {
			t.Fatalf("exit status %d: %s", code, p.stderr.String())
		}
	})
}
