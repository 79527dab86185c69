package peer

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func mustKey(tb testing.TB, b byte) Key {
	tb.Helper()
	k, err := NewKey(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// clock is a settable clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestVerify(t *testing.T) {
	key := mustKey(t, 1)
	start := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	body := []byte(`{"user":"alice","resource":"Desktop"}`)
	tests := []struct {
		name string
		// token is issued by, op/body/at the request as received at "b".
		key      Key
		to, op   string
		issued   time.Duration // from now
		recvOp   string
		recvBody []byte
		want     error
	}{
		{name: "taken", key: key, to: "b", op: "launch", recvOp: "launch", recvBody: body},
		{name: "for another broker", key: key, to: "c", op: "launch", recvOp: "launch", recvBody: body, want: ErrWrongReceiver},
		{name: "for another operation", key: key, to: "b", op: "launch", recvOp: "logoff", recvBody: body, want: ErrWrongOp},
		{name: "for another body", key: key, to: "b", op: "launch", recvOp: "launch", recvBody: []byte(`{"user":"bob"}`), want: ErrWrongBody},
		{name: "signed with another key", key: mustKey(t, 2), to: "b", op: "launch", recvOp: "launch", recvBody: body, want: ErrForged},
		{name: "expired", key: key, to: "b", op: "launch", issued: -TokenTTL - ClockSkew - time.Millisecond, recvOp: "launch", recvBody: body, want: ErrExpired},
		{name: "old but within skew", key: key, to: "b", op: "launch", issued: -TokenTTL - ClockSkew, recvOp: "launch", recvBody: body},
		{name: "from the near future", key: key, to: "b", op: "launch", issued: ClockSkew, recvOp: "launch", recvBody: body},
		{name: "from the far future", key: key, to: "b", op: "launch", issued: ClockSkew + time.Millisecond, recvOp: "launch", recvBody: body, want: ErrExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{start}
			v := NewVerifier(key, "b", c.now)
			token, _ := tt.key.IssueFor("a", tt.to, v.Run(), tt.op, body, start.Add(tt.issued))
			_, err := v.Verify(token, tt.recvOp, tt.recvBody)
			if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Fatalf("Verify: %v, want %v", err, tt.want)
			}
		})
	}
}

// TestTokensBoundToTheRun: a broker's replay cache lives as long as its
// process, so a token for an operation is bound to the receiver's run,
// which only its state handshake (taken by any run) tells: a token taken
// by one run of a broker is refused by the next, even within its life.
func TestTokensBoundToTheRun(t *testing.T) {
	key := mustKey(t, 1)
	c := &clock{time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)}
	first := NewVerifier(key, "b", c.now)
	body := []byte(`{"user":"alice","resource":"Desktop"}`)
	token, _ := key.IssueFor("a", "b", first.Run(), OpLaunch, body, c.t)
	if _, err := first.Verify(token, OpLaunch, body); err != nil {
		t.Fatal(err)
	}
	// "b" restarts: a new Verifier, an empty replay cache.
	c.t = c.t.Add(time.Second)
	next := NewVerifier(key, "b", c.now)
	if next.Run() == first.Run() || next.Run() == "" {
		t.Fatalf("runs %q and %q", first.Run(), next.Run())
	}
	if _, err := next.Verify(token, OpLaunch, body); !errors.Is(err, ErrOtherRun) {
		t.Fatalf("the last run's token at the next run: %v, want ErrOtherRun", err)
	}
	unbound, _ := key.Issue("a", "b", OpLaunch, body, c.t)
	if _, err := next.Verify(unbound, OpLaunch, body); !errors.Is(err, ErrOtherRun) {
		t.Fatalf("a launch token for no run: %v, want ErrOtherRun", err)
	}
	// The handshake needs no run; the run it tells opens the rest.
	state, _ := key.Issue("a", "b", OpState, []byte(`{}`), c.t)
	if _, err := next.Verify(state, OpState, []byte(`{}`)); err != nil {
		t.Fatalf("the state handshake: %v", err)
	}
	fresh, _ := key.IssueFor("a", "b", next.Run(), OpLaunch, body, c.t)
	if _, err := next.Verify(fresh, OpLaunch, body); err != nil {
		t.Fatalf("a token for the new run: %v", err)
	}
}

