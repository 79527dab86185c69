package server

import (
	"net"
	"os"
	"strings"
	"testing"
)

// TestAdvertise: the address other brokers reach this one at is the
// configured one, else the listener's, with the host's name for a
// wildcard host, which a peer could not dial.
func TestAdvertise(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip("no host name:", err)
	}
	for _, tc := range []struct{ configured, listen, want string }{
		{"", "127.0.0.1:8080", "127.0.0.1:8080"},
		{"", "10.1.2.3:8080", "10.1.2.3:8080"},
		{"", "0.0.0.0:8080", net.JoinHostPort(host, "8080")},
		{"", "[::]:8080", net.JoinHostPort(host, "8080")},
		{"broker-1.example:443", "[::]:8080", "broker-1.example:443"},
	} {
		got, err := advertise(tc.configured, tc.listen)
		if err != nil || got != tc.want {
			t.Errorf("advertise(%q, %q) = %q, %v; want %q", tc.configured, tc.listen, got, err, tc.want)
		}
	}
	for _, bad := range []string{"broker-1", ":8080", "0.0.0.0:8080", "[::]:8080", "host:"} {
		_, err := Config{DataDir: t.TempDir(), Advertise: bad}.withDefaults()
		if err == nil || !strings.Contains(err.Error(), "advertised address") {
			t.Errorf("Advertise %q: %v, want it refused", bad, err)
		}
	}
}
