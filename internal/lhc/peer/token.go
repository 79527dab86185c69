package peer

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// How long a peer token lives, and how far brokers' clocks may disagree.
const (
	// TokenTTL is a token's life from its issue: a request is sent at
	// once, and a token lives only as long as its request may take to
	// arrive.
	TokenTTL = 30 * time.Second
	// ClockSkew is how far apart the clocks of two brokers may be: a
	// token issued up to ClockSkew in the receiver's future is taken, and
	// one issued up to TokenTTL+ClockSkew in its past. Brokers farther
	// apart (run NTP) refuse each other's tokens as expired.
	ClockSkew = 5 * time.Second
	// MaxSeen bounds the replay cache: the IDs of tokens taken within
	// the last TokenTTL+2*ClockSkew. A receiver that has taken more
	// refuses new tokens (EUnavailable: retry) rather than forget one.
	MaxSeen = 1 << 17
	// maxToken bounds a token's length before it is parsed.
	maxToken    = 2048
	tokenPrefix = "p1."
)

// Token errors; Verifier.Verify wraps one of them, and the receiver
// answers any with 401 (ErrBusy and ErrOtherRun with 503).
var (
	ErrMalformed     = errors.New("malformed peer token")
	ErrForged        = errors.New("peer token not signed with the site's peer key")
	ErrWrongReceiver = errors.New("peer token for another broker")
	ErrWrongOp       = errors.New("peer token for another operation")
	ErrWrongBody     = errors.New("peer token for another request body")
	ErrExpired       = errors.New("peer token expired or from the future (brokers' clocks apart?)")
	ErrReplayed      = errors.New("peer token used before")
	ErrBusy          = errors.New("too many peer tokens taken lately")
	// ErrOtherRun: the token is bound to another run of the receiver
	// (its replay cache is the process's, so a token its last run took
	// would be new to it); the caller asks its state again, which
	// tells the run, and retries.
	ErrOtherRun = errors.New("peer token for another run of this broker (it restarted): retry")
)

// Token is what a peer request's bearer token asserts: that From, which
// holds the site's peer key, sends To the request Op with the body whose
// SHA-256 is Body, at Issued, once (ID).
type Token struct {
	From string `json:"iss"`
	To   string `json:"aud"`
	// Run is the receiver's run (its State's Run) that the token is
	// for; empty on the state handshake, which every run takes.
	Run string `json:"run,omitempty"`
	Op  string `json:"op"`
	// Body is the base64url SHA-256 of the request body.
	Body string `json:"body"`
	// Issued is in Unix milliseconds.
	Issued int64 `json:"iat"`
	// ID is 16 random bytes, base64url: the token's one use, and the
	// challenge that the receiver's answer proof covers.
	ID string `json:"jti"`
}

// Key holds the keys of the peer protocol, derived from the site's peer
// key (auth.Signer.Derive("peer")): one for tokens, one for answer
// proofs, so that no answer ever verifies as a token, one for sealing
// handovers.
type Key struct {
	token, proof, seal []byte
}

// NewKey derives the protocol's keys from the peer key, which must be at
// least 32 bytes.
func NewKey(peerKey []byte) (Key, error) {
	if len(peerKey) < 32 {
		return Key{}, fmt.Errorf("peer key is %d bytes, need at least 32", len(peerKey))
	}
	sub := func(label string) []byte {
		m := hmac.New(sha256.New, peerKey)
		m.Write([]byte("usher-peer-v1\x00" + label))
		return m.Sum(nil)
	}
	return Key{token: sub("token"), proof: sub("proof"), seal: sub("seal")}, nil
}

// mac is HMAC-SHA256 under key of the fields, each length-prefixed so
// that no two lists of fields read alike.
func mac(key []byte, fields ...string) []byte {
	m := hmac.New(sha256.New, key)
	var n [binary.MaxVarintLen64]byte
	for _, f := range fields {
		m.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
		m.Write([]byte(f))
	}
	return m.Sum(nil)
}

