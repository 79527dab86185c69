// Package loadgen is a load generator for brokers: it drives a Target (an
// NFuse XML request, a REST flow, any HTTP request) under a load model,
// measures every transaction in HDR histograms and reports per step, in the
// shape of the seed experiments' tables, as JSON, CSV, SVG plots and one
// self-contained HTML page.
//
// Two load models, kept apart as measurement demands:
//
//   - closed (Stepped, FixedWork): N virtual clients, each sending its next
//     request when the last one returns, as WCAT does. A slow server is
//     offered less load.
//   - open (Open, Storm): requests start on a schedule whatever the server
//     does. When the server falls behind, a Policy says what happens: queue
//     and charge the wait (latency corrected for coordinated omission is
//     reported beside the uncorrected one) or drop and count.
//
// Every command that takes a load plan (usher load, usher bench) reads it
// with this package's parsers, in one grammar; spaces around numbers are
// ignored:
//
//	levels  C1,C2,...         these concurrencies, in turn (ParseLevels; a
//	                          stepped run needs them rising)
//	        START:STEP:MAX    START, START+STEP, ... up to MAX
//	        C                 one concurrency
//	rate    R                 arrivals per second (ParseRate)
//	        FROM:TO           a rate going from FROM to TO per second
//	rates   R1,R2,...         these rates, in turn (ParseRates)
//
// Concurrencies are whole numbers from 1, rates finite decimal numbers
// above zero (a ramp may start or end at 0), durations Go's, as
// time.ParseDuration reads them (300ms, 1h23m20s). The parsers' errors
// start with the input, quoted, so that a command can put the flag's name
// before them: --concurrency "10:x:20" is not START:STEP:MAX.
//
// loadgen knows nothing of usher's internals (of usher's packages it
// imports only the leaf internal/ctx1): it speaks HTTP to the URL it is
// given and works as well against a Citrix XML broker. Every run is
// bounded in count and in time. Any package may import it; cmd/usher wires
// it as `usher load`, and internal/bench uses it for the seed experiments.
package loadgen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
)

// A Target performs one transaction of a load test.
type Target interface {
	// Do performs transaction i (numbered from 0 across the whole run, so
	// that i picks a distinct user or resource) and returns nil on success.
	// On failure it returns an error that KindOf classifies, ideally an
	// *Error with its kind. Do is called from many goroutines at once.
	Do(ctx context.Context, i int64) error
}

// TargetFunc adapts a function to a Target.
type TargetFunc func(ctx context.Context, i int64) error

// Do calls f.
func (f TargetFunc) Do(ctx context.Context, i int64) error { return f(ctx, i) }

// Error kinds that are not an HTTP status or an NFuse ErrorId.
const (
	KindTransport = "transport"       // connection refused, reset, malformed response
	KindTLS       = "tls-certificate" // the server's certificate did not verify (usher load --ca)
	KindTimeout   = "timeout"         // the transaction outlived its timeout
	KindMismatch  = "body-mismatch"   // the answer lacked what was expected
	KindCanceled  = "canceled"        // the run was stopped mid-transaction
	KindOther     = "other"           // an error of no known kind
)

// StatusKind is the kind of an unexpected HTTP status: "http-503".
func StatusKind(code int) string { return "http-" + strconv.Itoa(code) }

// NFuseKind is the kind of an NFuse ErrorId: "nfuse-retry-required".
func NFuseKind(id string) string { return "nfuse-" + id }

// Error is a failed transaction and its kind.
type Error struct {
	Kind string
	Err  error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Kind
	}
	return e.Kind + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error of kind with a formatted message.
func Errorf(kind, format string, args ...any) error {
	return &Error{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// KindOf classifies a transaction's error: the kind of an *Error in its
// chain, else timeout, canceled or transport from what the error is.
func KindOf(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*Error](err); ok && e.Kind != "" {
		return e.Kind
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return KindTimeout
	}
	if errors.Is(err, context.Canceled) {
		return KindCanceled
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return KindTLS
	}
	if ne, ok := errors.AsType[net.Error](err); ok {
		if ne.Timeout() {
			return KindTimeout
		}
		return KindTransport
	}
	return KindOther
}
