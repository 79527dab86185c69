// Package hotpath serves a listener's hottest requests, such as
// enumerations, on a lean HTTP/1.1 connection loop, and hands every other
// connection to a net/http server.
//
// Every connection starts in the loop. While its requests are plain
// HTTP/1.1 for a path that Config.Hot names, the loop reads them, runs the
// same http.Handler that net/http would, and writes the answer in one
// system call (headers and body together). At the first request it does
// not take (another path, or anything unusual in its framing: chunked
// bodies, Expect, Upgrade, escapes in the path, HTTP/1.0, an oversized
// head), it hands the connection, with the bytes it has buffered and not
// consumed, to the net/http server for good. The loop therefore only
// removes net/http's per-request overhead on the hot paths; what a request
// means, and every error, stays net/http's and the handler's.
//
// The loop's ResponseWriter supports what the hot handlers use: Header,
// WriteHeader, Write, Flush, and read and write deadlines (for
// http.ResponseController). It does not support Hijack. A request's context
// is the connection's, cancelled when the server closes, not when the peer
// goes away: hot handlers must do bounded work.
//
// Only internal/server imports it.
package hotpath
