package nfuse

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/blob"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/hotpath"
)

// Path is where NFuse clients post requests. Clients spell it in several
// cases; IsPath matches any.
const Path = "/scripts/wpnbr.dll"

// IsPath reports whether a URL path is the NFuse path, in any case.
func IsPath(p string) bool { return strings.EqualFold(p, Path) }

// Defaults for Config.
const (
	// DefaultMaxBodyBytes bounds a request body. Real requests are under
	// 2 KB (Citrix IMA refused anything over 4 KB).
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxPendingLaunches bounds the launches kept for RequestTicket
	// and RequestLaunchRef.
	DefaultMaxPendingLaunches = 10000
	// DefaultIOTimeout bounds the reading of a request body and the
	// writing of its answer (FMA's per-request timeout is 20 s).
	DefaultIOTimeout = 20 * time.Second
)

// Config configures a Handler. The farm name, the trust in ID-only
// credentials and the anonymous application list come from the site
// settings of the broker's current snapshot (Name, TrustXMLRequests,
// AnonymousAppData), so that they follow configuration changes.
type Config struct {
	// Broker is required (a nil *broker.Broker is none).
	Broker Broker
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Limits bound a request's XML.
	Limits Limits
	// MaxPendingLaunches bounds the launches remembered for older clients'
	// RequestTicket and RequestLaunchRef; 0 means DefaultMaxPendingLaunches.
	MaxPendingLaunches int
	// IOTimeout bounds the time to read a request body, and separately
	// the time to write its answer, so that a slow or stalled client
	// cannot hold a connection; 0 means DefaultIOTimeout, negative no
	// bound. The deadlines are set on the connection and left for
	// net/http to clear, which it does before it reads the connection's
	// next request.
	IOTimeout time.Duration
	Logger    *slog.Logger
	// Observe, when set, is called after each request with its kind, the
	// ErrorId answered ("" for success) and the time taken.
	Observe func(kind Kind, errorID string, elapsed time.Duration)
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Handler serves the NFuse protocol at Path; other paths get 404 and
// methods other than POST 405. It starts no goroutines and needs no Close.
type Handler struct {
	cfg      Config
	broker   Broker
	log      *slog.Logger
	snaps    atomic.Pointer[snapCache]
	icons    icons
	launches *launches
	lengths  lengths
	decoded  *decoded
}

var _ http.Handler = (*Handler)(nil)

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if b, ok := cfg.Broker.(*broker.Broker); cfg.Broker == nil || ok && b == nil {
		return nil, errors.New("nfuse: Config.Broker is required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxPendingLaunches <= 0 {
		cfg.MaxPendingLaunches = DefaultMaxPendingLaunches
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.IOTimeout == 0 {
		cfg.IOTimeout = DefaultIOTimeout
	}
	cfg.Limits = cfg.Limits.withDefaults()
	return &Handler{cfg: cfg, broker: cfg.Broker, log: cfg.Logger,
		launches: newLaunches(cfg.MaxPendingLaunches, cfg.Now), decoded: newDecoded()}, nil
}

// Log attribute keys.
const (
	logRequest = "request"
	logUser    = "user"
	logRemote  = "remote"
	logErrorID = "error_id"
	logErr     = "err"
)

// exchange is one request being answered. Exchanges are pooled with
// their buffers.
type exchange struct {
	r    *http.Request
	req  *Request
	kind Kind
	// resp is the response element's name.
	resp string
	// body holds the request body; w builds answers that are not served
	// from a cache.
	body []byte
	w    xmlw
	// shared is the answer when it comes from a cache: its
	// Content-Length header is shared too, and it is sent as a blob.
	shared *blob.Blob
	// errID is the ErrorId answered, "" for success.
	errID string
	// user is the authenticated user, for logs.
	user string
	// wait is set when answering would wait (broker.ErrWouldWait): the
	// request is to be run again where it may.
	wait bool
}

var exchanges = sync.Pool{New: func() any {
	return &exchange{body: make([]byte, 0, 4096), w: xmlw{b: make([]byte, 0, 4096)}}
}}

// maxPooled is the largest buffer kept for reuse; a rare big one is left
// to the garbage collector.
const maxPooled = 256 << 10

func getExchange(r *http.Request) *exchange {
	x := exchanges.Get().(*exchange)
	x.r = r
	return x
}

func putExchange(x *exchange) {
	if cap(x.body) > maxPooled || cap(x.w.b) > maxPooled {
		return
	}
	*x = exchange{body: x.body[:0], w: xmlw{b: x.w.b[:0]}}
	exchanges.Put(x)
}

func (x *exchange) begin() {
	x.w.raw(prolog)
	x.w.start(x.resp)
}

func (x *exchange) finish() []byte {
	x.w.end(x.resp)
	x.w.raw(epilog)
	return x.w.b
}

// ServeHTTP answers one NFuse request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !IsPath(r.URL.Path) {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "NFuse requests are POSTed", http.StatusMethodNotAllowed)
		return
	}
	start := time.Now()
	dl := deadlinerOf(w)
	if h.cfg.IOTimeout > 0 {
		dl.SetReadDeadline(start.Add(h.cfg.IOTimeout))
	}
	x := getExchange(r)
	defer putExchange(x)

	var answer []byte
	err := h.readBody(x)
	if err == nil {
		if x.req = h.decoded.get(x.body, start); x.req == nil {
			if x.req, err = Decode(x.body, h.cfg.Limits); err == nil {
				h.decoded.put(x.body, x.req, start)
			}
		}
	}
	if err != nil {
		answer = h.refuse(x, err)
	} else {
		x.kind = x.req.Kind
		x.resp = responseName(x.req.Kind, x.req.Element)
		// On an event loop, only what answers from memory is served;
		// the rest (launches, sessions, logons) runs again off it.
		if !fromMemory(x.kind) && hotpath.Defer(w) {
			return
		}
		answer = h.serve(r.Context(), x)
		if x.wait {
			if hotpath.Defer(w) {
				return
			}
			// Only a caller on an event loop is told to wait.
			answer = h.fail(x, errors.New("nfuse: the broker would wait, off an event loop"))
		}
	}

	if h.cfg.IOTimeout > 0 {
		dl.SetWriteDeadline(time.Now().Add(h.cfg.IOTimeout))
	}
	hdr := w.Header()
	hdr["Content-Type"] = contentType
	if x.shared != nil {
		hdr["Content-Length"] = h.lengths.header(len(answer))
	} else {
		hdr["Content-Length"] = []string{strconv.Itoa(len(answer))}
	}
	if errors.Is(err, errTooLarge) {
		hdr["Connection"] = connectionClose
	}
	w.WriteHeader(http.StatusOK)
	if x.shared != nil {
		blob.Write(w, x.shared)
	} else {
		w.Write(answer)
	}
	if h.cfg.Observe != nil {
		h.cfg.Observe(x.kind, x.errID, time.Since(start))
	}
}

