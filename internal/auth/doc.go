// Package auth verifies credentials and issues tokens: argon2id password
// hashes in PHC format, HMAC-signed bearer tokens, and a cache of verified
// credentials so that a repeated (user, password) pair costs microseconds
// instead of an argon2id computation. NameKey is the key account names
// are counted and cached under, the same for every spelling a directory
// matches to one entry (RFC 4518 string preparation).
//
// It does no network or database I/O; callers look users up and pass the
// stored hash in. It imports no other usher package; the broker, the APIs
// and the commands import it.
package auth
