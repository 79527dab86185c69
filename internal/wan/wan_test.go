package wan

import (
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestVersionIsGoMods: the version the reports name is the toxiproxy
// module that go.mod requires.
func TestVersionIsGoMods(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/Shopify/toxiproxy/v2" {
			if f[1] != Version {
				t.Fatalf("Version is %s; go.mod requires toxiproxy %s", Version, f[1])
			}
			return
		}
	}
	t.Fatal("go.mod requires no toxiproxy")
}

// echo serves connections that send back what they get, until the test
// ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// TestWANAddsTheRTT: a round trip through the WAN takes the RTT set, on a
// connection made before it was set; the RTT changes under traffic
// (go test -race checks that the change does not race with the pipes).
func TestWANAddsTheRTT(t *testing.T) {
	w, err := Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c, err := net.Dial("tcp", w.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d := roundTrip(t, c); d > 15*time.Millisecond {
		t.Errorf("no latency: a round trip took %v", d)
	}
	if err := w.SetRTT(30 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := roundTrip(t, c); d < 30*time.Millisecond || d > 200*time.Millisecond {
		t.Errorf("RTT 30 ms: a round trip took %v", d)
	}
	for i := range 20 {
		if err := w.SetRTT(time.Duration(1+i%3) * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		roundTrip(t, c)
	}
	if err := w.SetRTT(0); err != nil {
		t.Fatal(err)
	}
	if d := roundTrip(t, c); d > 15*time.Millisecond {
		t.Errorf("back to RTT 0: a round trip took %v", d)
	}
	if err := w.SetRTT(1500 * time.Microsecond); err == nil {
		t.Error("an RTT of 1.5 ms was taken")
	}
}
