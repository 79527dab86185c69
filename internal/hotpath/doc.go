// Package hotpath serves a listener's hottest requests, such as
// enumerations, on lean HTTP/1.1 event loops, and hands every other
// connection to a net/http server.
//
// On Linux, for a TCP listener, Serve runs one event loop per CPU that Go
// uses (GOMAXPROCS). Each loop is one goroutine with an epoll set of its
// own: it accepts connections from the shared listening socket (each
// loop woken alone), reads requests into a fixed buffer per connection,
// runs the handler for each whole request on itself, and writes the answer
// without waiting; what the socket does not take at once (a large blob
// goes out with sendfile(2) from its memory file) is sent as the socket
// drains. Many connections' events come back from one epoll_wait and no
// goroutine switches per request, which is most of what a small answer
// costs on a goroutine per connection. Elsewhere, and with
// Config.Goroutines or a listener that is not TCP (TLS), each connection
// gets a goroutine of its own, with the same behaviour.
//
// A handler on a loop must not wait: the loop's other connections would
// wait with it. Its request's context comes from Config.LoopContext, so
// that what it calls can say it would wait (the broker returns
// broker.ErrWouldWait under broker.NoWait); the handler then calls Defer,
// returns, and the loop runs the request again on a goroutine of its own,
// where it may wait, and sends the answer once it is made. Requests behind
// it on the connection wait for it; other connections do not.
//
// While a connection's requests are plain HTTP/1.1 for a path that
// Config.Hot names, and each fits the buffer whole (head and body), the
// loop answers them. At the first request it does not take (another path,
// or anything unusual in its framing: chunked bodies, Expect, Upgrade,
// escapes in the path, HTTP/1.0, an oversized head or body), it hands the
// connection, with the bytes it has buffered and not consumed, to the
// net/http server for good. What a request means, and every error, stays
// net/http's and the handler's.
//
// The loop's ResponseWriter supports what the hot handlers use: Header,
// WriteHeader, Write, Flush, and read and write deadlines (for
// http.ResponseController). It does not support Hijack. A request's context
// is the connection's, cancelled when the server closes, not when the peer
// goes away: hot handlers must do bounded work.
//
// With Config.NetHTTP, a Server runs no loop and reads no request: every
// connection goes to the net/http server as it is accepted, with the
// Limiter, the send buffer and TLS as in the other modes. It is the
// switch for the day the loop misbehaves.
//
// With Config.Limiter, a Server bounds its connections per client
// address and in total, in both modes and with other Servers sharing the
// Limiter: each connection takes a slot as it is accepted, before any of
// its bytes are read, and gives it back once closed, wherever it was
// closed (on the loop, on its goroutine, in net/http after a hand-over,
// at Shutdown). At the total, the connection idle longest is closed for
// the new one.
//
// internal/server assembles it; the hot handlers (internal/nfuse,
// internal/api) call Defer.
package hotpath
