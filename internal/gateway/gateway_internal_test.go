package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

type noResolver struct{}

func (noResolver) Resolve(context.Context, string, string) (Target, error) {
	return Target{}, site.NotFound(site.KindSession, "x")
}

func newTest(t *testing.T, mod func(*Config)) *Gateway {
	t.Helper()
	cfg := Config{Resolver: noResolver{}, Authenticate: func(*http.Request) (string, error) { return "u", nil }}
	if mod != nil {
		mod(&cfg)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

func TestAgentURL(t *testing.T) {
	const pin = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	tests := []struct {
		name, url, pin string
		plain          bool
		want           string
		err            error
	}{
		{name: "https pinned", url: "https://vda-01.example:9443", pin: pin, want: "wss://vda-01.example:9443/display"},
		{name: "https with a path", url: "https://vda-01.example:9443/agent/", want: "wss://vda-01.example:9443/agent/display"},
		{name: "query and user dropped", url: "https://me:pw@vda-01.example/?host=evil#x", want: "wss://vda-01.example/display"},
		{name: "clear on loopback", url: "http://127.0.0.1:7001", want: "ws://127.0.0.1:7001/display"},
		{name: "clear off loopback", url: "http://10.0.0.5:7001", err: ErrPlainAgent},
		{name: "clear off loopback, allowed", url: "http://10.0.0.5:7001", plain: true, want: "ws://10.0.0.5:7001/display"},
		{name: "clear with a pin", url: "http://127.0.0.1:7001", pin: pin, err: errAny},
		{name: "not http", url: "file:///etc/passwd", err: errAny},
		{name: "no host", url: "https:///display", err: errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTest(t, func(c *Config) { c.AllowPlain = tt.plain })
			u, err := g.agentURL(Target{Machine: "m", URL: tt.url, Pin: tt.pin})
			switch {
			case tt.err == nil && err != nil:
				t.Fatalf("agentURL: %v", err)
			case tt.err == nil && u.String() != tt.want:
				t.Fatalf("agentURL: %s, want %s", u, tt.want)
			case tt.err == errAny && err == nil, tt.err != nil && tt.err != errAny && !errors.Is(err, tt.err):
				t.Fatalf("agentURL: %v, %v; want %v", u, err, tt.err)
			}
		})
	}
}

var errAny = errors.New("any error")

// TestDialWrongCertificate: an agent whose listener shows another
// certificate than the pinned one gets no ticket: the handshake fails
// before any request.
func TestDialWrongCertificate(t *testing.T) {
	var asked atomic.Bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { asked.Store(true) }))
	defer srv.Close()
	g := newTest(t, nil)
	// Another certificate's pin (httptest's servers share theirs).
	pin := strings.Repeat("0", len(tlsconf.Fingerprint(srv.Certificate().Raw)))
	_, err := g.dial(t.Context(), Target{Machine: "m", URL: srv.URL, Pin: pin}, "ticket")
	if !errors.Is(err, ErrWrongCertificate) || asked.Load() {
		t.Fatalf("dial: %v (request made: %v), want ErrWrongCertificate before any request", err, asked.Load())
	}
	if got := unreachableReason(err); !strings.Contains(got, "another certificate") {
		t.Errorf("reason %q", got)
	}
}

func TestOrigin(t *testing.T) {
	g := newTest(t, func(c *Config) { c.AllowedOrigins = []string{"https://Portal.Example"} })
	for _, tc := range []struct {
		origin []string
		host   string
		ok     bool
	}{
		{nil, "usher.test", true},
		{[]string{"http://usher.test"}, "usher.test", true},
		{[]string{"http://USHER.test"}, "usher.test", true},
		{[]string{"https://usher.test"}, "usher.test", false}, // the request came in clear
		{[]string{"http://usher.test:8080"}, "usher.test", false},
		{[]string{"https://portal.example"}, "usher.test", true},
		{[]string{"https://portal.example/path"}, "usher.test", false},
		{[]string{"null"}, "usher.test", false},
		{[]string{"http://usher.test", "http://usher.test"}, "usher.test", false},
	} {
		r := httptest.NewRequest("GET", "http://"+tc.host+"/", nil)
		for _, o := range tc.origin {
			r.Header.Add("Origin", o)
		}
		if got := g.originAllowed(r); got != tc.ok {
			t.Errorf("Origin %q at %s: allowed %v, want %v", tc.origin, tc.host, got, tc.ok)
		}
	}
	if _, err := New(Config{Resolver: noResolver{}, Authenticate: func(*http.Request) (string, error) { return "", nil },
		AllowedOrigins: []string{"portal.example"}}); err == nil {
		t.Error("an allowed origin without a scheme was taken")
	}
}

func TestCloseReason(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	got := closeReason(long)
	if len(got) > 123 || !utf8.ValidString(got) || !strings.HasPrefix(long, got) || len(got) < 122 {
		t.Errorf("closeReason cut %d bytes to %d (valid %v)", len(long), len(got), utf8.ValidString(got))
	}
	if got := closeReason("short"); got != "short" {
		t.Errorf("closeReason(short) = %q", got)
	}
}

// TestLimiterHoldsUnderConcurrency: many reservations at once get
// exactly the bounds, per user and in all, and releases free them.
func TestLimiterHoldsUnderConcurrency(t *testing.T) {
	l := newLimiter(10, 3)
	var mu sync.Mutex
	got := map[string]int{}
	var releases []func()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 64 {
		user := []string{"a", "b", "c", "d", "e"}[i%5]
		wg.Go(func() {
			<-start
			release, err := l.reserve(user)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			got[user]++
			releases = append(releases, release)
		})
	}
	close(start)
	wg.Wait()
	n := 0
	for user, k := range got {
		if k > 3 {
			t.Errorf("user %s holds %d, over the bound of 3", user, k)
		}
		n += k
	}
	if n != 10 || l.count() != 10 {
		t.Errorf("%d reserved (count %d), want the total bound 10", n, l.count())
	}
	for _, r := range releases {
		r()
		r() // a second release gives nothing back twice
	}
	if l.count() != 0 {
		t.Errorf("%d reserved after every release", l.count())
	}
}
