package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestGuardReservesBeforeChecking: checks under way count against the
// account, so the 11th reservation is refused before any check finished,
// and a success that finds the account locked is refused.
func TestGuardReservesBeforeChecking(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := NewGuard(GuardConfig{SourceFree: -1, Now: func() time.Time { return now }})
	var held []*Attempt
	for i := range DefaultLockoutThreshold {
		a, err := g.Reserve("u", "")
		if err != nil {
			t.Fatalf("reservation %d: %v", i, err)
		}
		held = append(held, a)
	}
	if _, err := g.Reserve("u", ""); !errors.Is(err, ErrLocked) {
		t.Fatalf("11th reservation with 10 under way: %v, want ErrLocked", err)
	}
	right := held[0]
	for _, a := range held[1:] {
		a.Fail()
	}
	if err := right.Succeed(); err != nil {
		t.Fatalf("right password among the 10 checked (9 failures): %v", err)
	}
	// The success forgot none of the 9 failures: one check is left in the
	// window, and its failure locks the account.
	last, err := g.Reserve("u", "")
	if err != nil {
		t.Fatalf("the 10th check of the window: %v", err)
	}
	if _, err := g.Reserve("u", ""); !errors.Is(err, ErrLocked) {
		t.Fatalf("11th check in the window after a success: %v, want ErrLocked", err)
	}
	if !last.Fail() {
		t.Fatal("the 10th failure did not lock")
	}
	if _, err := g.Reserve("u", ""); !errors.Is(err, ErrLocked) {
		t.Fatalf("locked account reserved: %v", err)
	}
	now = now.Add(DefaultLockoutDuration)
	a, err := g.Reserve("u", "")
	if err != nil {
		t.Fatalf("after the lock-out: %v", err)
	}
	a.Succeed()
}

// TestGuardFailuresAgeOut: failures leave the account's budget only by
// aging out of the window, one by one.
func TestGuardFailuresAgeOut(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := NewGuard(GuardConfig{Threshold: 3, SourceFree: -1, Now: func() time.Time { return now }})
	for range 2 {
		a, err := g.Reserve("u", "")
		if err != nil {
			t.Fatal(err)
		}
		a.Fail()
		now = now.Add(time.Minute)
	}
	ok, _ := g.Reserve("u", "")
	if err := ok.Succeed(); err != nil {
		t.Fatal(err)
	}
	a, _ := g.Reserve("u", "")
	if _, err := g.Reserve("u", ""); !errors.Is(err, ErrLocked) {
		t.Fatalf("3 checks in the window (2 failed, 1 under way): %v, want ErrLocked", err)
	}
	a.Succeed()
	now = now.Add(DefaultLockoutWindow - 2*time.Minute) // the first failure ages out
	var held []*Attempt
	for range 2 {
		a, err := g.Reserve("u", "")
		if err != nil {
			t.Fatalf("after the first failure aged out: %v", err)
		}
		held = append(held, a)
	}
	if _, err := g.Reserve("u", ""); !errors.Is(err, ErrLocked) {
		t.Fatalf("only one failure aged out: %v, want ErrLocked", err)
	}
	if held[0].Fail() {
		t.Fatal("2 failures in the window locked a threshold of 3")
	}
	if !held[1].Fail() {
		t.Fatal("3 failures in the window did not lock")
	}
}

func TestGuardSucceedRechecksLock(t *testing.T) {
	g := NewGuard(GuardConfig{Threshold: 2, SourceFree: -1})
	slow, _ := g.Reserve("u", "")
	a, _ := g.Reserve("u", "")
	a.Fail()
	g.mu.Lock()
	g.accounts["u"].lockedUntil = g.cfg.Now().Add(time.Hour) // locked by another broker path meanwhile
	g.mu.Unlock()
	if err := slow.Succeed(); !errors.Is(err, ErrLocked) {
		t.Fatalf("success on a locked account: %v", err)
	}
}

func TestGuardSourcesBounded(t *testing.T) {
	g := NewGuard(GuardConfig{MaxSources: 100})
	for i := range 1000 {
		a, err := g.Reserve("", fmt.Sprintf("10.0.%d.%d", i/256, i%256))
		if err != nil {
			t.Fatal(err)
		}
		a.Fail()
	}
	if n := g.Sources(); n > 100 {
		t.Fatalf("%d sources remembered, want at most 100", n)
	}
}

func TestSourceKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":            "192.0.2.1",
		"::ffff:192.0.2.1":     "192.0.2.1",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"2001:db8:1:2::9":      "2001:db8:1:2::/64",
		"not an address":       "not an address",
	} {
		if got := SourceKey(in); got != want {
			t.Errorf("SourceKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSignerKeysPerAudience: a token signed for one audience does not
// verify for another even with its audience claim changed, and a stamp
// ties a token to a password hash.
func TestSignerKeysPerAudience(t *testing.T) {
	s, _ := NewSigner([]byte(strings.Repeat("k", 32)))
	tok, _ := s.Issue("m1", "vda", time.Hour)
	// A body claiming the admin audience, signed with the machine key.
	payload, _ := json.Marshal(Claims{Subject: "m1", Audience: "admin", Expires: time.Now().Add(time.Hour)})
	body := base64.RawURLEncoding.EncodeToString(payload)
	if _, err := s.Verify(body+"."+base64.RawURLEncoding.EncodeToString(s.mac("vda", body)), "admin"); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("machine-keyed token verified as admin: %v", err)
	}
	c, err := s.Verify(tok, "vda")
	if err != nil || c.Subject != "m1" {
		t.Fatalf("Verify = %+v, %v", c, err)
	}
	if again := s.Stamp("hash1"); s.Stamp("hash1") == s.Stamp("hash2") || s.Stamp("hash1") != again {
		t.Fatal("stamps do not follow the hash")
	}
}
