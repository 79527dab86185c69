package auth

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// cheap keeps the tests fast; the format and verification do not depend on cost.
var cheap = Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1, SaltLen: 16, KeyLen: 32}

func TestHashPassword(t *testing.T) {
	h, err := HashPassword("s3cret", cheap)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Fatalf("hash %q is not a PHC argon2id string", h)
	}
	h2, _ := HashPassword("s3cret", cheap)
	if h == h2 {
		t.Fatal("two hashes of one password are equal: salt not random")
	}
	for _, tc := range []struct {
		password string
		want     bool
	}{{"s3cret", true}, {"s3cret ", false}, {"", false}, {"S3cret", false}} {
		got, err := VerifyPassword(h, tc.password)
		if err != nil || got != tc.want {
			t.Errorf("VerifyPassword(%q) = %v, %v; want %v", tc.password, got, err, tc.want)
		}
	}
}

func TestVerifyPasswordDefaultParams(t *testing.T) {
	h, err := HashPassword("pw", DefaultParams)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := VerifyPassword(h, "pw"); !ok || err != nil {
		t.Fatalf("VerifyPassword = %v, %v", ok, err)
	}
}

func TestVerifyPasswordMalformed(t *testing.T) {
	for _, h := range []string{
		"", "plain", "$argon2i$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5",
		"$argon2id$v=18$m=64,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5",
		"$argon2id$v=19$m=99999999,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5",
		"$argon2id$v=19$m=64,t=1,p=1$!!$a2V5a2V5a2V5a2V5a2V5a2V5",
		"$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$",
	} {
		if ok, err := VerifyPassword(h, "x"); ok || !errors.Is(err, ErrMalformedHash) {
			t.Errorf("VerifyPassword(%q) = %v, %v; want ErrMalformedHash", h, ok, err)
		}
	}
}

func FuzzVerifyPassword(f *testing.F) {
	h, _ := HashPassword("pw", cheap)
	f.Add(h, "pw")
	f.Add("$argon2id$v=19$m=1,t=1,p=1$AAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA", "")
	f.Fuzz(func(t *testing.T, hash, pw string) {
		ok, err := VerifyPassword(hash, pw)
		if ok && err != nil {
			t.Fatal("match with an error")
		}
	})
}

func TestSigner(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	s, err := NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	tok, exp := s.Issue("admin", "admin", time.Hour)
	if !exp.Equal(now.Add(time.Hour)) {
		t.Fatalf("expiry %v", exp)
	}
	c, err := s.Verify(tok, "admin")
	if err != nil || c.Subject != "admin" {
		t.Fatalf("Verify = %+v, %v", c, err)
	}
	t.Run("wrong audience", func(t *testing.T) {
		if _, err := s.Verify(tok, "user"); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("forged", func(t *testing.T) {
		other, _ := NewSigner([]byte(strings.Repeat("o", 32)))
		forged, _ := other.Issue("admin", "admin", time.Hour)
		if _, err := s.Verify(forged, "admin"); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("err = %v", err)
		}
		body, _, _ := strings.Cut(tok, ".")
		if _, err := s.Verify(body+".AAAA", "admin"); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		now = now.Add(time.Hour)
		if _, err := s.Verify(tok, "admin"); !errors.Is(err, ErrExpiredToken) {
			t.Fatalf("err = %v", err)
		}
	})
	if _, err := NewSigner([]byte("short")); err == nil {
		t.Fatal("short key accepted")
	}
}

func TestVerifiedCache(t *testing.T) {
	h, _ := HashPassword("pw", cheap)
	c := NewVerifiedCache(time.Minute, 100)
	now := time.Now()
	c.now = func() time.Time { return now }
	if ok, _ := c.Verify("u", "bad", h); ok {
		t.Fatal("wrong password verified")
	}
	if c.Len() != 0 {
		t.Fatal("a failed verification was cached")
	}
	if ok, _ := c.Verify("u", "pw", h); !ok {
		t.Fatal("right password failed")
	}
	if c.Len() != 1 {
		t.Fatalf("Len = %d, want 1", c.Len())
	}
	// A changed stored hash must not verify the old password from the cache.
	h2, _ := HashPassword("new", cheap)
	if ok, _ := c.Verify("u", "pw", h2); ok {
		t.Fatal("old password verified against a new hash")
	}
	c.Forget("u")
	if c.Len() != 0 {
		t.Fatal("Forget left entries")
	}
	c.Verify("u", "pw", h)
	now = now.Add(2 * time.Minute) // expired: verified again, still true
	if ok, _ := c.Verify("u", "pw", h); !ok {
		t.Fatal("expired entry broke verification")
	}
	small := NewVerifiedCache(time.Minute, 2)
	for _, n := range []string{"a", "b", "c", "d"} {
		small.Verify(n, "pw", h)
	}
	if small.Len() > 2 {
		t.Fatalf("Len = %d over max 2", small.Len())
	}
}

func BenchmarkVerifiedCacheHit(b *testing.B) {
	h, _ := HashPassword("pw", DefaultParams)
	c := NewVerifiedCache(time.Hour, 1000)
	c.Verify("u", "pw", h)
	b.ResetTimer()
	for b.Loop() {
		c.Verify("u", "pw", h)
	}
}