// fromMemory reports whether requests of kind k are answered from
// memory when their credentials were verified moments ago: what an event
// loop may serve on itself.
func fromMemory(k Kind) bool {
	switch k {
	case KindAppData, KindCapabilities, KindServerFarmData, KindProtocolInfo, KindAltAddress, KindUnknown:
		return true
	}
	return false
}

// deadliner sets a connection's deadlines, as net/http's ResponseWriter
// does.
type deadliner interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// deadlinerOf returns w itself when it sets deadlines (net/http's does,
// without the allocation of a ResponseController), else a
// ResponseController, which finds them behind wrappers.
func deadlinerOf(w http.ResponseWriter) deadliner {
	if d, ok := w.(deadliner); ok {
		return d
	}
	return http.NewResponseController(w)
}

var (
	contentType     = []string{ContentType}
	connectionClose = []string{"close"}
)

// errTooLarge is a body over Config.MaxBodyBytes.
var errTooLarge = errors.New("request body too large")

// readBody reads the body into x.body. For a body over the limit it
// returns errTooLarge with what it read: nothing when the client announced
// the length, so that a client that sent "Expect: 100-continue" need not
// send the body at all.
func (h *Handler) readBody(x *exchange) error {
	limit := h.cfg.MaxBodyBytes
	if x.r.ContentLength > limit {
		return errTooLarge
	}
	b := x.body[:0]
	if n := x.r.ContentLength; n > 0 && int64(cap(b)) < n+1 {
		b = make([]byte, 0, n+1)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := x.r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		x.body = b
		switch {
		case int64(len(b)) > limit:
			return errTooLarge
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
}

// refuse answers a request that could not be read: unspecified, in the
// response element of the request type when it could be made out.
func (h *Handler) refuse(x *exchange, err error) []byte {
	element := sniffRequest(x.body)
	var de *DecodeError
	if errors.As(err, &de) && de.Element != "" {
		element = de.Element
	}
	x.kind = kindOf(element)
	x.resp = responseName(x.kind, element)
	h.log.Info("unreadable NFuse request", logRequest, x.kind, logRemote, x.r.RemoteAddr, logErr, err)
	return h.fail(x, errMalformed)
}

// responseName returns the response element for a request: the known
// one, or for an unknown Request* element its Response* twin when the name
// is plain ASCII letters, else "Response".
func responseName(k Kind, element string) string {
	if k != KindUnknown {
		return k.Response()
	}
	rest, ok := cutPrefixFold(element, "Request")
	if !ok || rest == "" || len(rest) > 64 || !isNameBytes([]byte(rest)) {
		return "Response"
	}
	return "Response" + rest
}

// fail answers with the ErrorId of err. What the client is not told is
// logged: as a warning when it is a failure of usher's, at debug level
// when it is the client's doing (a bad request, a spent ticket, an
// application that is not the user's); failed logons are logged by
// logonFailed.
func (h *Handler) fail(x *exchange, err error) []byte {
	x.errID = errorID(err)
	switch {
	case x.errID != ErrorUnspecified, errors.Is(err, errMalformed): // logged already
	case clientError(err):
		h.log.Debug("NFuse request refused", logRequest, x.kind, logUser, x.user, logRemote, x.r.RemoteAddr, logErr, err)
	default:
		h.log.Warn("NFuse request failed", logRequest, x.kind, logUser, x.user, logRemote, x.r.RemoteAddr, logErr, err)
	}
	x.w.b = x.w.b[:0]
	x.begin()
	x.w.elem("ErrorId", x.errID)
	if x.kind == KindAppData {
		x.w.elem("LeasingStatus", leasingStatus)
	}
	return x.finish()
}

// serve answers a decoded request.
func (h *Handler) serve(ctx context.Context, x *exchange) []byte {
	switch x.kind {
	case KindCapabilities:
		return h.capabilities(x)
	case KindServerFarmData:
		return h.serverFarmData(x)
	case KindServerData:
		if !h.broker.Snapshot().Settings.ServerDataCredentials {
			return h.serverData(x)
		}
	case KindProtocolInfo:
		return h.protocolInfo(x)
	case KindAltAddress:
		return h.altAddress(x)
	case KindUnknown:
		h.log.Info("unknown NFuse request", logRequest, x.req.Element, logRemote, x.r.RemoteAddr)
		return h.fail(x, errUnsupported)
	}
	// The rest authenticate or broker: they run in an admission slot.
	release, err := h.broker.Admit()
	if err != nil {
		return h.fail(x, err)
	}
	defer release()
	switch x.kind {
	case KindServerData:
		return h.serverDataWithCredentials(ctx, x)
	case KindValidateCredentials:
		return h.validateCredentials(ctx, x)
	case KindAppData:
		return h.appData(ctx, x)
	case KindAddress:
		return h.address(ctx, x)
	case KindTicket, KindLaunchRef:
		return h.redeem(ctx, x)
	case KindReconnectSessionData, KindDiscSessionData:
		return h.sessionData(ctx, x)
	case KindDisconnectUserSessions, KindLogoffUserSessions:
		return h.endSessions(ctx, x)
	}
	return h.fail(x, errUnsupported)
}

// clientAddress is the client's address as the request gives it, else as
// the connection shows it.
func clientAddress(x *exchange) string {
	if a := x.req.ClientAddress.Value; a != "" {
		return a
	}
	host, _, err := net.SplitHostPort(x.r.RemoteAddr)
	if err != nil {
		return x.r.RemoteAddr
	}
	return host
}

// lengths caches the Content-Length header values of answers served from
// caches, which are few, so that serving one allocates nothing. It is a
// copy-on-write map: reads take no lock.
type lengths struct {
	m atomic.Pointer[map[int][]string]
}

// maxLengths bounds the cache; past it, it starts again.
const maxLengths = 256

func (l *lengths) header(n int) []string {
	old := l.m.Load()
	if old != nil {
		if v, ok := (*old)[n]; ok {
			return v
		}
	}
	v := []string{strconv.Itoa(n)}
	next := map[int][]string{n: v}
	if old != nil && len(*old) < maxLengths {
		for k, x := range *old {
			next[k] = x
		}
	}
	l.m.CompareAndSwap(old, &next) // on a race, the other writer's map will do
	return v
}
