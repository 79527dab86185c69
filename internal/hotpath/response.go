package hotpath

import (
	"errors"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/blob"
)

// maxBuffered bounds the body a response without a Content-Length keeps
// to send with one; past it the response goes out chunked.
const maxBuffered = 64 << 10

// response is the loop's http.ResponseWriter. A connection reuses one.
type response struct {
	o           out
	req         *http.Request
	header      http.Header
	status      int
	wroteHeader bool
	headerSent  bool
	// cl is the Content-Length the handler declared, -1 for none.
	cl      int64
	written int64
	chunked bool
	// buf holds the body of a response without a Content-Length until
	// it ends or outgrows maxBuffered.
	buf        []byte
	hbuf       []byte
	keys       []string
	closeAfter bool
	err        error
	// onLoop is set for a response on the event loop, which Defer may
	// turn into deferred: the request is then run again off the loop.
	onLoop, deferred bool
}

// out is where a response goes: a connection of the goroutine loop or
// of the event loop.
type out interface {
	// send writes bufs, in one system call where it can. The caller may
	// reuse bufs once it returns.
	send(bufs ...[]byte) error
	// files reports whether sendBlob can send from a file.
	files() bool
	// sendBlob writes hdr, then b, which f holds from its start, without
	// copying b from user space. It returns the bytes of b sent.
	sendBlob(hdr []byte, b *blob.Blob, f *os.File) (int64, error)
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

var (
	_ http.ResponseWriter = (*response)(nil)
	_ http.Flusher        = (*response)(nil)
)

func (w *response) reset(o out, r *http.Request) {
	if w.header == nil {
		w.header = http.Header{}
	}
	clear(w.header)
	buf := w.buf[:0]
	if cap(buf) > maxBuffered {
		buf = nil
	}
	*w = response{o: o, req: r, header: w.header, cl: -1, buf: buf, hbuf: w.hbuf[:0], keys: w.keys[:0]}
}

// idleBuffer bounds a buffer an idle connection keeps for its next
// request (see lconn.trim).
const idleBuffer = 4 << 10

// trim drops the body buffer when it is past idleBuffer.
func (w *response) trim() {
	if cap(w.buf) > idleBuffer {
		w.buf = nil
	}
}

func (w *response) Header() http.Header { return w.header }

// errDeferred is the error of a deferred response's writes.
var errDeferred = errors.New("hotpath: the response was deferred")

// Defer asks the event loop to run the request that w answers again, on
// a goroutine of its own where the handler may wait (on a password check,
// a directory, the site DB), and reports whether it will. The handler must
// then return at once: what it writes to w is dropped. Defer reports false
// when w is not the event loop's (the handler already runs where it may
// wait) or when the response has begun.
//
// A handler on the event loop runs with Config.LoopContext's context, so
// that what it calls can tell it would wait.
func Defer(w http.ResponseWriter) bool {
	rw, ok := w.(*response)
	if !ok || !rw.onLoop || rw.wroteHeader {
		return false
	}
	rw.deferred, rw.err = true, errDeferred
	return true
}

func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("hotpath: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.wroteHeader || code < 200 {
		return // informational answers are not sent; a second call is ignored, as net/http does
	}
	w.wroteHeader, w.status = true, code
	if v := w.header.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			w.cl = n
		} else {
			delete(w.header, "Content-Length")
		}
	}
	if !bodyAllowed(code) {
		w.cl = -1
	}
	for _, v := range w.header["Connection"] {
		if asciiEqualFold(v, "close") {
			w.closeAfter = true
		}
	}
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	switch {
	case w.cl >= 0:
		if w.written+int64(len(p)) > w.cl {
			return 0, http.ErrContentLength
		}
		if !w.headerSent {
			w.send(w.head(p, -1), p)
		} else {
			w.send(p)
		}
	case w.chunked:
		w.sendChunk(p)
	case len(w.buf)+len(p) <= maxBuffered:
		w.buf = append(w.buf, p...)
		return len(p), nil
	default:
		w.startChunked(p)
		w.sendChunk(p)
	}
	if w.err != nil {
		return 0, w.err
	}
	w.written += int64(len(p))
	return len(p), nil
}

// Flush sends what is buffered; a response without a Content-Length goes
// on chunked.
func (w *response) Flush() { w.FlushError() }

// FlushError is Flush, returning the connection's error.
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	switch {
	case w.err != nil:
	case w.headerSent:
	case w.cl >= 0 || !bodyAllowed(w.status):
		w.send(w.head(nil, -1))
	default:
		w.startChunked(nil)
	}
	return w.err
}

// SetReadDeadline and SetWriteDeadline set the connection's deadlines,
// for http.ResponseController.
func (w *response) SetReadDeadline(t time.Time) error  { return w.o.SetReadDeadline(t) }
func (w *response) SetWriteDeadline(t time.Time) error { return w.o.SetWriteDeadline(t) }

