package auth

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestVerifyRemembers: a token verified moments ago is verified again
// from memory, but never past its expiry or for another audience; a
// forged or expired token is never remembered; what is remembered stays
// bounded.
func TestVerifyRemembers(t *testing.T) {
	s, err := NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	tok, _ := s.Issue("alice", "user", 30*time.Second)
	if _, err := s.Verify(tok, "user"); err != nil {
		t.Fatal(err)
	}
	if len(s.seen) != 1 {
		t.Fatalf("%d tokens remembered, want 1", len(s.seen))
	}
	if c, err := s.Verify(tok, "user"); err != nil || c.Subject != "alice" {
		t.Fatalf("again: %v, %v", c, err)
	}
	if _, err := s.Verify(tok, "admin"); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("another audience: %v, want ErrInvalidToken", err)
	}
	forged := tok[:len(tok)-2] + "AA"
	if _, err := s.Verify(forged, "user"); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("forged: %v", err)
	}
	if len(s.seen) != 1 {
		t.Errorf("%d tokens remembered after refusals, want 1", len(s.seen))
	}
	now = now.Add(31 * time.Second) // past the token's expiry, within seenTTL
	if _, err := s.Verify(tok, "user"); !errors.Is(err, ErrExpiredToken) {
		t.Errorf("expired but remembered: %v, want ErrExpiredToken", err)
	}
	for i := range seenMax + 10 {
		tok, _ := s.Issue(fmt.Sprintf("user%d", i), "user", time.Hour)
		if _, err := s.Verify(tok, "user"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.seen); n > seenMax {
		t.Errorf("%d tokens remembered, want at most %d", n, seenMax)
	}
	for i := range seenMax + 10 {
		s.Stamp(strings.Repeat("h", i+1))
	}
	if n := len(s.stamps); n > seenMax {
		t.Errorf("%d stamps remembered, want at most %d", n, seenMax)
	}
	first := s.Stamp("secret")
	if s.Stamp("secret") != first || first == s.Stamp("other") {
		t.Error("stamps are not a function of the secret")
	}
}
