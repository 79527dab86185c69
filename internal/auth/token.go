package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Token errors. Callers answer both with a plain 401.
var (
	ErrInvalidToken = errors.New("invalid token")
	ErrExpiredToken = errors.New("expired token")
)

// Claims are what a token asserts.
type Claims struct {
	Subject  string    `json:"sub"` // the user or admin name
	Audience string    `json:"aud"` // "admin" or "user": a token for one never opens the other
	Expires  time.Time `json:"exp"`
	// Stamp ties the token to the subject's password (see Signer.Stamp):
	// a new password revokes the tokens issued under the old one. Empty
	// for machine credentials.
	Stamp string `json:"stp,omitempty"`
	// ID, when set, names what the token was issued for (a machine's
	// credential), so that the verifier can revoke it one by one.
	ID string `json:"jti,omitempty"`
}

// Signer issues and verifies HMAC-SHA256 signed bearer tokens. Tokens are
// stateless: they stay valid until they expire or the key changes, so the
// verifier must still check that the subject exists and is enabled, and
// that the token's Stamp is the subject's current one. Each audience signs
// with its own key, derived from the one key with the audience as label,
// so that a token of one kind never verifies as another even if the
// audience checks were wrong.
type Signer struct {
	key []byte
	now func() time.Time

	mu   sync.Mutex
	keys map[string][]byte // audience -> derived key
	// seen remembers tokens verified moments ago, stamps the stamps
	// computed: a client sends the same token with each request, and
	// checking it again costs more than the enumeration it opens.
	seen   map[string]seenToken
	stamps map[string]string
}

// seenToken is a verified token's claims, good until until.
type seenToken struct {
	c     Claims
	until time.Time
}

// Bounds of what a Signer remembers: verified tokens for at most
// seenTTL (and never past their expiry), seenMax of them, and seenMax
// stamps.
const (
	seenTTL = time.Minute
	seenMax = 4096
)

// NewSigner returns a Signer with the key, which must be at least 32 bytes.
func NewSigner(key []byte) (*Signer, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("token key is %d bytes, need at least 32", len(key))
	}
	return &Signer{key: key, now: time.Now, keys: map[string][]byte{}, seen: map[string]seenToken{}, stamps: map[string]string{}}, nil
}

// Issue returns a token for subject and audience valid for ttl.
func (s *Signer) Issue(subject, audience string, ttl time.Duration) (string, time.Time) {
	return s.IssueClaims(Claims{Subject: subject, Audience: audience, Expires: s.now().Add(ttl)})
}

// IssueClaims returns a token asserting c, expiring at c.Expires
// (truncated to the second).
func (s *Signer) IssueClaims(c Claims) (string, time.Time) {
	c.Expires = c.Expires.UTC().Truncate(time.Second)
	payload, _ := json.Marshal(c)
	body := base64.RawURLEncoding.EncodeToString(payload)
	return body + "." + base64.RawURLEncoding.EncodeToString(s.mac(c.Audience, body)), c.Expires
}

// Now returns the signer's clock.
func (s *Signer) Now() time.Time { return s.now() }

// Stamp returns the stamp of a token for a subject whose stored password
// hash is secret: a keyed fingerprint that reveals nothing of the hash and
// changes with it.
func (s *Signer) Stamp(secret string) string {
	s.mu.Lock()
	st, ok := s.stamps[secret]
	s.mu.Unlock()
	if ok {
		return st
	}
	m := hmac.New(sha256.New, s.derived("stamp"))
	m.Write([]byte(secret))
	st = base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:12])
	s.mu.Lock()
	if len(s.stamps) >= seenMax {
		clear(s.stamps)
	}
	s.stamps[secret] = st
	s.mu.Unlock()
	return st
}

// Verify checks a token's signature, audience and expiry and returns its
// claims: ErrInvalidToken for a forged, malformed or wrong-audience token,
// ErrExpiredToken for an expired one.
func (s *Signer) Verify(token, audience string) (Claims, error) {
	now := s.now()
	key := audience + "\x00" + token
	s.mu.Lock()
	seen, ok := s.seen[key]
	s.mu.Unlock()
	if ok && now.Before(seen.until) {
		return seen.c, nil
	}
	c, err := s.verify(token, audience, now)
	if err == nil {
		s.mu.Lock()
		if len(s.seen) >= seenMax {
			for k, t := range s.seen {
				if !now.Before(t.until) {
					delete(s.seen, k)
				}
			}
			if len(s.seen) >= seenMax {
				clear(s.seen)
			}
		}
		until := now.Add(seenTTL)
		if c.Expires.Before(until) {
			until = c.Expires
		}
		s.seen[key] = seenToken{c: c, until: until}
		s.mu.Unlock()
	}
	return c, err
}

func (s *Signer) verify(token, audience string, now time.Time) (Claims, error) {
	body, sig, ok := strings.Cut(token, ".")
	if !ok || len(token) > 4096 {
		return Claims{}, ErrInvalidToken
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(audience, body)) {
		return Claims{}, ErrInvalidToken
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return Claims{}, ErrInvalidToken
	}
	var c Claims
	if err := json.Unmarshal(raw, &c); err != nil || c.Audience != audience || c.Subject == "" {
		return Claims{}, ErrInvalidToken
	}
	if !now.Before(c.Expires) {
		return Claims{}, ErrExpiredToken
	}
	return c, nil
}

func (s *Signer) mac(audience, body string) []byte {
	m := hmac.New(sha256.New, s.derived("token\x00"+audience))
	m.Write([]byte("usher-token-v2\x00"))
	m.Write([]byte(body))
	return m.Sum(nil)
}

// Derive returns a key of its own for another package's use of the
// site key, named by label (the peer protocol's "peer"): HMAC-SHA256 of
// the key under a label that no token or stamp of this package uses, so
// that the one key never serves two purposes.
func (s *Signer) Derive(label string) []byte {
	return slices.Clone(s.derived("ext\x00" + label))
}

// derived returns the key for label: HMAC-SHA256(key, "usher key\x00" +
// label).
func (s *Signer) derived(label string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[label]
	if !ok {
		m := hmac.New(sha256.New, s.key)
		m.Write([]byte("usher key\x00" + label))
		k = m.Sum(nil)
		s.keys[label] = k
	}
	return k
}
