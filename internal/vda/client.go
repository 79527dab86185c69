package vda

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// maxResponseBody bounds what the client reads of a broker's answer.
const maxResponseBody = 1 << 20

// ClientConfig configures a Client.
type ClientConfig struct {
	// BrokerURL is the broker's base URL, e.g. https://broker:8443, or
	// several separated by commas: the brokers of the machine's zone,
	// used in turn as each stops answering. An http:// URL must name a
	// loopback host unless InsecureBroker: the machine credential would
	// cross the network in clear.
	BrokerURL string
	// FallbackURL lists, the same way, brokers of the primary zone, used
	// only while none of BrokerURL's answers (the zone must allow it:
	// site.Zone.PrimaryFallback); the client goes back to its own zone's
	// brokers after OwnZoneRetry.
	FallbackURL string
	// OwnZoneRetry is how long the client stays with a fallback broker
	// before trying its own zone's again; 0 means DefaultOwnZoneRetry.
	OwnZoneRetry time.Duration
	// HTTPClient sends the requests; nil uses a client of its own, whose
	// TLS configuration is TLS. Its Timeout, if any, applies on top of
	// Timeout.
	HTTPClient *http.Client
	// TLS verifies the brokers' certificates (tlsconf.ClientConfig); nil
	// means the system roots.
	TLS *tls.Config
	// InsecureBroker allows http:// broker URLs of hosts off loopback.
	InsecureBroker bool
	// Timeout bounds one attempt; 0 means DefaultCallTimeout.
	Timeout time.Duration
	// Attempts is how many times a call is tried while the broker is
	// unreachable, overloaded or timing out; 0 means DefaultCallAttempts.
	Attempts int
	// MinBackoff and MaxBackoff bound the jittered wait between attempts;
	// 0 means 100ms and 2s.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
}

// Client calls a broker's VDA API. It is safe for concurrent use, and one
// Client serves any number of machines: the machine credential is an
// argument of each call. The client never logs the enrolment secret or a
// credential.
type Client struct {
	// bases are the brokers' base URLs: the own zone's, then the
	// fallbacks (from index own on); cur is the one in use, and
	// fellBackAt when the client last moved to a fallback (Unix nanos).
	bases      []string
	own        int
	cur        atomic.Int32
	fellBackAt atomic.Int64
	ownRetry   time.Duration
	http       *http.Client
	timeout    time.Duration
	attempts   int
	minBackoff time.Duration
	maxBackoff time.Duration
	log        *slog.Logger
}

// DefaultOwnZoneRetry is how long a client stays with a fallback broker
// before trying its own zone's brokers again.
const DefaultOwnZoneRetry = 30 * time.Second

// NewClient returns a Client of the brokers at cfg.BrokerURL.
func NewClient(cfg ClientConfig) (*Client, error) {
	own, err := brokerURLs(cfg.BrokerURL, cfg.InsecureBroker)
	if err != nil {
		return nil, err
	}
	if len(own) == 0 {
		return nil, fmt.Errorf("no broker URL")
	}
	fallback, err := brokerURLs(cfg.FallbackURL, cfg.InsecureBroker)
	if err != nil {
		return nil, fmt.Errorf("fallback: %w", err)
	}
	c := &Client{
		bases:      append(own, fallback...),
		own:        len(own),
		ownRetry:   cmp.Or(max(cfg.OwnZoneRetry, 0), DefaultOwnZoneRetry),
		http:       cfg.HTTPClient,
		timeout:    cmp.Or(max(cfg.Timeout, 0), DefaultCallTimeout),
		attempts:   cfg.Attempts,
		minBackoff: cmp.Or(max(cfg.MinBackoff, 0), 100*time.Millisecond),
		maxBackoff: cmp.Or(max(cfg.MaxBackoff, 0), 2*time.Second),
		log:        cfg.Logger,
	}
	if c.http == nil {
		c.http = &http.Client{Transport: newTransport(0, cfg.TLS)}
	}
	if c.attempts <= 0 {
		c.attempts = DefaultCallAttempts
	}
	if c.log == nil {
		c.log = discard
	}
	return c, nil
}

