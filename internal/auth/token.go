package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
}

// Signer issues and verifies HMAC-SHA256 signed bearer tokens. Tokens are
// stateless: they stay valid until they expire or the key changes, so the
// verifier must still check that the subject exists and is enabled.
type Signer struct {
	key []byte
	now func() time.Time
}

// NewSigner returns a Signer with the key, which must be at least 32 bytes.
func NewSigner(key []byte) (*Signer, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("token key is %d bytes, need at least 32", len(key))
	}
	return &Signer{key: key, now: time.Now}, nil
}

// Issue returns a token for subject and audience valid for ttl.
func (s *Signer) Issue(subject, audience string, ttl time.Duration) (string, time.Time) {
	exp := s.now().Add(ttl).UTC().Truncate(time.Second)
	payload, _ := json.Marshal(Claims{Subject: subject, Audience: audience, Expires: exp})
	body := base64.RawURLEncoding.EncodeToString(payload)
	return body + "." + base64.RawURLEncoding.EncodeToString(s.mac(body)), exp
}

// Verify checks a token's signature, audience and expiry and returns its
// claims: ErrInvalidToken for a forged, malformed or wrong-audience token,
// ErrExpiredToken for an expired one.
func (s *Signer) Verify(token, audience string) (Claims, error) {
	body, sig, ok := strings.Cut(token, ".")
	if !ok || len(token) > 4096 {
		return Claims{}, ErrInvalidToken
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(body)) {
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
	if !s.now().Before(c.Expires) {
		return Claims{}, ErrExpiredToken
	}
	return c, nil
}

func (s *Signer) mac(body string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("usher-token-v1\x00"))
	m.Write([]byte(body))
	return m.Sum(nil)
}