// Digest is the Body of a token for a request body.
func Digest(body []byte) string {
	sum := sha256.Sum256(body)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// nonce returns n random bytes, base64url.
func nonce(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Issue returns the token for from to send to the op with body, issued
// at now, and the token's ID, for no particular run of the receiver (as
// the state handshake is sent).
func (k Key) Issue(from, to, op string, body []byte, now time.Time) (token, id string) {
	return k.IssueFor(from, to, "", op, body, now)
}

// IssueFor is Issue for the receiver's run that its State named.
func (k Key) IssueFor(from, to, run, op string, body []byte, now time.Time) (token, id string) {
	t := Token{From: from, To: to, Run: run, Op: op, Body: Digest(body), Issued: now.UnixMilli(), ID: nonce(16)}
	payload, _ := json.Marshal(t)
	p := base64.RawURLEncoding.EncodeToString(payload)
	return tokenPrefix + p + "." + base64.RawURLEncoding.EncodeToString(mac(k.token, "token", p)), t.ID
}

// ParseToken reads a token's claims and signature without checking
// either: ErrMalformed unless s is a token's form, with every claim set.
func ParseToken(s string) (t Token, payload string, sig []byte, err error) {
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok || len(s) > maxToken {
		return Token{}, "", nil, ErrMalformed
	}
	payload, sigText, ok := strings.Cut(rest, ".")
	if !ok {
		return Token{}, "", nil, ErrMalformed
	}
	if sig, err = base64.RawURLEncoding.DecodeString(sigText); err != nil || len(sig) != sha256.Size {
		return Token{}, "", nil, ErrMalformed
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return Token{}, "", nil, ErrMalformed
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil || dec.More() {
		return Token{}, "", nil, ErrMalformed
	}
	if t.From == "" || t.To == "" || t.Op == "" || t.Issued <= 0 {
		return Token{}, "", nil, ErrMalformed
	}
	if id, err := base64.RawURLEncoding.DecodeString(t.ID); err != nil || len(id) != 16 {
		return Token{}, "", nil, ErrMalformed
	}
	if d, err := base64.RawURLEncoding.DecodeString(t.Body); err != nil || len(d) != sha256.Size {
		return Token{}, "", nil, ErrMalformed
	}
	return t, payload, sig, nil
}

// Verifier checks the tokens of requests to one broker, and takes each
// once. It is safe for concurrent use.
type Verifier struct {
	key  Key
	self string
	now  func() time.Time
	// run names this Verifier's run of the broker: every operation but
	// the state handshake (which tells it) takes only tokens of this run.
	run string

	mu sync.Mutex
	// seen holds the IDs taken, until they would expire anyway; at most
	// max of them.
	seen  map[string]time.Time
	max   int
	swept time.Time
}

// NewVerifier returns the Verifier of the broker named self; now nil is
// time.Now.
func NewVerifier(key Key, self string, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{key: key, self: self, now: now, run: nonce(16), seen: map[string]time.Time{}, max: MaxSeen}
}

// Verify checks token for a request op with body to this broker and
// takes it: it returns the token's claims, or an error wrapping
// ErrMalformed, ErrForged, ErrWrongReceiver, ErrWrongOp, ErrWrongBody,
// ErrExpired, ErrOtherRun (a token for this broker's last run),
// ErrReplayed (a token taken before) or ErrBusy (the replay
// cache is full). It is Check, then Take.
func (v *Verifier) Verify(token, op string, body []byte) (Token, error) {
	t, err := v.Check(token, op)
	if err != nil {
		return t, err
	}
	return t, v.Take(t, body)
}

// Check checks what a token says without the request's body: its
// signature, its receiver, its operation and its time (Verify's errors
// but ErrWrongBody, ErrReplayed and ErrBusy). A receiver checks it before
// it reads a body, so that no one without the key makes it read one.
func (v *Verifier) Check(token, op string) (Token, error) {
	t, payload, sig, err := ParseToken(token)
	if err != nil {
		return Token{}, err
	}
	if !hmac.Equal(sig, mac(v.key.token, "token", payload)) {
		return Token{}, ErrForged
	}
	switch {
	case t.To != v.self:
		return t, fmt.Errorf("%w (%q, not %q)", ErrWrongReceiver, t.To, v.self)
	case t.Op != op:
		return t, fmt.Errorf("%w (%q, not %q)", ErrWrongOp, t.Op, op)
	}
	now := v.now()
	issued := time.UnixMilli(t.Issued)
	if issued.After(now.Add(ClockSkew)) || issued.Before(now.Add(-TokenTTL-ClockSkew)) {
		return t, fmt.Errorf("%w (issued %s, now %s)", ErrExpired, issued.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	if op != OpState && t.Run != v.run {
		return t, ErrOtherRun
	}
	return t, nil
}

// Run names this run of the broker, which its State answers tell the
// callers that bind their other tokens to it.
func (v *Verifier) Run() string { return v.run }

// seenLen reports the size of the replay cache (tests).
func (v *Verifier) seenLen() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.seen)
}

// Take takes the token t, which Check returned, for the request body:
// ErrWrongBody if t is another body's, ErrReplayed if t was taken before,
// ErrBusy if the replay cache is full.
func (v *Verifier) Take(t Token, body []byte) error {
	if t.Body != Digest(body) {
		return ErrWrongBody
	}
	now := v.now()
	issued := time.UnixMilli(t.Issued)
	v.mu.Lock()
	defer v.mu.Unlock()
	if until, ok := v.seen[t.ID]; ok && !now.After(until) {
		return ErrReplayed
	}
	if len(v.seen) >= v.max || len(v.seen) >= v.max/2 && now.Sub(v.swept) >= time.Second {
		v.swept = now
		for id, until := range v.seen {
			if now.After(until) {
				delete(v.seen, id)
			}
		}
		if len(v.seen) >= v.max {
			return ErrBusy
		}
	}
	// Kept until the token is refused as expired: a skewed clock moves
	// both bounds alike.
	v.seen[t.ID] = issued.Add(TokenTTL + ClockSkew)
	return nil
}