// brokerURLs parses a comma-separated list of base URLs. An http:// one
// off loopback is refused unless insecure.
func brokerURLs(list string, insecure bool) ([]string, error) {
	var bases []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("broker URL %q: want http://HOST[:PORT] or https://HOST[:PORT]", s)
		}
		if u.User != nil {
			return nil, fmt.Errorf("broker URL must not carry credentials")
		}
		if u.Scheme == "http" && !insecure && !localHost(u.Host) {
			return nil, fmt.Errorf("broker URL %q: %w: the machine credential would cross the network in clear; "+
				"use https://, or pass --insecure-broker", s, ErrPlainBroker)
		}
		bases = append(bases, strings.TrimRight(u.String(), "/"))
	}
	return bases, nil
}

// broker returns the broker in use and its index: back to the first of
// the own zone once the client has stayed ownRetry with a fallback.
func (c *Client) broker() (int, string) {
	i := int(c.cur.Load())
	if i >= c.own && time.Since(time.Unix(0, c.fellBackAt.Load())) > c.ownRetry && c.cur.CompareAndSwap(int32(i), 0) {
		c.log.Info("trying the brokers of the machine's own zone again", "broker", c.bases[0])
		i = 0
	}
	return i, c.bases[i]
}

// failover moves from broker i, which did not answer, to the next, unless
// another call has moved already.
func (c *Client) failover(i int, err error) {
	next := (i + 1) % len(c.bases)
	if !c.cur.CompareAndSwap(int32(i), int32(next)) {
		return
	}
	if next >= c.own && i < c.own {
		c.fellBackAt.Store(time.Now().UnixNano())
		c.log.Warn("no broker of the machine's zone answers; falling back to the primary zone's", "broker", c.bases[next], keyErr, err)
		return
	}
	c.log.Warn("broker does not answer; failing over", "from", c.bases[i], "to", c.bases[next], keyErr, err)
}

// Broker returns the base URL of the broker the client uses now.
func (c *Client) Broker() string { return c.bases[c.cur.Load()] }

// NewTransport returns an HTTP transport for talking to one broker, keeping
// up to idle connections to it open (0 means 16), that verifies https
// brokers against the system roots, TLS 1.2 at least (set its
// TLSClientConfig for others). A simulator of many machines shares one.
func NewTransport(idle int) *http.Transport { return newTransport(idle, nil) }