// startChunked sends the head of a chunked response and what is buffered.
func (w *response) startChunked(next []byte) {
	w.chunked = true
	w.send(w.head(cmpBytes(w.buf, next), -1))
	if len(w.buf) > 0 {
		w.sendChunk(w.buf)
		w.written += int64(len(w.buf))
		w.buf = w.buf[:0]
	}
}

func cmpBytes(a, b []byte) []byte {
	if len(a) > 0 {
		return a
	}
	return b
}

// finish ends the response.
func (w *response) finish() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	switch {
	case w.chunked:
		w.send(lastChunk)
	case w.cl >= 0 || !bodyAllowed(w.status):
		if !w.headerSent {
			w.send(w.head(nil, -1))
		}
		if w.written < w.cl {
			w.closeAfter = true // the client cannot tell where the next answer starts
		}
	case !w.headerSent:
		w.send(w.head(w.buf, int64(len(w.buf))), w.buf)
		w.written = int64(len(w.buf))
	}
	return w.err
}

var lastChunk = []byte("0\r\n\r\n")

func (w *response) sendChunk(p []byte) {
	if len(p) == 0 {
		return
	}
	size := strconv.AppendInt(w.hbuf[:0], int64(len(p)), 16)
	size = append(size, "\r\n"...)
	w.hbuf = size
	w.send(size, p, crlf)
}

// send writes bufs in one system call where it can.
func (w *response) send(bufs ...[]byte) {
	if w.err != nil {
		return
	}
	if err := w.o.send(bufs...); err != nil {
		w.err, w.closeAfter = err, true
	}
}

// head serializes the response head into w.hbuf: the handler's headers,
// a Date, the framing (length, when at least 0, else the handler's
// Content-Length or chunked), and a Content-Type sniffed from body when
// the handler set none.
func (w *response) head(body []byte, length int64) []byte {
	w.headerSent = true
	if w.req.Close {
		w.closeAfter = true
	}
	b := append(w.hbuf[:0], statusLine(w.status)...)
	keys := w.keys[:0]
	for k := range w.header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.keys = keys
	for _, k := range keys {
		switch k {
		case "Connection", "Transfer-Encoding":
			continue
		case "Content-Length":
			if length >= 0 || w.chunked {
				continue
			}
		}
		if !isToken([]byte(k)) {
			continue
		}
		for _, v := range w.header[k] {
			b = append(b, k...)
			b = append(b, ": "...)
			b = appendValue(b, v)
			b = append(b, "\r\n"...)
		}
	}
	if _, ok := w.header["Date"]; !ok {
		b = appendDate(b, time.Now())
	}
	allowed := bodyAllowed(w.status)
	if _, ok := w.header["Content-Type"]; !ok && allowed && len(body) > 0 {
		b = append(b, "Content-Type: "...)
		b = append(b, http.DetectContentType(body)...)
		b = append(b, "\r\n"...)
	}
	switch {
	case !allowed:
	case w.chunked:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case length >= 0:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, length, 10)
		b = append(b, "\r\n"...)
	}
	if w.closeAfter {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	w.hbuf = b
	return b
}

// appendValue appends a header value with line breaks made spaces, so
// that no value can end the head early.
func appendValue(b []byte, v string) []byte {
	if !strings.ContainsAny(v, "\r\n") {
		return append(b, v...)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return b
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// statusLines are the status lines of the codes net/http names.
var statusLines = func() map[int]string {
	m := map[int]string{}
	for code := 100; code < 600; code++ {
		if t := http.StatusText(code); t != "" {
			m[code] = "HTTP/1.1 " + strconv.Itoa(code) + " " + t + "\r\n"
		}
	}
	return m
}()

func statusLine(code int) string {
	if l, ok := statusLines[code]; ok {
		return l
	}
	return "HTTP/1.1 " + strconv.Itoa(code) + " status code " + strconv.Itoa(code) + "\r\n"
}

// dateLine is a Date header line, good for the second it was made in.
type dateLine struct {
	sec  int64
	line []byte
}

var currentDate atomic.Pointer[dateLine]

func appendDate(b []byte, now time.Time) []byte {
	sec := now.Unix()
	d := currentDate.Load()
	if d == nil || d.sec != sec {
		line := now.UTC().AppendFormat([]byte("Date: "), http.TimeFormat)
		d = &dateLine{sec: sec, line: append(line, "\r\n"...)}
		currentDate.Store(d)
	}
	return append(b, d.line...)
}

// urlOf returns the URL of a request target without escapes.
func urlOf(path, query string) *url.URL {
	return &url.URL{Path: path, RawQuery: query}
}
