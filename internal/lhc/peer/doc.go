// Package peer is the protocol between the brokers of a site: while the
// site DB is down, the brokers of a zone elect a zone leader (Leader)
// and hand it their launches, reconnections, logoffs, users' session
// lists and where their sessions' displays are, and, once, their recent sessions and machines (lhc.Handover).
// It holds the wire types, the client (Client, Leader) and the server
// (Handler) together, so that authenticating both ends has one place.
// internal/server assembles it; nothing else imports it.
//
// # Keys
//
// Every broker of a site holds the site's token key (in the site DB, and
// in each broker's local copy). The protocol never uses it raw: the peer
// key is auth.Signer.Derive("peer"), from which NewKey derives one key
// for request tokens, one for answer proofs and one for sealing
// handovers, each HMAC-SHA256(peer key, "usher-peer-v1\x00" + label).
//
// # Requests: tokens
//
// An operation op is POST Prefix+op with a JSON body. Its Authorization
// header is "Bearer p1.<claims>.<mac>": claims is the base64url JSON
// Token {iss: caller, aud: receiver, run: the receiver's run, op, body:
// SHA-256 of the body, iat: issued (Unix ms), jti: 16 random bytes}; mac
// is HMAC-SHA256 under the token key of the length-prefixed fields
// ("token", claims). The receiver (Verifier) takes a token only if the
// MAC is right, aud is its own name, op is the path's operation, body is
// the digest of the body received, iat is within
// [now-TokenTTL-ClockSkew, now+ClockSkew] (30 s of life; brokers' clocks
// may be 5 s apart, run NTP), and jti was not taken before, and, for
// every operation but the state handshake, run is this run of the
// receiver: a random name it makes at start and tells in its State
// answer, which the caller learns (proved) before it sends anything
// else, and again after a 503. The replay cache lives as long as the
// process; binding tokens to the run keeps a token that one run took
// from being new to the next. The replay cache keeps each jti until its
// token would be refused as expired anyway, so it holds at most the
// tokens of the last 40 s, and never more than MaxSeen: full, it refuses
// new tokens (503, retry) rather than forget one. A token sniffed on the
// wire thus opens nothing: not a second time, not at another broker, not
// another operation, not another body. All but the body's digest and the
// jti are checked before the body is read (at most 64 KiB, a handover's
// DefaultMaxBody), so that no one without the key makes a broker read a
// body.
//
// # Answers: proofs
//
// The token's jti is also the caller's challenge. Every answer to a
// token taken carries HeaderNonce (the receiver's own random nonce) and
// HeaderProof: base64url HMAC-SHA256 under the proof key of ("answer",
// receiver, caller, op, jti, receiver's nonce, status, SHA-256 of the
// answer's body). The Client takes no answer without the proof of the
// broker it called (ErrUnproven), so whoever answers at a broker's
// address without the site key is never taken for it: the state
// operation (State: its name and whether it is in outage mode) is the
// handshake that a Leader requires of a candidate before it elects it,
// and every later answer (a launch's host and ticket) is proved alike.
// Requests refused (a bad token) are answered without a proof. Both ends
// thus prove they hold the site key: the caller with its token, the
// receiver with its proof, each bound to the other's name and to fresh
// values.
//
// # Handovers: sealed
//
// A handover carries the machines' control tokens and credentials. It
// is handed only to a candidate that has just proved itself, and its
// body is sealed for that broker alone: AES-256-GCM under the seal key,
// with the caller's and the receiver's names as additional data. A
// stranger that takes the leader's address between the proof and the
// handover, or anyone reading the wire, learns nothing from it.
//
// # Candidates
//
// The leader is the first broker by name of the zone, among this one and
// Candidates of the broker registry (the local copy's in an outage) that
// prove themselves. A record whose LastSeen is older than the registry's
// timeout, against the registry's newest sign of life, is not a
// candidate: its broker had stopped without removing it.
//
// # Transport
//
// The Client takes its *http.Client and URL scheme from ClientConfig:
// TLS with the site's CA plugs in there. Over plain HTTP, what the
// protocol proves holds (no stranger is elected, no secret is handed to
// one, no token replays), but the requests and answers other than the
// sealed handover can be read on the wire: users' names, sessions and
// launch tickets. Run brokers over TLS off loopback.
package peer