// newTransport is NewTransport verifying https brokers with tlsCfg (nil:
// the system roots).
func newTransport(idle int, tlsCfg *tls.Config) *http.Transport {
	if idle <= 0 {
		idle = 16
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	if tlsCfg == nil {
		tlsCfg = &tls.Config{MinVersion: tlsconf.MinVersion}
	}
	t.TLSClientConfig = tlsCfg.Clone()
	t.MaxIdleConns = idle
	t.MaxIdleConnsPerHost = idle
	t.IdleConnTimeout = 90 * time.Second
	t.ResponseHeaderTimeout = DefaultCallTimeout
	return t
}

// CloseIdleConnections closes the client's idle connections to the broker.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Credential is a machine credential from enrolment. Its String and
// LogValue hide the token, so that it cannot reach a log by accident.
type Credential struct {
	Token     string
	ExpiresAt time.Time
}

func (c Credential) String() string { return "Credential{REDACTED}" }

// LogValue implements slog.LogValuer.
func (c Credential) LogValue() slog.Value {
	return slog.GroupValue(slog.Time("expires_at", c.ExpiresAt))
}

// Enrol exchanges the site's enrolment secret for the machine's credential.
// A wrong secret gets an error matching ErrUnauthorized; a machine the site
// does not configure gets a *BrokerError with code "not_found".
func (c *Client) Enrol(ctx context.Context, machine, secret string) (Credential, error) {
	return c.enrol(ctx, vdaproto.EnrolRequest{Machine: machine, Secret: secret})
}

func (c *Client) enrol(ctx context.Context, req vdaproto.EnrolRequest) (Credential, error) {
	var resp vdaproto.EnrolResponse
	if err := c.call(ctx, vdaproto.PathEnrol, "", req, &resp); err != nil {
		return Credential{}, fmt.Errorf("enrol %q: %w", req.Machine, err)
	}
	if resp.Credential == "" {
		return Credential{}, fmt.Errorf("enrol %q: the broker sent no credential", req.Machine)
	}
	return Credential{Token: resp.Credential, ExpiresAt: resp.ExpiresAt}, nil
}

// Machines returns the names of the site's machines that match req's
// filters, in name order, asking with the enrolment secret in req. A wrong
// secret gets an error matching ErrUnauthorized; a catalog or delivery
// group the site does not have gets a *BrokerError with code "not_found".
func (c *Client) Machines(ctx context.Context, req vdaproto.MachinesRequest) ([]string, error) {
	var resp vdaproto.MachinesResponse
	if err := c.call(ctx, vdaproto.PathMachines, "", req, &resp); err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	return resp.Machines, nil
}

// Renew exchanges a machine's current credential for a fresh token of it,
// before it expires. A revoked or replaced credential gets ErrUnauthorized.
func (c *Client) Renew(ctx context.Context, cred Credential, machine string) (Credential, error) {
	var resp vdaproto.EnrolResponse
	if err := c.call(ctx, vdaproto.PathRenew, cred.Token, vdaproto.RenewRequest{Machine: machine}, &resp); err != nil {
		return Credential{}, fmt.Errorf("renew the credential of %q: %w", machine, err)
	}
	if resp.Credential == "" {
		return Credential{}, fmt.Errorf("renew the credential of %q: the broker sent no credential", machine)
	}
	return Credential{Token: resp.Credential, ExpiresAt: resp.ExpiresAt}, nil
}

// Register announces the machine as ready for sessions and returns how often
// to heartbeat. A refused credential gets an error matching ErrUnauthorized.
func (c *Client) Register(ctx context.Context, cred Credential, req vdaproto.RegisterRequest) (vdaproto.RegisterResponse, error) {
	var resp vdaproto.RegisterResponse
	if err := c.call(ctx, vdaproto.PathRegister, cred.Token, req, &resp); err != nil {
		return resp, fmt.Errorf("register %q: %w", req.Machine, err)
	}
	return resp, nil
}

// Heartbeat reports the machine's load. An error matching ErrNotRegistered
// asks the machine to register again.
func (c *Client) Heartbeat(ctx context.Context, cred Credential, hb vdaproto.Heartbeat) (vdaproto.HeartbeatResponse, error) {
	var resp vdaproto.HeartbeatResponse
	if err := c.call(ctx, vdaproto.PathHeartbeat, cred.Token, hb, &resp); err != nil {
		return resp, fmt.Errorf("heartbeat %q: %w", hb.Machine, err)
	}
	return resp, nil
}

// SendEvent reports a session event. An error matching ErrNotRegistered
// asks the machine to register again; the broker takes a repeated event
// calmly, so the event may be sent again afterwards.
func (c *Client) SendEvent(ctx context.Context, cred Credential, ev vdaproto.SessionEvent) error {
	if err := c.call(ctx, vdaproto.PathEvents, cred.Token, ev, nil); err != nil {
		return fmt.Errorf("send %s event of session %q: %w", ev.Event, ev.SessionID, err)
	}
	return nil
}

// BrokerError is an error answer from the broker: its HTTP status and the
// code and message of its JSON error document.
type BrokerError struct {
	StatusCode int
	Code       string
	Message    string
	// RetryAfter is the broker's Retry-After, 0 when it sent none.
	RetryAfter time.Duration
}

func (e *BrokerError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("broker answered %d %s", e.StatusCode, e.Code)
	}
	return fmt.Sprintf("broker answered %d %s: %s", e.StatusCode, e.Code, e.Message)
}

// Is matches ErrNotRegistered (409 not_registered) and ErrUnauthorized (401).
func (e *BrokerError) Is(target error) bool {
	switch target {
	case ErrNotRegistered:
		return e.StatusCode == http.StatusConflict && e.Code == vdaproto.CodeNotRegistered
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized
	}
	return false
}