func TestVerifyTakesATokenOnce(t *testing.T) {
	key := mustKey(t, 1)
	c := &clock{time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)}
	v := NewVerifier(key, "b", c.now)
	body := []byte(`{}`)
	token, _ := key.Issue("a", "b", "state", body, c.t)
	if _, err := v.Verify(token, "state", body); err != nil {
		t.Fatal(err)
	}
	// Again at once, and at the last moment of its life: refused as used.
	for _, later := range []time.Duration{0, TokenTTL + ClockSkew} {
		c.t = c.t.Add(later)
		if _, err := v.Verify(token, "state", body); !errors.Is(err, ErrReplayed) {
			t.Fatalf("token used again %v later: %v, want ErrReplayed", later, err)
		}
	}
	// Past its life: refused as expired, and forgotten.
	c.t = c.t.Add(time.Millisecond)
	other, _ := key.Issue("a", "b", "state", body, c.t)
	if _, err := v.Verify(other, "state", body); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(token, "state", body); !errors.Is(err, ErrExpired) {
		t.Fatalf("token used again after its life: %v, want ErrExpired", err)
	}
}

func TestVerifierBounded(t *testing.T) {
	key := mustKey(t, 1)
	c := &clock{time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)}
	v := NewVerifier(key, "b", c.now)
	v.max = 8
	body := []byte(`{}`)
	for i := range 8 {
		token, _ := key.Issue("a", "b", "state", body, c.t)
		if _, err := v.Verify(token, "state", body); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
	token, _ := key.Issue("a", "b", "state", body, c.t)
	if _, err := v.Verify(token, "state", body); !errors.Is(err, ErrBusy) {
		t.Fatalf("a token past the cache's bound: %v, want ErrBusy", err)
	}
	// Once the tokens taken have expired, new ones are taken again.
	c.t = c.t.Add(TokenTTL + ClockSkew + time.Millisecond)
	token, _ = key.Issue("a", "b", "state", body, c.t)
	if _, err := v.Verify(token, "state", body); err != nil {
		t.Fatalf("a token once the cache emptied: %v", err)
	}
	if got := v.seenLen(); got != 1 {
		t.Errorf("replay cache holds %d IDs, want 1", got)
	}
}

func TestParseTokenRefusesMalformed(t *testing.T) {
	key := mustKey(t, 1)
	good, _ := key.Issue("a", "b", "state", nil, time.Now())
	for _, s := range []string{"", "p1.", "p1.x", "p1.x.y", good[3:], "p2." + good[3:], good + "x", good + ".x",
		"p1." + strings.Repeat("A", maxToken)} {
		if _, _, _, err := ParseToken(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseToken(%.40q): %v, want ErrMalformed", s, err)
		}
	}
}

// FuzzParseToken: no input makes the parser panic, and whatever it takes
// verifies only if it was issued under the key.
func FuzzParseToken(f *testing.F) {
	key := mustKey(f, 1)
	now := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	good, _ := key.Issue("a", "b", "launch", []byte(`{}`), now)
	f.Add(good)
	f.Add("p1.e30.AAAA")
	f.Add("p1." + strings.Repeat(".", 10))
	f.Add(`p1.eyJpc3MiOiJhIn0.` + strings.Repeat("A", 43))
	f.Fuzz(func(t *testing.T, s string) {
		tok, payload, sig, err := ParseToken(s)
		if err != nil {
			return
		}
		if tok.From == "" || tok.To == "" || tok.Op == "" || len(sig) != 32 || payload == "" {
			t.Fatalf("ParseToken(%q) took %+v", s, tok)
		}
		v := NewVerifier(mustKey(t, 2), tok.To, func() time.Time { return time.UnixMilli(tok.Issued) })
		if _, err := v.Verify(s, tok.Op, nil); !errors.Is(err, ErrForged) {
			t.Fatalf("a token not issued under the key: %v", err)
		}
	})
}
