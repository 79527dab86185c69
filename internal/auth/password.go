package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Params are argon2id cost parameters.
type Params struct {
	MemoryKiB   uint32
	Iterations  uint32
	Parallelism uint8
	SaltLen     int
	KeyLen      uint32
}

// DefaultParams follow OWASP's argon2id recommendation (19 MiB, 2
// iterations, 1 lane): about 20-40 ms per hash on one core.
var DefaultParams = Params{MemoryKiB: 19 * 1024, Iterations: 2, Parallelism: 1, SaltLen: 16, KeyLen: 32}

// ErrMalformedHash is returned for a stored hash that is not an argon2id
// PHC string this package can verify.
var ErrMalformedHash = errors.New("malformed argon2id hash")

var b64 = base64.RawStdEncoding

// HashPassword returns the PHC string of password under p with a fresh
// random salt: $argon2id$v=19$m=...,t=...,p=...$SALT$KEY.
func HashPassword(password string, p Params) (string, error) {
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("read salt: %w", err)
	}
	key := argon2.IDKey([]byte(password), salt, p.Iterations, p.MemoryKiB, p.Parallelism, p.KeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.MemoryKiB, p.Iterations, p.Parallelism, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// VerifyPassword reports whether password matches the PHC hash. It returns
// ErrMalformedHash (and false) when the hash cannot be parsed. The
// comparison takes constant time in the key.
func VerifyPassword(hash, password string) (bool, error) {
	p, salt, key, err := parseHash(hash)
	if err != nil {
		return false, err
	}
	got := argon2.IDKey([]byte(password), salt, p.Iterations, p.MemoryKiB, p.Parallelism, uint32(len(key)))
	return subtle.ConstantTimeCompare(got, key) == 1, nil
}

var argon2IDKey = argon2.IDKey

func parseHash(hash string) (p Params, salt, key []byte, err error) {
	parts := strings.Split(hash, "$")
	// "", "argon2id", "v=19", "m=..,t=..,p=..", salt, key
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, nil, nil, ErrMalformedHash
	}
	var v int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return p, nil, nil, ErrMalformedHash
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.MemoryKiB, &p.Iterations, &p.Parallelism); err != nil {
		return p, nil, nil, ErrMalformedHash
	}
	// Refuse parameters that would let a stored hash exhaust the process.
	if p.MemoryKiB == 0 || p.MemoryKiB > 1<<20 || p.Iterations == 0 || p.Iterations > 64 || p.Parallelism == 0 {
		return p, nil, nil, ErrMalformedHash
	}
	if salt, err = b64.DecodeString(parts[4]); err != nil || len(salt) < 8 {
		return p, nil, nil, ErrMalformedHash
	}
	if key, err = b64.DecodeString(parts[5]); err != nil || len(key) < 16 || len(key) > 128 {
		return p, nil, nil, ErrMalformedHash
	}
	return p, salt, key, nil
}

// RandomSecret returns n random bytes encoded as unpadded base64url, for
// generated passwords and secrets.
func RandomSecret(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("auth: crypto/rand failed: " + err.Error()) // never happens on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