// temporary reports whether the broker may answer differently soon.
func (e *BrokerError) temporary() bool {
	switch e.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// call posts in as JSON to path and decodes the answer into out (nil for
// none). It tries again while the broker is unreachable, times out or
// answers 429, 502, 503 or 504, up to c.attempts times in all: at once
// with the next broker when it has several, after a jittered backoff
// once it has tried them all. A broker that refuses the machine (403: one
// of another zone) passes it to the next too.
func (c *Client) call(ctx context.Context, path, cred string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	round := 0 // brokers tried since the last wait
	for attempt := 1; ; attempt++ {
		i, base := c.broker()
		err := c.once(ctx, base, path, cred, body, out)
		if err == nil || ctx.Err() != nil || attempt >= c.attempts {
			return err
		}
		var be *BrokerError
		isBE := errors.As(err, &be)
		if isBE && !be.temporary() && be.StatusCode != http.StatusForbidden {
			return err
		}
		if round++; round < len(c.bases) {
			c.failover(i, err)
			continue
		}
		round = 0
		if len(c.bases) > 1 {
			c.failover(i, err)
		}
		if isBE && !be.temporary() {
			return err // every broker refused
		}
		wait := jittered(attempt-1, c.minBackoff, c.maxBackoff)
		if isBE {
			wait = max(wait, min(be.RetryAfter, c.maxBackoff))
		}
		c.log.DebugContext(ctx, "broker call failed; retrying", "path", path, keyAttempt, attempt, keyWait, wait, keyErr, err)
		if !sleep(ctx, wait) {
			return err
		}
	}
}

// once makes one attempt of call.
func (c *Client) once(ctx context.Context, base, path, cred string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", AgentVersion)
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if cerr := certificateError(base, err); cerr != nil {
			return cerr
		}
		return err // a *url.Error naming the URL, never the body or headers
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return decodeError(resp, raw)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	// Answers are decoded leniently: a newer broker may add fields.
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}

// decodeError turns an error answer into a *BrokerError. A body that is not
// the JSON error document (a proxy's HTML page, say) is not echoed.
func decodeError(resp *http.Response, raw []byte) *BrokerError {
	be := &BrokerError{StatusCode: resp.StatusCode}
	var doc vdaproto.ErrorBody
	if json.Unmarshal(raw, &doc) == nil && doc.Error.Code != "" {
		be.Code, be.Message = doc.Error.Code, doc.Error.Message
	} else {
		be.Code = strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_"))
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		be.RetryAfter = time.Duration(s) * time.Second
	}
	return be
}

// localHost reports whether a dial of host[:port] stays on this host: a
// loopback address, or the unspecified one (a wildcard listener's own
// address, as a broker's simulated VDAs are given).
func localHost(hostport string) bool {
	if tlsconf.LoopbackAddr(hostport) {
		return true
	}
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsUnspecified()
}

// ErrPlainBroker refuses an http:// broker URL off loopback.
var ErrPlainBroker = errors.New("not https and not a loopback host")

// CertificateError is a broker whose TLS certificate the client refused:
// not signed by a trusted CA, issued for another name, expired, or not
// the one pinned. The client goes on to its next broker.
type CertificateError struct {
	// Broker is the broker's base URL.
	Broker string
	Err    error
}

func (e *CertificateError) Error() string {
	return fmt.Sprintf("broker %s: its TLS certificate is refused: %v", e.Broker, e.Err)
}

func (e *CertificateError) Unwrap() error { return e.Err }

// certificateError returns a *CertificateError when err is a refused
// certificate of the broker at base, with the reason in words; nil for
// any other error.
func certificateError(base string, err error) error {
	var (
		verr     *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &unknown):
		return &CertificateError{base, fmt.Errorf("not signed by a trusted CA (give the broker's CA with --broker-ca): %w", unknown)}
	case errors.As(err, &hostname):
		return &CertificateError{base, fmt.Errorf("issued for another host name: %w", hostname)}
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return &CertificateError{base, fmt.Errorf("expired or not yet valid: %w", invalid)}
	case errors.As(err, &invalid):
		return &CertificateError{base, invalid}
	case errors.As(err, &verr):
		return &CertificateError{base, verr.Err}
	case errors.Is(err, tlsconf.ErrPinMismatch):
		return &CertificateError{base, err}
	}
	return nil
}
